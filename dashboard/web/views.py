"""Thin views of the pages: validate input, call a selector, render. The overview, a pipeline's
page and its live parts, the collectors page, /metrics and /healthz; the pipeline page's charts
and exports are in chart_views.py, rewinds in rewind_views.py, the audit log in audit_views.py."""
from __future__ import annotations

from functools import lru_cache, wraps
from pathlib import Path
from urllib.parse import urlencode

import plotly
from django.conf import settings
from django.db import connection
from django.http import Http404, HttpResponse, JsonResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.cache import cache_control
from django.views.decorators.http import require_GET

from dashboard import params
from dashboard.accounts.roles import OPERATOR, VIEWER, role_required, user_has_role
from dashboard.alerting.page_selectors import rows_silenced
from dashboard.alerting.selectors import channels_enabled, channels_failing
from dashboard.api import metrics
from dashboard.models import Pipeline
from dashboard.monitoring.overview import (
    OVERVIEW_PAGE_SIZE,
    archived_count,
    overview_count,
    overview_rows,
    pipelines_metrics,
)
from dashboard.monitoring.partition_rows import PARTITIONS_SHOWN, batch_columns, partition_view
from dashboard.monitoring.selectors import (
    broker_check,
    cluster_names,
    collector_status,
    open_incidents,
    open_incidents_count,
    pipeline_batches,
    pipeline_evaluation,
    pipeline_freshness,
    pipeline_get,
    pipeline_import_progress,
    pipeline_incidents,
    pipeline_start_reports,
    stale_sources,
    store_names,
    store_problems,
    unreachable_sources,
)
from dashboard.rewinds.selectors import pipeline_rewinds
from dashboard.web.alert_views import oncall_context
from dashboard.web.forms import OverviewFilterForm
from offsetwatch.lib.prometheus import CONTENT_TYPE
from streamoffsets.urls import mask_secrets


def _pipeline_or_404(pipeline_id: int) -> Pipeline:
    try:
        return pipeline_get(pipeline_id=pipeline_id)
    except Pipeline.DoesNotExist:
        raise Http404(f"no pipeline with id {pipeline_id}") from None


def _bad_param(exc: params.BadParam, request=None) -> HttpResponse:
    """400 naming the parameter: a page for people (given `request`), plain text for the chart
    and export files (what a script fetching them can print)."""
    if request is not None:
        return render(request, "dashboard/bad_request.html", {"message": str(exc), "param": exc.name}, status=400)
    return HttpResponse(str(exc), status=400, content_type="text/plain; charset=utf-8")


def bad_params_answered(*, page: bool):
    """A view whose parameters dashboard.params parses: any BadParam is its 400 (_bad_param), a
    page for people (`page`) or plain text for a file. Innermost, so only a caller allowed to see
    the view learns what its parameters accept."""
    def decorator(view):
        @wraps(view)
        def answered(request, *args, **kwargs):
            try:
                return view(request, *args, **kwargs)
            except params.BadParam as exc:
                return _bad_param(exc, request if page else None)
        return answered
    return decorator


@require_GET
@role_required(VIEWER)
def overview(request):
    return render(request, "dashboard/overview.html", _overview_context(request))


@require_GET
@role_required(VIEWER)
def overview_live(request):
    return render(request, "dashboard/partials/overview_table.html", _overview_context(request))


def _overview_context(request) -> dict:
    form = OverviewFilterForm(request.GET or None, stores=store_names(), clusters=cluster_names())
    filters = form.filters()
    show_archived = filters.pop("archived", False)
    sort, page = form.sort_and_page()
    now = timezone.now()
    # One page of OVERVIEW_PAGE_SIZE rows: a fleet of 10,000 pipelines is 100 pages, worst first.
    total = overview_count(**filters, archived=show_archived)
    pages = max(1, -(-total // OVERVIEW_PAGE_SIZE))
    page = min(page, pages)  # past the end (the fleet shrank): the last page
    first = (page - 1) * OVERVIEW_PAGE_SIZE
    rows = overview_rows(**filters, archived=show_archived, sort=sort, offset=first, limit=OVERVIEW_PAGE_SIZE)
    return {
        "form": form,
        "filtered": any(v is not None for v in filters.values()),
        # Archived pipelines (a retired job, or a topic gone) are hidden unless asked for.
        "show_archived": show_archived,
        "archived_count": archived_count(**filters),
        "pipelines": rows_silenced(rows, now=now),
        "paging": _overview_paging(request, page=page, pages=pages, total=total, first=first, shown=len(rows)),
        "incidents": open_incidents(limit=OPEN_INCIDENTS_SHOWN),
        "incidents_total": open_incidents_count(),
        "unreachable": unreachable_sources(),
        "stale": stale_sources(now=now),
        "channels_failing": channels_failing(),
        "now": now,
    }


OPEN_INCIDENTS_SHOWN = 20  # the worst open incidents listed above the table; the rest are counted


def _overview_paging(request, *, page: int, pages: int, total: int, first: int, shown: int) -> dict:
    """Where this page is and the links to the others, each keeping the filters and the order."""
    def link(n: int) -> str:
        query = request.GET.copy()
        query["page"] = str(n)
        return "?" + query.urlencode()

    return {"page": page, "pages": pages, "total": total, "first": first + 1 if shown else 0, "last": first + shown,
            "first_link": link(1) if page > 1 else "", "previous": link(page - 1) if page > 1 else "",
            "next": link(page + 1) if page < pages else "", "last_link": link(pages) if page < pages else ""}


def _pipeline_context(request, pipeline: Pipeline) -> dict:
    """The page's context; raises BadParam for bad chart parameters and page. A bad parameter of
    the partition table is `partition_error`: the page says it next to the table's form (400)
    and shows the table's default rows."""
    chart = params.parse_chart_params(request.GET, now=timezone.now())
    page = params.parse_int(request.GET, "page", default=1, low=1, high=10**9)
    evaluation = pipeline_evaluation(pipeline=pipeline)
    partition_error = None
    try:
        asked = params.parse_partition_params(request.GET, default_shown=PARTITIONS_SHOWN)
    except params.BadParam as exc:
        partition_error, asked = exc, params.PartitionParams(shown=PARTITIONS_SHOWN)
    view = partition_view(rows=evaluation.partitions if evaluation else [], params=asked,
                          retention_warn_s=settings.RETENTION_WARN_S)
    page_obj, batch_partitions, batch_rows = pipeline_batches(
        pipeline=pipeline, page=page, partitions=batch_columns(view) if view.total else None)
    return {
        "pipeline": pipeline,
        "freshness": pipeline_freshness(pipeline=pipeline),
        "import_progress": pipeline_import_progress(pipeline=pipeline, now=timezone.now()),
        "evaluation": evaluation,
        "partitions": view,
        "partition_links": _partition_links(request, view),
        "partition_error": partition_error,
        "incidents": pipeline_incidents(pipeline=pipeline),
        "start_reports": pipeline_start_reports(pipeline=pipeline),
        "rewinds": pipeline_rewinds(pipeline=pipeline),
        # Operators get a "rewind here" link on every batch row.
        "can_request_rewind": user_has_role(request.user, OPERATOR),
        "page_obj": page_obj,
        "batch_partitions": batch_partitions,
        "batch_rows": batch_rows,
        "batch_pages": _batch_page_links(request, page_obj),
        "problems": store_problems(store=pipeline.store),
        "chart": chart,
        # The chart's parameters as a query string: the chart and export links keep them.
        "chart_query": urlencode(chart.query()),
        "range_query": urlencode(chart.range.query()),
        "ranges": list(params.RANGES),
        "kinds": params.KINDS,
        "units": params.UNITS,
        "time_zone": settings.TIME_ZONE,
    }


def _query_link(request, **changes) -> str:
    """This page's query string with `changes` (None: the parameter dropped): every other parameter
    (the chart's, the batch page, the partition table's) is kept, so the link is the same view
    but for that."""
    query = request.GET.copy()
    for name, value in changes.items():
        if value is None:
            query.pop(name, None)
        else:
            query[name] = str(value)
    return "?" + query.urlencode()


def _partition_links(request, view) -> dict:
    """The partition table's links: the next rows, all of them, only those not OK, the worst first
    again (dropping the filters)."""
    shown = len(view.rows)
    return {
        "step": min(view.more, PARTITIONS_SHOWN),
        "default_shown": PARTITIONS_SHOWN,
        "more": _query_link(request, shown=shown + PARTITIONS_SHOWN) if view.more else "",
        "all": _query_link(request, shown="all") if view.more else "",
        "problems": _query_link(request, only="problems", partition=None, shown=None)
        if view.problems and not view.params.only_problems else "",
        "reset": _query_link(request, only=None, partition=None, shown=None)
        if view.params != params.PartitionParams(shown=PARTITIONS_SHOWN) else "",
    }


def _batch_page_links(request, page_obj) -> dict:
    return {"newer": _query_link(request, page=page_obj.previous_page_number()) if page_obj.has_previous() else "",
            "older": _query_link(request, page=page_obj.next_page_number()) if page_obj.has_next() else ""}


@require_GET
@role_required(VIEWER)
@bad_params_answered(page=True)
def pipeline_detail(request, pipeline_id: int):
    pipeline = _pipeline_or_404(pipeline_id)
    context = _pipeline_context(request, pipeline)
    return render(request, "dashboard/pipeline.html", {**context, **oncall_context(request, pipeline)},
                  status=400 if context["partition_error"] else 200)


@require_GET
@role_required(VIEWER)
@bad_params_answered(page=True)
def pipeline_live(request, pipeline_id: int):
    pipeline = _pipeline_or_404(pipeline_id)
    context = _pipeline_context(request, pipeline)
    if context["partition_error"]:
        raise context["partition_error"]  # the polling keeps what it shows; the page says it by its form
    return render(request, "dashboard/partials/pipeline_live.html", context)


@require_GET
@role_required(VIEWER)
def pipeline_status(request, pipeline_id: int):
    pipeline = _pipeline_or_404(pipeline_id)
    return render(request, "dashboard/partials/pipeline_status.html", {
        "pipeline": pipeline,
        "freshness": pipeline_freshness(pipeline=pipeline),
        "import_progress": pipeline_import_progress(pipeline=pipeline, now=timezone.now()),
        "evaluation": pipeline_evaluation(pipeline=pipeline),
    })





@require_GET
@role_required(VIEWER)
def collectors(request):
    status = collector_status()
    return render(request, "dashboard/collectors.html", {"status": status, "sources": status.sources, "now": status.now})


@lru_cache(maxsize=1)
def _plotly_js() -> bytes:
    return (Path(plotly.__file__).parent / "package_data" / "plotly.min.js").read_bytes()


@require_GET
@cache_control(max_age=86400, public=True)
def plotly_js(request):
    # Served from the installed plotly package: no CDN, so the dashboard works on closed networks.
    return HttpResponse(_plotly_js(), content_type="application/javascript")


@require_GET
@role_required(VIEWER, tokens=True)
def metrics_view(request):
    """Prometheus scrape: an API token (Bearer) or a session with the viewer role."""
    status = collector_status()
    text = metrics.render(
        pipelines=pipelines_metrics(), sources=status.sources,
        include=settings.METRICS_INCLUDE, exclude=settings.METRICS_EXCLUDE,
        per_partition=settings.METRICS_PER_PARTITION, collectors=status.parts, now=status.now,
        channels=channels_enabled(),
    )
    return HttpResponse(text, content_type=CONTENT_TYPE)


@require_GET
def healthz(request):
    """Unauthenticated health for load balancers and compose: the database answers, Redis (the
    broker every collection goes through) answers, beat ticks and the workers work (both judged
    from timestamps: COLLECTOR_STALE_AFTER_S). 503 names what failed."""
    failed = {}
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as exc:
        failed["database"] = str(exc)
    if not failed:
        try:
            down = collector_status().down
        except Exception as exc:  # e.g. the schema not migrated yet: say so, not a 500
            failed["collectors"] = f"cannot judge the collectors: {type(exc).__name__}: {exc}"
            down = []
        for part in down:
            # The broker keeps its old name here: monitors already match "redis".
            failed["redis" if part.name == "broker" else part.name] = part.detail
    else:
        # Without the database the collectors cannot be judged; Redis still can.
        broker = broker_check()
        if broker:
            failed["redis"] = broker
    if failed:
        # Unauthenticated: a driver's message quoting a URL (redis://:password@...) is masked.
        failed = {name: mask_secrets(text) for name, text in failed.items()}
        return JsonResponse({"status": "error", "failed": sorted(failed), **failed}, status=503)
    return JsonResponse({"status": "ok"})
