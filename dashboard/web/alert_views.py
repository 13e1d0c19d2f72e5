"""Pages of the people on call: acknowledge a pipeline's open incident, silence a pipeline or the
pipelines matching patterns, cancel a silence, the silences page. Thin: a form validates, a
service of dashboard.alerting.actions acts; its refusal is shown with its status (400, 403, 404,
409), never a 500."""
from __future__ import annotations

from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST

from dashboard.accounts.roles import VIEWER, role_required
from dashboard.alerting import actions
from dashboard.alerting.page_selectors import pipeline_alerting, silences_page
from dashboard.audit.actor import Actor
from dashboard.models import Pipeline
from dashboard.monitoring.selectors import pipeline_get
from dashboard.web.alert_forms import AcknowledgeForm, PatternSilenceForm, SilenceForm

_MAX_ID = 2**63 - 1  # a bigint: a larger id in the address is no row (not a database error)


def _pipeline(pipeline_id: int) -> Pipeline:
    try:
        if pipeline_id > _MAX_ID:
            raise Pipeline.DoesNotExist
        return pipeline_get(pipeline_id=pipeline_id)
    except Pipeline.DoesNotExist:
        raise Http404(f"no pipeline with id {pipeline_id}") from None


def oncall_context(request, pipeline: Pipeline) -> dict:
    """What a pipeline's page shows of on-call: its owner, whether archived (on `pipeline`), the
    open incident and its acknowledgement, the silence covering it, and the forms for those who
    may act."""
    return {
        "alerting": pipeline_alerting(pipeline=pipeline, now=timezone.now()),
        "can_act_on_call": actions.may_act_on_call(request.user),
        "ack_form": AcknowledgeForm(),
        "silence_form": SilenceForm(initial={"duration": "3600"}),
    }


def _refused(request, message: str, status: int, back: str):
    template = "dashboard/forbidden.html" if status == 403 else "dashboard/action_refused.html"
    return render(request, template, {"message": message, "back": back}, status=status)


def _form_refused(request, form, back: str):
    message = "; ".join(f"{name}: {error}" for name, errors in form.errors.items() for error in errors)
    return _refused(request, message, 400, back)


@role_required(VIEWER)  # the service checks the on-call roles (operator or approver): a 403 that says so
@require_POST
def incident_acknowledge(request, pipeline_id: int, incident_id: int):
    pipeline = _pipeline(pipeline_id)
    back = reverse("pipeline", args=[pipeline.pk]) + "#on-call"
    form = AcknowledgeForm(request.POST)
    if not form.is_valid():
        return _form_refused(request, form, back)
    if incident_id > _MAX_ID or not pipeline.incidents.filter(pk=incident_id).exists():
        return _refused(request, f"pipeline #{pipeline.pk} has no incident with id {incident_id}", 404, back)
    try:
        actions.incident_acknowledge(incident_id=incident_id, note=form.cleaned_data["note"],
                                     actor=Actor.of_request(request))
    except actions.ActionRefused as exc:
        return _refused(request, exc.message, exc.status, back)
    return redirect(back)


@role_required(VIEWER)
@require_POST
def pipeline_silence(request, pipeline_id: int):
    pipeline = _pipeline(pipeline_id)
    back = reverse("pipeline", args=[pipeline.pk]) + "#on-call"
    form = SilenceForm(request.POST)
    if not form.is_valid():
        return _form_refused(request, form, back)
    try:
        actions.silence_create(pipeline=pipeline, duration_s=form.cleaned_data["duration_s"],
                               reason=form.cleaned_data["reason"], actor=Actor.of_request(request))
    except actions.ActionRefused as exc:
        return _refused(request, exc.message, exc.status, back)
    return redirect(back)


@role_required(VIEWER)
@require_POST
def silence_new(request):
    back = reverse("silences")
    form = PatternSilenceForm(request.POST)
    if not form.is_valid():
        return _form_refused(request, form, back)
    try:
        actions.silence_create(duration_s=form.cleaned_data["duration_s"], reason=form.cleaned_data["reason"],
                               actor=Actor.of_request(request), **form.patterns())
    except actions.ActionRefused as exc:
        return _refused(request, exc.message, exc.status, back)
    return redirect(back)


@role_required(VIEWER)
@require_POST
def silence_cancel(request, silence_id: int):
    back = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(back, allowed_hosts={request.get_host()}, require_https=request.is_secure()):
        back = reverse("silences")
    if silence_id > _MAX_ID:
        return _refused(request, f"no silence with id {silence_id}", 404, back)
    try:
        actions.silence_cancel(silence_id=silence_id, actor=Actor.of_request(request))
    except actions.ActionRefused as exc:
        return _refused(request, exc.message, exc.status, back)
    return redirect(back)


@role_required(VIEWER)
@require_GET
def silences(request):
    now = timezone.now()
    return render(request, "dashboard/silences.html", {
        "page": silences_page(now=now), "now": now, "can_act_on_call": actions.may_act_on_call(request.user),
        "form": PatternSilenceForm(initial={"duration": "3600"}),
    })
