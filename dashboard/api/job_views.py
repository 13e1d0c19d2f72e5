"""The jobs' API (pipeline tokens, owp_): start reports and the rewind a job claims, applies or
fails on restart (streamoffsets.dashboard_client is the client). Payloads are checked by
dashboard.api.payloads; every error is JSON."""
from __future__ import annotations

import json
from functools import wraps

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import JsonResponse
from django.views.decorators.csrf import csrf_exempt

from dashboard.accounts.roles import bearer_token
from dashboard.accounts.tokens import pipeline_token_actor, pipeline_token_for
from dashboard.api import payloads
from dashboard.api.views import json_error
from dashboard.audit.actor import Actor
from dashboard.rewinds.services import (
    RewindRefused,
    claim_lease_expires_at,
    rewind_applied,
    rewind_claim,
    rewind_claimable,
    rewind_for_job,
    rewind_job_failed,
)
from dashboard.rewinds.start_reports import InvalidReport, start_report_record
from offsetwatch.lib.timefmt import iso


def job_view(method: str):
    """An endpoint for a pipeline's job, authenticated by its pipeline token (`Authorization:
    Bearer owp_...`). The view gets the token's pipeline and, for POST, the JSON body; errors are
    JSON. CSRF-exempt: machine clients have no session cookie to forge."""
    def decorator(view):
        @csrf_exempt
        @wraps(view)
        def wrapped(request, *args, **kwargs):
            # Who first, then how: a stranger learns nothing about the endpoint.
            token = bearer_token(request)
            if not token:
                return json_error(401, "missing 'Authorization: Bearer <pipeline token>' header")
            found = pipeline_token_for(token=token)
            if found is None:
                return json_error(401, "unknown or revoked pipeline token")
            pipeline = found.pipeline
            # The audit actor of whatever the job does: its token, never what the body says it is.
            request.job_actor = Actor.of_job(pipeline_token_actor(found), request)
            if request.method != method:
                response = json_error(405, f"method {request.method} is not allowed here; use {method}")
                response["Allow"] = method
                return response
            payload = None
            if method == "POST":
                try:
                    payload = json.loads(request.body or b"")
                except RequestDataTooBig:
                    return json_error(413, f"the body is larger than {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes")
                except ValueError as exc:
                    return json_error(400, f"the body is not JSON: {exc}")
                except RecursionError:
                    return json_error(400, "the body is not JSON a job sends: nested too deeply")
                if not isinstance(payload, dict):
                    return json_error(400, "the body must be a JSON object")
            try:
                return view(request, pipeline, payload, *args, **kwargs)
            except payloads.PayloadError as exc:
                return json_error(400, f"invalid body: {exc}")
            except RewindRefused as exc:
                return json_error(exc.status, exc.message)
        return wrapped
    return decorator


@job_view("POST")
def api_start_report(request, pipeline, payload):
    payloads.start_report(payload)  # every field checked, named when refused (PayloadError: 400)
    try:
        report = start_report_record(pipeline=pipeline, report=payload, actor=request.job_actor)
    except InvalidReport as exc:
        return json_error(400, str(exc))
    return JsonResponse({"id": report.pk, "pipeline": pipeline.pk}, status=201)


def rewind_json(rewind) -> dict:
    return {
        "id": rewind.pk, "pipeline": rewind.pipeline_id, "topic": rewind.pipeline.topic, "group": rewind.pipeline.group,
        "status": rewind.status, "mode": rewind.mode, "target_kind": rewind.target_kind,
        "target_offsets": rewind.target_offsets, "before_offsets": rewind.before_offsets, "reason": rewind.reason,
        "expires_at": iso(rewind.expires_at), "claimed_by": rewind.claimed_by or None,
        "claimed_at": iso(rewind.claimed_at), "claim_lease_expires_at": iso(claim_lease_expires_at(rewind)),
        "applied_offsets": rewind.applied_offsets, "outcome": rewind.outcome or None,
    }


@job_view("GET")
def api_rewind_pending(request, pipeline, payload):
    """The rewind a starting job must not start past, or null: approved, or claimed (`claimed_by`,
    `claim_lease_expires_at`); `claimable` says whether the job's claim would win now (a claim
    whose lease ran out is taken over)."""
    rewind = rewind_for_job(pipeline=pipeline)
    if rewind is None:
        return JsonResponse({"rewind": None})
    return JsonResponse({"rewind": {**rewind_json(rewind), "claimable": rewind_claimable(rewind=rewind)}})


@job_view("POST")
def api_rewind_claim(request, pipeline, payload, rewind_id: int):
    body = payloads.rewind_claim(payload)
    rewind = rewind_claim(pipeline=pipeline, rewind_id=rewind_id, instance=body["instance"],
                                  actor=request.job_actor)
    return JsonResponse({"rewind": rewind_json(rewind)})


@job_view("POST")
def api_rewind_applied(request, pipeline, payload, rewind_id: int):
    body = payloads.rewind_applied(payload)
    rewind = rewind_applied(pipeline=pipeline, rewind_id=rewind_id, instance=body["instance"],
                                    offsets=body["offsets"], marker_batch_ms=body["marker_batch_ms"], actor=request.job_actor)
    return JsonResponse({"rewind": rewind_json(rewind)})


@job_view("POST")
def api_rewind_failed(request, pipeline, payload, rewind_id: int):
    body = payloads.rewind_failed(payload)
    rewind = rewind_job_failed(pipeline=pipeline, rewind_id=rewind_id, instance=body["instance"],
                                       error=body["error"] or "no reason given",
                                       actor=request.job_actor)
    return JsonResponse({"rewind": rewind_json(rewind)})
