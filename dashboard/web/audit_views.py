"""The audit page and its exports: thin views over selectors (reads) and a form (filters)."""
from __future__ import annotations

from django.http import HttpResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from dashboard.accounts.roles import APPROVER, VIEWER, role_required, user_has_role
from dashboard.audit.exports import AUDIT_COLUMNS, audit_csv_rows, audit_json_items
from dashboard.audit.selectors import audit_events_export, audit_events_page, audit_verification
from dashboard.web.audit_forms import AuditFilterForm
from offsetwatch.lib.streaming import csv_stream, json_array_stream

PAGE_SIZE = 50


@require_GET
@role_required(VIEWER)
def audit_log(request):
    form = AuditFilterForm(request.GET)  # always bound: no filter at all is a valid request
    rows, next_before = [], None
    if form.is_valid():
        rows, next_before = audit_events_page(before_id=form.cleaned_data["before"], limit=PAGE_SIZE,
                                                        **form.filters())
    return render(request, "dashboard/audit.html", {
        "form": form,
        "rows": rows,
        "paged": bool(form.is_valid() and form.cleaned_data["before"]),
        "newest_query": form.query(),
        "older_query": form.query(before=next_before) if next_before else None,
        "check": audit_verification(),
        "can_verify": user_has_role(request.user, APPROVER),
    })


@role_required(APPROVER)  # first: a stranger is sent to log in, not told which methods exist
@require_POST
def audit_verify_now(request):
    """Walk the chain now instead of showing the result of up to a minute ago."""
    audit_verification(refresh=True)
    return redirect(reverse("audit") + ("?" + request.GET.urlencode() if request.GET else ""))


@require_GET
@role_required(VIEWER)
def audit_export(request, fmt: str):
    """The events matching the page's filters, oldest first (the chain's order), streamed."""
    form = AuditFilterForm(request.GET)
    if not form.is_valid():
        message = "; ".join(f"parameter {name!r}: {' '.join(errors)}" for name, errors in form.errors.items())
        return HttpResponse(message, status=400, content_type="text/plain; charset=utf-8")
    events = audit_events_export(**form.filters())
    name = f"offsetwatch_audit_{timezone.now():%Y%m%dT%H%M%SZ}.{fmt}"
    if fmt == "json":
        response = StreamingHttpResponse(json_array_stream(audit_json_items(events)),
                                         content_type="application/json")
    else:
        response = StreamingHttpResponse(csv_stream(header=AUDIT_COLUMNS,
                                                            rows=audit_csv_rows(events)),
                                         content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{name}"'  # made of [0-9A-Za-z_.] only
    return response
