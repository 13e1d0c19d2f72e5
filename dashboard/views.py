"""Thin views: validate input, call a selector, render."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import plotly
from django.conf import settings
from django.db import connection
from django.http import Http404, HttpResponse, JsonResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.cache import cache_control
from django.views.decorators.http import require_GET

from dashboard import charts, metrics, selectors
from dashboard.forms import OverviewFilterForm
from dashboard.models import Pipeline
from dashboard.roles import VIEWER, role_required


def _pipeline_or_404(pipeline_id: int) -> Pipeline:
    try:
        return selectors.pipeline_get(pipeline_id=pipeline_id)
    except Pipeline.DoesNotExist:
        raise Http404(f"no pipeline with id {pipeline_id}") from None


def _range_key(request) -> str:
    key = request.GET.get("range", "1h")
    return key if key in selectors.RANGES else "1h"


@require_GET
@role_required(VIEWER)
def overview(request):
    return render(request, "dashboard/overview.html", _overview_context(request))


@require_GET
@role_required(VIEWER)
def overview_live(request):
    return render(request, "dashboard/partials/overview_table.html", _overview_context(request))


def _overview_context(request) -> dict:
    form = OverviewFilterForm(request.GET or None, stores=selectors.store_names(), clusters=selectors.cluster_names())
    filters = form.filters()
    now = timezone.now()
    return {
        "form": form,
        "filtered": any(v is not None for v in filters.values()),
        "pipelines": selectors.pipelines_filtered(**filters),
        "incidents": selectors.open_incidents(),
        "unreachable": selectors.unreachable_sources(),
        "stale": selectors.stale_sources(now=now),
        "now": now,
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
@role_required(VIEWER)
def pipeline_detail(request, pipeline_id: int):
    pipeline = _pipeline_or_404(pipeline_id)
    return render(request, "dashboard/pipeline.html", _pipeline_context(request, pipeline))


@require_GET
@role_required(VIEWER)
def pipeline_live(request, pipeline_id: int):
    pipeline = _pipeline_or_404(pipeline_id)
    return render(request, "dashboard/partials/pipeline_live.html", _pipeline_context(request, pipeline))


@require_GET
@role_required(VIEWER)
def pipeline_status(request, pipeline_id: int):
    pipeline = _pipeline_or_404(pipeline_id)
    return render(request, "dashboard/partials/pipeline_status.html", {
        "pipeline": pipeline,
        "freshness": selectors.pipeline_freshness(pipeline=pipeline),
        "evaluation": selectors.pipeline_evaluation(pipeline=pipeline),
    })


@require_GET
@role_required(VIEWER)
def pipeline_lag_chart(request, pipeline_id: int):
    pipeline = _pipeline_or_404(pipeline_id)
    key = _range_key(request)
    series = selectors.pipeline_lag_series(pipeline=pipeline, since=timezone.now() - selectors.RANGES[key])
    fig = charts.lag_figure(series, f"Total lag: {pipeline.topic} / {pipeline.group} (last {key}, UTC)")
    return HttpResponse(fig.to_json(), content_type="application/json")


@require_GET
@role_required(VIEWER)
def collectors(request):
    return render(request, "dashboard/collectors.html", {"sources": selectors.collector_health(), "now": timezone.now()})


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
    text = metrics.render(
        pipelines=selectors.pipelines_metrics(), sources=selectors.collector_health(),
        include=settings.METRICS_INCLUDE, exclude=settings.METRICS_EXCLUDE,
        per_partition=settings.METRICS_PER_PARTITION,
    )
    return HttpResponse(text, content_type=metrics.CONTENT_TYPE)


@require_GET
def healthz(request):
    """Unauthenticated liveness: the database answers."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as exc:
        return JsonResponse({"status": "error", "database": str(exc)}, status=503)
    return JsonResponse({"status": "ok"})
