"""Pages of the rewind workflow: request (with a preview), review and decide, cancel, write
into the store, the list. Thin: a form validates, a service in dashboard.rewinds.services acts."""
from __future__ import annotations

from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from dashboard.accounts.roles import APPROVER, OPERATOR, VIEWER, role_required, user_has_role
from dashboard.audit.actor import Actor
from dashboard.models import Pipeline, RewindRequest
from dashboard.monitoring.selectors import pipeline_get
from dashboard.rewinds import services as rewinds
from dashboard.rewinds.selectors import rewind_events, rewind_get, rewinds_list
from dashboard.web.rewind_forms import RewindDecisionForm, RewindRequestForm


def _pipeline(pipeline_id: int) -> Pipeline:
    try:
        return pipeline_get(pipeline_id=pipeline_id)
    except Pipeline.DoesNotExist:
        raise Http404(f"no pipeline with id {pipeline_id}") from None


def _rewind(rewind_id: int) -> RewindRequest:
    try:
        return rewind_get(rewind_id=rewind_id)
    except RewindRequest.DoesNotExist:
        raise Http404(f"no rewind with id {rewind_id}") from None


@role_required(OPERATOR)
@require_http_methods(["GET", "POST"])
def rewind_new(request, pipeline_id: int):
    """GET: the form (prefilled from a batch row's link); POST "preview": the plan shown, nothing
    saved; POST "submit": the request made (it shows the same preview to the approver)."""
    pipeline = _pipeline(pipeline_id)
    plan, error = None, None
    if request.method == "GET":
        form = RewindRequestForm(initial={"kind": request.GET.get("kind", "batch"),
                                          "batch_time_ms": request.GET.get("batch_time_ms"), "mode": "job"})
    else:
        form = RewindRequestForm(request.POST)
        if form.is_valid():
            data = form.cleaned_data
            try:
                if request.POST.get("action") == "submit":
                    rewind = rewinds.rewind_request(
                        pipeline=pipeline, user=request.user, kind=data["kind"], spec=data["spec"],
                        reason=data["reason"], ticket_url=data["ticket_url"], mode=data["mode"],
                        actor=Actor.of_request(request))
                    return redirect("rewind", rewind_id=rewind.pk)
                plan = rewinds.rewind_plan(pipeline=pipeline, kind=data["kind"], spec=data["spec"])
            except rewinds.RewindRefused as exc:
                error = exc.message
    status = 400 if request.method == "POST" and (error or not form.is_valid()) else 200
    return render(request, "dashboard/rewind_new.html", {
        "pipeline": pipeline, "form": form, "plan": plan, "error": error,
        "batch_time_ms": form["batch_time_ms"].value(),
    }, status=status)


@role_required(VIEWER)
@require_GET
def rewind_detail(request, rewind_id: int):
    rewind = _rewind(rewind_id)
    plan_now, plan_error = None, None
    if rewind.status == RewindRequest.Status.REQUESTED:
        # The approver decides on the plan as it is now; say so when it changed since the request.
        try:
            plan_now = rewinds.rewind_plan(pipeline=rewind.pipeline, kind=rewind.target_kind, spec=rewind.target_spec)
        except rewinds.RewindRefused as exc:
            plan_error = exc.message
    return render(request, "dashboard/rewind.html", _detail_context(request, rewind, plan_now, plan_error))


def _detail_context(request, rewind, plan_now, plan_error, error: str | None = None, form=None) -> dict:
    user = request.user
    changed = []
    if plan_now is not None:
        before = {row["partition"]: row for row in rewind.preview["rows"]}
        for row in plan_now.preview.as_dict()["rows"]:
            was = before.get(row["partition"])
            if was is None or was["current"] != row["current"] or was["target"] != row["target"] \
                    or was["low"] != row["low"] or was["high"] != row["high"]:
                changed.append((row["partition"], was, row))
    return {
        "rewind": rewind, "plan_now": plan_now, "plan_error": plan_error, "changed": changed, "error": error,
        "form": form or RewindDecisionForm(),
        "events": rewind_events(rewind_id=rewind.pk),
        "can_decide": (rewind.status == RewindRequest.Status.REQUESTED and user_has_role(user, APPROVER)
                       and rewind.requested_by_id != user.pk),
        "own_request": rewind.requested_by_id == user.pk,
        "can_cancel": (rewind.status in (RewindRequest.Status.REQUESTED, RewindRequest.Status.APPROVED)
                       and (rewind.requested_by_id == user.pk or user_has_role(user, APPROVER))),
        "can_write": (rewind.status == RewindRequest.Status.APPROVED and rewind.mode == RewindRequest.Mode.STORE
                      and user_has_role(user, OPERATOR)),
    }


@role_required(APPROVER)
@require_POST
def rewind_decide(request, rewind_id: int):
    rewind = _rewind(rewind_id)
    form = RewindDecisionForm(request.POST)
    error = None
    if form.is_valid():
        try:
            rewinds.rewind_decide(rewind=rewind, user=request.user, approve=form.cleaned_data["decision"] == "approve",
                                  comment=form.cleaned_data["comment"], actor=Actor.of_request(request))
            return redirect("rewind", rewind_id=rewind.pk)
        except rewinds.RewindRefused as exc:
            error = exc.message
    return _rerender(request, rewind, error, form)


@role_required(VIEWER)  # the service checks who may cancel (the requester or an approver)
@require_POST
def rewind_cancel(request, rewind_id: int):
    return _act(request, rewind_id, rewinds.rewind_cancel)


@role_required(OPERATOR)
@require_POST
def rewind_write(request, rewind_id: int):
    return _act(request, rewind_id, rewinds.rewind_write_to_store)


def _act(request, rewind_id: int, service):
    """Run one rewind service for the person; a refusal is shown on the rewind's page."""
    rewind = _rewind(rewind_id)
    try:
        service(rewind=rewind, user=request.user, actor=Actor.of_request(request))
    except rewinds.RewindRefused as exc:
        return _rerender(request, rewind, exc.message)
    return redirect("rewind", rewind_id=rewind.pk)


def _rerender(request, rewind, error: str, form=None):
    rewind.refresh_from_db()
    plan_now, plan_error = None, None
    if rewind.status == RewindRequest.Status.REQUESTED:
        try:
            plan_now = rewinds.rewind_plan(pipeline=rewind.pipeline, kind=rewind.target_kind, spec=rewind.target_spec)
        except rewinds.RewindRefused as exc:
            plan_error = exc.message
    context = _detail_context(request, rewind, plan_now, plan_error, error=error, form=form)
    return render(request, "dashboard/rewind.html", context, status=409 if error else 400)


@role_required(VIEWER)
@require_GET
def rewind_list(request):
    return render(request, "dashboard/rewinds.html", {"rewinds": rewinds_list(),
                                                      "new_url": reverse("overview")})
