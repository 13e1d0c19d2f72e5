"""Thin views: validate input, call a selector, render."""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import plotly
from django.contrib.auth.decorators import login_required
from django.db import connection
from django.http import Http404, HttpResponse, JsonResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.cache import cache_control
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from dashboard import charts, selectors, services
from dashboard.models import Pipeline


def _pipeline_or_404(pipeline_id: int) -> Pipeline:
    try:
        return selectors.pipeline_get(pipeline_id=pipeline_id)
    except Pipeline.DoesNotExist:
        raise Http404(f"no pipeline with id {pipeline_id}") from None


def _range_key(request) -> str:
    key = request.GET.get("range", "1h")
    return key if key in selectors.RANGES else "1h"


@require_GET
@login_required
def overview(request):
    return render(request, "dashboard/overview.html", _overview_context())


@require_GET
@login_required
def overview_live(request):
    return render(request, "dashboard/partials/overview_table.html", _overview_context())


def _overview_context() -> dict:
    return {
        "pipelines": selectors.pipelines_overview(),
        "incidents": selectors.open_incidents(),
        "unreachable": selectors.unreachable_sources(),
        "now": timezone.now(),
    }


def _pipeline_context(request, pipeline: Pipeline) -> dict:
    page_obj, batch_partitions, batch_rows = selectors.pipeline_batches(
        pipeline=pipeline, page=request.GET.get("page", 1)
    )
    return {
        "pipeline": pipeline,
        "freshness": selectors.pipeline_freshness(pipeline=pipeline),
        "evaluation": selectors.pipeline_evaluation(pipeline=pipeline),
        "incidents": selectors.pipeline_incidents(pipeline=pipeline),
        "start_reports": selectors.pipeline_start_reports(pipeline=pipeline),
        "page_obj": page_obj,
        "batch_partitions": batch_partitions,
        "batch_rows": batch_rows,
        "problems": selectors.store_problems(store=pipeline.store),
        "range_key": _range_key(request),
        "ranges": list(selectors.RANGES),
    }


@require_GET
@login_required
def pipeline_detail(request, pipeline_id: int):
    pipeline = _pipeline_or_404(pipeline_id)
    return render(request, "dashboard/pipeline.html", _pipeline_context(request, pipeline))


@require_GET
@login_required
def pipeline_live(request, pipeline_id: int):
    pipeline = _pipeline_or_404(pipeline_id)
    return render(request, "dashboard/partials/pipeline_live.html", _pipeline_context(request, pipeline))


@require_GET
@login_required
def pipeline_status(request, pipeline_id: int):
    pipeline = _pipeline_or_404(pipeline_id)
    return render(request, "dashboard/partials/pipeline_status.html", {
        "pipeline": pipeline,
        "freshness": selectors.pipeline_freshness(pipeline=pipeline),
        "evaluation": selectors.pipeline_evaluation(pipeline=pipeline),
    })


@require_GET
@login_required
def pipeline_lag_chart(request, pipeline_id: int):
    pipeline = _pipeline_or_404(pipeline_id)
    key = _range_key(request)
    series = selectors.pipeline_lag_series(pipeline=pipeline, since=timezone.now() - selectors.RANGES[key])
    fig = charts.lag_figure(series, f"Total lag: {pipeline.topic} / {pipeline.group} (last {key}, UTC)")
    return HttpResponse(fig.to_json(), content_type="application/json")


@require_GET
@login_required
def collectors(request):
    return render(request, "dashboard/collectors.html", {"sources": selectors.collector_health(), "now": timezone.now()})


def _iso(value):
    return value.isoformat() if value else None


@require_GET
def api_collectors(request):
    if not request.user.is_authenticated:
        return _json_error(401, "log in first (session authentication)")
    return JsonResponse({"sources": [
        {
            "source": h.source, "label": h.label, "healthy": not h.consecutive_failures,
            "last_attempt_at": _iso(h.last_attempt_at), "last_success_at": _iso(h.last_success_at),
            "last_duration_ms": h.last_duration_ms, "consecutive_failures": h.consecutive_failures,
            "last_error": h.last_error or None, "last_error_at": _iso(h.last_error_at),
            "warning": h.warning or None,
        }
        for h in selectors.collector_health()
    ]})


@require_GET
def api_pipelines(request):
    if not request.user.is_authenticated:
        return _json_error(401, "log in first (session authentication)")
    rows = []
    for p in selectors.pipelines_overview():
        e = getattr(p, "evaluation", None)
        rows.append({
            "id": p.pk, "topic": p.topic, "group": p.group, "store": p.store.name, "cluster": p.store.cluster.name,
            "status": e.status_name if e else None, "reasons": e.reasons if e else [],
            "evaluated_at": _iso(e.evaluated_at) if e else None,
            "total_lag": e.total_lag if e else None, "lag_seconds": e.lag_seconds if e else None,
            "lag_seconds_method": e.lag_seconds_method if e else None,
            "retention_seconds_left": e.retention_seconds_left if e else None,
            "last_batch_ms": p.last_batch_ms,
        })
    return JsonResponse({"pipelines": rows})


@lru_cache(maxsize=1)
def _plotly_js() -> bytes:
    return (Path(plotly.__file__).parent / "package_data" / "plotly.min.js").read_bytes()


@require_GET
@cache_control(max_age=86400, public=True)
def plotly_js(request):
    # Served from the installed plotly package: no CDN, so the dashboard works on closed networks.
    return HttpResponse(_plotly_js(), content_type="application/javascript")


@require_GET
def healthz(request):
    """Unauthenticated liveness: the database answers."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as exc:
        return JsonResponse({"status": "error", "database": str(exc)}, status=503)
    return JsonResponse({"status": "ok"})


# --- JSON API for jobs (token auth) --------------------------------------------------------------


def _json_error(status: int, message: str) -> JsonResponse:
    return JsonResponse({"error": message}, status=status)


@csrf_exempt  # machine clients authenticate with a bearer token, not a session cookie
@require_POST
def api_start_report(request):
    auth = request.headers.get("Authorization", "")
    if not auth.startswith("Bearer "):
        return _json_error(401, "missing 'Authorization: Bearer <pipeline token>' header")
    pipeline = services.pipeline_for_token(token=auth.removeprefix("Bearer ").strip())
    if pipeline is None:
        return _json_error(401, "unknown or revoked pipeline token")
    try:
        payload = json.loads(request.body or b"")
    except ValueError as exc:
        return _json_error(400, f"the body is not JSON: {exc}")
    try:
        report = services.start_report_record(pipeline=pipeline, report=payload)
    except services.InvalidReport as exc:
        return _json_error(400, str(exc))
    return JsonResponse({"id": report.pk, "pipeline": pipeline.pk}, status=201)
