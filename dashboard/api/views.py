"""The versioned JSON API (/api/v1/): thin views that validate parameters and call a selector.

Described by dashboard/api/openapi.json (served at /api/v1/openapi.json; tests/integration/test_api.py checks
the document against these views). People use their session; machines send an API token
(`Authorization: Bearer owu_...`, manage.py issue_api_token) acting with its user's roles; jobs
report starts with their pipeline token (owp_): their endpoints are in dashboard/api/job_views.py. Every error is JSON {"error": "..."}: 400 names
the parameter and the value, 401 without credentials, 403 without the role, 404 unknown ids,
503 with Retry-After while the database is unavailable (dashboard/unavailable.py).
"""
from __future__ import annotations

import base64
import binascii
import re
from datetime import timedelta
from functools import lru_cache, wraps
from pathlib import Path

from django.http import HttpResponse, JsonResponse
from django.middleware.csrf import CsrfViewMiddleware
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt

from dashboard import params
from dashboard.accounts.roles import VIEWER, role_required
from dashboard.models import Pipeline
from dashboard.monitoring.overview import pipelines_filtered
from dashboard.monitoring.selectors import (
    collector_status,
    pipeline_batches_keyset,
    pipeline_freshness,
    pipeline_lag_points,
    pipeline_with_evaluation,
)
from offsetwatch.lib import downsample
from offsetwatch.lib.timefmt import iso, ms_datetime, ms_iso
from streamoffsets.urls import mask_secrets

OPENAPI_PATH = Path(__file__).with_name("openapi.json")


MAX_ID = 2**63 - 1  # bigint: a larger id cannot exist, and PostgreSQL would refuse to compare it


BATCHES_LIMIT_DEFAULT, BATCHES_LIMIT_MAX = 100, 1000


POINTS_DEFAULT, POINTS_MAX = 1000, 10_000


LAG_RANGE_DEFAULT = timedelta(hours=1)


TEXT_MAX = 1000  # the longest name we store (a group); longer cannot match anything


class ApiError(Exception):
    """An answer other than a bad parameter (a 404); bad parameters are params.BadParam."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


def json_error(status: int, message: str) -> JsonResponse:
    return JsonResponse({"error": message}, status=status)


class _CsrfCheck(CsrfViewMiddleware):
    def _reject(self, request, reason):
        return reason


def _csrf_failure(request) -> str | None:
    """Why a session-authenticated unsafe request fails Django's CSRF check (None: it passes)."""
    check = _CsrfCheck(lambda r: None)
    check.process_request(request)
    return check.process_view(request, None, (), {})


def api_view(*, methods: tuple[str, ...] = ("GET",), role: str = VIEWER):
    """An API endpoint: JSON 405 for other methods, session or API-token authentication with
    `role`, ApiError turned into its JSON answer and params.BadParam (any parameter, parsed by
    dashboard.params like every page's) into a 400 "invalid parameter 'name': 'value' why".

    CSRF: the view is csrf-exempt so token clients (no cookie, no CSRF token) can POST, and the
    check is run here for session-authenticated unsafe requests, where a forged cross-site
    request would carry the cookie. A Bearer token cannot be sent cross-site without the
    caller's script holding it, so token requests need no CSRF token.
    """
    def decorator(view):
        @wraps(view)
        def checked(request, *args, **kwargs):
            if request.method not in ("GET", "HEAD", "OPTIONS", "TRACE") and request.auth_method == "session":
                reason = _csrf_failure(request)
                if reason:
                    return json_error(403, f"CSRF check failed ({reason}): session clients must send the "
                                           "X-CSRFToken header; machines use an API token")
            try:
                return view(request, *args, **kwargs)
            except ApiError as exc:
                return json_error(exc.status, exc.message)
            except params.BadParam as exc:
                return json_error(400, f"invalid {exc}")

        authenticated = role_required(role, tokens=True)(checked)

        @wraps(view)
        def entry(request, *args, **kwargs):
            # 405 before asking who is calling: it needs no database.
            if request.method not in methods and not (request.method == "HEAD" and "GET" in methods):
                response = json_error(405, f"method {request.method} is not allowed here; use {', '.join(methods)}")
                response["Allow"] = ", ".join(methods)
                return response
            return authenticated(request, *args, **kwargs)

        return csrf_exempt(entry)

    return decorator


# The API's parameters: absent or empty is the default; a value given twice, a 400 (params.single).

def _given(request, name: str) -> str | None:
    return params.single(request.GET, name) or None


def int_param(request, name: str, *, default: int, low: int, high: int) -> int:
    raw = _given(request, name)
    return default if raw is None else params.whole_number(name, raw, low, high)


def time_param(request, name: str) -> int | None:
    """An instant as epoch milliseconds (params.epoch_ms); None when absent."""
    raw = _given(request, name)
    return None if raw is None else params.epoch_ms(name, raw)


def text_param(request, name: str) -> str | None:
    raw = _given(request, name)
    return None if raw is None else params.text(name, raw, TEXT_MAX)


def statuses_param(request, name: str = "status") -> list[int] | None:
    raw = text_param(request, name)
    return None if raw is None else params.statuses(name, raw)


def _cursor_encode(before_ms: int) -> str:
    return base64.urlsafe_b64encode(f"v1:{before_ms}".encode()).decode().rstrip("=")


def _cursor_decode(raw: str) -> int:
    try:
        text = base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)).decode("ascii")
    except (binascii.Error, ValueError):
        text = ""
    version, _, ms = text.partition(":")
    if version != "v1" or not re.fullmatch(r"[0-9]{1,15}", ms, re.ASCII):
        raise params.BadParam("cursor", raw, "is not a cursor this API returned (use next_cursor as given)")
    return int(ms)


def _pipeline(pipeline_id: int) -> Pipeline:
    if pipeline_id > MAX_ID:
        raise ApiError(404, f"no pipeline with id {pipeline_id}")
    try:
        return pipeline_with_evaluation(pipeline_id=pipeline_id)
    except Pipeline.DoesNotExist:
        raise ApiError(404, f"no pipeline with id {pipeline_id}") from None


_PARTITION_FIELDS = ("partition", "committed", "low", "high", "lag", "state", "messages_lost", "lag_seconds",
                     "lag_method", "retention_margin", "retention_seconds_left", "lag_absent", "status",
                     "status_reason")


def _partition_json(row: dict) -> dict:
    out = {key: row.get(key) for key in _PARTITION_FIELDS}
    out["lag_method"] = out["lag_method"] or ""
    # Evaluations stored before the partition rules have no partition status (replaced next cycle).
    out["status"] = out["status"] or "OK"
    out["status_reason"] = out["status_reason"] or ""
    # Rows evaluated before #13 lack the key: false (what every non-compacted topic says).
    out["lag_is_upper_bound"] = bool(row.get("lag_is_upper_bound"))
    return out


def pipeline_json(p: Pipeline) -> dict:
    e = getattr(p, "evaluation", None)
    margins = [r["retention_margin"] for r in (e.partitions if e else []) if r.get("retention_margin") is not None]
    return {
        "id": p.pk, "topic": p.topic, "group": p.group, "store": p.store.name, "store_kind": p.store.kind,
        "cluster": p.store.cluster.name,
        "status": e.status_name if e else None, "reasons": e.reasons if e else [],
        "evaluated_at": iso(e.evaluated_at) if e else None,
        "total_lag": e.total_lag if e else None, "lag_seconds": e.lag_seconds if e else None,
        "lag_seconds_method": e.lag_seconds_method if e else None,
        "retention_seconds_left": e.retention_seconds_left if e else None,
        "retention_margin": min(margins) if margins else None,
        "batch_interval_s": e.batch_interval_s if e else None,
        "last_batch_ms": p.last_batch_ms, "last_batch_at": ms_iso(p.last_batch_ms),
        "owner": p.owner, "archived_at": iso(p.archived_at),
    }


@api_view()
def api_pipelines(request):
    pipelines = pipelines_filtered(
        statuses=statuses_param(request), store=text_param(request, "store"),
        cluster=text_param(request, "cluster"), q=text_param(request, "q"),
    )
    return JsonResponse({"pipelines": [pipeline_json(p) for p in pipelines]})


@api_view()
def api_pipeline(request, pipeline_id: int):
    pipeline = _pipeline(pipeline_id)
    e = getattr(pipeline, "evaluation", None)
    freshness = pipeline_freshness(pipeline=pipeline)
    return JsonResponse({
        **pipeline_json(pipeline),
        "partitions": [_partition_json(r) for r in (e.partitions if e else [])],
        "freshness": {"stale": freshness.stale, "reasons": freshness.reasons},
    })


@api_view()
def api_pipeline_partitions(request, pipeline_id: int):
    pipeline = _pipeline(pipeline_id)
    e = getattr(pipeline, "evaluation", None)
    return JsonResponse({
        "pipeline": pipeline.pk, "evaluated_at": iso(e.evaluated_at) if e else None,
        "partitions": [_partition_json(r) for r in (e.partitions if e else [])],
    })


@api_view()
def api_pipeline_batches(request, pipeline_id: int):
    from_ms, to_ms = time_param(request, "from"), time_param(request, "to")
    if from_ms is not None and to_ms is not None and from_ms > to_ms:
        raise params.BadParam("from", request.GET["from"], f"is after 'to' ({request.GET['to']!r})")
    limit = int_param(request, "limit", default=BATCHES_LIMIT_DEFAULT, low=1, high=BATCHES_LIMIT_MAX)
    cursor = text_param(request, "cursor")
    before_ms = _cursor_decode(cursor) if cursor is not None else None
    pipeline = _pipeline(pipeline_id)
    batches, more = pipeline_batches_keyset(
        pipeline=pipeline, from_ms=from_ms, to_ms=to_ms, before_ms=before_ms, limit=limit)
    return JsonResponse({
        "pipeline": pipeline.pk, "from": ms_iso(from_ms), "to": ms_iso(to_ms), "limit": limit,
        "batches": [
            {"batch_time_ms": b.batch_time_ms, "batch_time": ms_iso(b.batch_time_ms), "batch_id": b.batch_id,
             "committed": b.committed, "records": b.records, "offsets": b.offsets}
            for b in batches
        ],
        "next_cursor": _cursor_encode(batches[-1].batch_time_ms) if more else None,
    })


@api_view()
def api_pipeline_lag(request, pipeline_id: int):
    from_ms, to_ms = time_param(request, "from"), time_param(request, "to")
    points = int_param(request, "points", default=POINTS_DEFAULT, low=3, high=POINTS_MAX)
    method = _given(request, "method") or "minmax"
    if method not in ("minmax", "lttb"):
        raise params.BadParam("method", method, "is not a downsampling method; use minmax (keeps every spike) or lttb")
    until = ms_datetime(to_ms) if to_ms is not None else timezone.now()
    # Saturating: 'to' in year 1 has no hour before it.
    since = ms_datetime(from_ms) if from_ms is not None else params.shifted(until, -LAG_RANGE_DEFAULT)
    if since > until:
        raise params.BadParam("from", request.GET["from"], f"is after 'to' ({request.GET.get('to', 'now')!r})")
    pipeline = _pipeline(pipeline_id)
    raw = pipeline_lag_points(pipeline=pipeline, since=since, until=until)
    reduce = downsample.minmax_buckets if method == "minmax" else downsample.lttb
    kept = reduce(raw, points)
    return JsonResponse({
        "pipeline": pipeline.pk, "from": iso(since), "to": iso(until), "method": method,
        "max_points": points, "samples": len(raw), "points": [[x, y] for x, y in kept],
    })


def _collector_part_json(part, now) -> dict:
    since = part.seconds_since(now)
    return {
        "source": part.source, "label": part.label, "up": part.up, "healthy": part.up is not False,
        "detail": part.detail, "last_seen_at": iso(part.last_seen_at),
        "seconds_since_last_seen": round(since, 1) if since is not None else None,
    }


@api_view()
def api_collectors(request):
    """The collector system's parts first ("collector:broker", "collector:beat",
    "collector:workers"), then every source; all judged now from timestamps, so a stopped
    beat, worker or Redis shows here although it wrote nothing."""
    status = collector_status()
    now = status.now
    return JsonResponse({
        "healthy": status.healthy,
        "down": [p.name for p in status.down],
        "checked_at": iso(now),
        "collectors": [_collector_part_json(p, now) for p in status.parts],
        "queued": status.queued,
        "sources": [
            {
                # Labels and errors name store URLs: masked (already when recorded; again here for
                # rows recorded before, as the pages and /metrics do).
                "source": h.source, "label": mask_secrets(h.label), "healthy": h.healthy, "state": h.state,
                "problem": mask_secrets(h.problem) or None,
                "seconds_since_last_poll": round(h.poll_age_s, 1) if h.poll_age_s is not None else None,
                "last_attempt_at": iso(h.last_attempt_at), "last_success_at": iso(h.last_success_at),
                "last_duration_ms": h.last_duration_ms, "consecutive_failures": h.consecutive_failures,
                "last_error": mask_secrets(h.last_error) or None, "last_error_at": iso(h.last_error_at),
                "last_error_by": (h.last_error_by or "source") if h.consecutive_failures else None,
                "warning": mask_secrets(h.warning) or None,
            }
            for h in status.sources
        ],
    })


@lru_cache(maxsize=1)
def _openapi_bytes() -> bytes:
    return OPENAPI_PATH.read_bytes()


@api_view()
def api_openapi(request):
    return HttpResponse(_openapi_bytes(), content_type="application/json")


@csrf_exempt
def api_not_found(request, rest: str = ""):
    """Any other path under /api/v1/: a JSON 404, not Django's HTML page."""
    return json_error(404, f"no API endpoint {request.path}; the endpoints are listed in /api/v1/openapi.json")
