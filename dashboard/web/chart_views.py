"""The pipeline page's charts and exports: the lag chart (HTML, JSON, CSV, PNG/SVG), the batches
as CSV, and background export jobs. Heavy requests are bounded (dashboard.heavy), and a range
too large to answer at once is offered as a background export."""
from __future__ import annotations

from django.conf import settings
from django.http import FileResponse, Http404, HttpResponse, JsonResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from dashboard import heavy, params
from dashboard.accounts.roles import VIEWER, role_required
from dashboard.charts import cache as chart_cache
from dashboard.charts import render as charts
from dashboard.charts.selectors import SAMPLES, chart_series_count, lag_sample_count
from dashboard.exports import selectors as export_selectors
from dashboard.exports.formats import (
    IMAGE_TYPES,
    ImageExportFailed,
    batches_table,
    chart_json,
    chart_table_rows,
    download_name,
    export_preamble,
    range_ms,
    render_image,
)
from dashboard.exports.selectors import batch_export_count, batch_export_width, export_job_done
from dashboard.exports.services import ExportQueueFull, export_job_create
from dashboard.models import ExportJob, Pipeline
from dashboard.web.views import _pipeline_or_404, bad_params_answered
from offsetwatch.lib.streaming import csv_stream

IMAGE_MAX_WIDTH, IMAGE_MAX_HEIGHT = 2400, 1600


def _attachment(response, filename: str):
    # download_name() keeps file names to [A-Za-z0-9._-]: nothing to quote or inject in a header.
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


def _chart_request(request, pipeline_id: int):
    """(pipeline, chart parameters, time zone) of a chart or chart-export request; a custom range
    is quantized (chart_cache.quantized) so requests milliseconds apart share a cache entry."""
    pipeline = _pipeline_or_404(pipeline_id)
    chart_params = chart_cache.quantized(params.parse_chart_params(request.GET, now=timezone.now()))
    return pipeline, chart_params, params.time_zone()


def _too_large(request, *, pipeline: Pipeline, kind: str, rows: int, points: int, query: dict) -> HttpResponse:
    """A page offering the export as a background job (413: scripts do not save it as CSV)."""
    return render(request, "dashboard/export_too_large.html", {
        "pipeline": pipeline, "kind": kind, "kind_label": ExportJob.Kind(kind).label, "rows": rows,
        "limit": settings.EXPORT_INLINE_MAX_ROWS, "points": points, "points_limit": settings.EXPORT_INLINE_MAX_POINTS,
        "fields": sorted(query.items()),
    }, status=413)


def _too_many(rows: int, points: int) -> bool:
    return rows > settings.EXPORT_INLINE_MAX_ROWS or points > settings.EXPORT_INLINE_MAX_POINTS


class _ReleasingStream:
    """A streamed body that gives its heavy slot back when it ends or its response is closed
    (the server closes it after sending, or when the client goes away)."""

    def __init__(self, chunks, slot: heavy.Slot):
        self.chunks, self.slot = chunks, slot

    def __iter__(self):
        try:
            yield from self.chunks
        finally:
            self.slot.release()

    def close(self) -> None:
        self.slot.release()


@require_GET
@role_required(VIEWER)
@bad_params_answered(page=False)
def pipeline_lag_chart(request, pipeline_id: int):
    """The chart shown on the pipeline page: a plotly figure, every series downsampled."""
    pipeline, chart_params, tz = _chart_request(request, pipeline_id)
    # The page redraws its chart at every poll (5 s). A figure ~1,000 px wide over a range moves
    # by one pixel every span/1000: kept that long (at most 5 min, in Redis for every worker), a
    # 30-day chart of 64 partitions (seconds to compute) is computed every 5 min, a 1-hour chart
    # at every poll (cheap: it takes no heavy slot).
    r = chart_params.range
    cached = chart_cache.entry("lag-chart", pipeline_id=pipeline.pk, tz_name=tz.key, params=chart_params)
    body = chart_cache.get(cached)
    if body is None:
        def figure() -> bytes:
            chart = charts.pipeline_chart(pipeline=pipeline, params=chart_params, tz=tz)
            return charts.chart_figure_json(table=chart.table, markers=chart.markers, title=chart.title, tz=tz)

        if (r.until - r.since).total_seconds() <= heavy.CHART_SPAN_S:
            body = figure()
        else:
            try:
                with heavy.acquire(user_id=request.user.pk):
                    body = heavy.at_low_priority(figure)
            except heavy.Busy as exc:
                return heavy.busy_response(request, exc)
        chart_cache.put(cached, body)
    return HttpResponse(body, content_type="application/json")


def _figure(*, pipeline: Pipeline, chart_params: params.ChartParams, tz):
    chart = charts.pipeline_chart(pipeline=pipeline, params=chart_params, tz=tz)
    return charts.chart_figure(table=chart.table, markers=chart.markers, title=chart.title, tz=tz)


def _image(*, pipeline: Pipeline, chart_params: params.ChartParams, tz, fmt: str, width: int, height: int) -> bytes:
    fig = _figure(pipeline=pipeline, chart_params=chart_params, tz=tz)
    fig.update_layout(height=height, width=width)
    return render_image(fig, fmt=fmt, width=width, height=height)


@require_GET
@role_required(VIEWER)
@bad_params_answered(page=False)
def pipeline_chart_image(request, pipeline_id: int, fmt: str):
    """The chart as PNG or SVG, rendered by kaleido with Chromium, as a download."""
    pipeline, chart_params, tz = _chart_request(request, pipeline_id)
    # Render time grows with the pixels (4000x3000 took 6 s): a poster is not a chart.
    width = params.parse_int(request.GET, "width", default=1200, low=300, high=IMAGE_MAX_WIDTH)
    height = params.parse_int(request.GET, "height", default=500, low=200, high=IMAGE_MAX_HEIGHT)
    cached = chart_cache.entry("image", pipeline_id=pipeline.pk, tz_name=tz.key, params=chart_params,
                               extra=(fmt, width, height))
    image = chart_cache.get(cached)
    if image is None:
        try:
            with heavy.acquire(user_id=request.user.pk):
                image = heavy.at_low_priority(lambda: _image(pipeline=pipeline, chart_params=chart_params, tz=tz,
                                                             fmt=fmt, width=width, height=height))
        except heavy.Busy as exc:
            return heavy.busy_response(request, exc)
        except ImageExportFailed as exc:
            return HttpResponse(f"the chart image could not be made: {exc}", status=503,
                                content_type="text/plain; charset=utf-8")
        chart_cache.put(cached, image)
    name = download_name(pipeline=pipeline, what=f"{chart_params.kind}-{chart_params.unit}",
                                 time_range=chart_params.range, ext=fmt)
    return _attachment(HttpResponse(image, content_type=IMAGE_TYPES[fmt]), name)


@require_GET
@role_required(VIEWER)
@bad_params_answered(page=False)
def pipeline_chart_data(request, pipeline_id: int, fmt: str):
    """The chart's series as CSV (streamed) or JSON, at full resolution (every stored sample, not
    the roll-ups the page's chart draws) unless max_points asks."""
    pipeline, chart_params, tz = _chart_request(request, pipeline_id)
    max_points = params.parse_int(request.GET, "max_points", default=None, low=4, high=10_000_000)
    r = chart_params.range
    rows = lag_sample_count(pipeline=pipeline, since=r.since, until=r.until)
    points = rows * chart_series_count(pipeline=pipeline, kind=chart_params.kind, since=r.since, until=r.until)
    # Too many rows or values for a request: the background job writes the CSV (JSON: ask with
    # max_points, at most EXPORT_INLINE_MAX_POINTS).
    if max_points is not None:
        rows, points = min(rows, max_points), min(points, max_points)
    if _too_many(rows, points):
        return _too_large(request, pipeline=pipeline, kind=ExportJob.Kind.CHART_CSV, rows=rows, points=points,
                          query=chart_params.query())
    name = download_name(pipeline=pipeline, what=f"{chart_params.kind}-{chart_params.unit}",
                                 time_range=r, ext=fmt)
    cached = chart_cache.entry("chart-json", pipeline_id=pipeline.pk, tz_name=tz.key, params=chart_params,
                               extra=(max_points,))
    body = chart_cache.get(cached) if fmt == "json" else None
    if body is not None:
        return _attachment(HttpResponse(body, content_type="application/json"), name)
    try:
        slot = heavy.acquire(user_id=request.user.pk)
    except heavy.Busy as exc:
        return heavy.busy_response(request, exc)
    if fmt == "json":
        def document() -> JsonResponse:
            chart = charts.pipeline_chart(pipeline=pipeline, params=chart_params, tz=tz, resolution=SAMPLES)
            table = charts.table_downsample(chart.table, max_points) if max_points else chart.table
            return JsonResponse(chart_json(pipeline=pipeline, table=table, markers=chart.markers,
                                                   time_range=r, tz=tz, title=chart.title, downsampled_to=max_points))

        with slot:
            response = heavy.at_low_priority(document)
        chart_cache.put(cached, response.content)
        return _attachment(response, name)
    try:
        chart = heavy.at_low_priority(lambda: charts.pipeline_chart(pipeline=pipeline, params=chart_params, tz=tz, resolution=SAMPLES))
        table = charts.table_downsample(chart.table, max_points) if max_points else chart.table
        header, data = chart_table_rows(table, tz)
        preamble = export_preamble(pipeline=pipeline, what=chart.title, time_range=r, tz=tz,
                                           now=timezone.now())
    except BaseException:
        slot.release()  # the stream that would release it is never made
        raise
    stream = _ReleasingStream(csv_stream(header=header, rows=data, preamble=preamble), slot)
    return _attachment(StreamingHttpResponse(stream, content_type="text/csv; charset=utf-8"), name)


@require_GET
@role_required(VIEWER)
@bad_params_answered(page=False)
def pipeline_batches_csv(request, pipeline_id: int):
    """Every batch in the range (default: all retained history), streamed from a chunked cursor."""
    pipeline = _pipeline_or_404(pipeline_id)
    time_range = params.parse_range(request.GET, now=timezone.now(), allow_all=True, default="all")
    since_ms, until_ms = range_ms(time_range)
    rows = batch_export_count(pipeline=pipeline, since_ms=since_ms, until_ms=until_ms)
    points = rows * batch_export_width(pipeline=pipeline, since_ms=since_ms, until_ms=until_ms)
    if _too_many(rows, points):
        return _too_large(request, pipeline=pipeline, kind=ExportJob.Kind.BATCHES_CSV, rows=rows, points=points,
                          query=time_range.query())
    try:
        slot = heavy.acquire(user_id=request.user.pk)
    except heavy.Busy as exc:
        return heavy.busy_response(request, exc)
    tz = params.time_zone()
    try:
        header, data = batches_table(pipeline=pipeline, time_range=time_range, tz=tz)
        preamble = export_preamble(pipeline=pipeline, what="per-batch history", time_range=time_range,
                                           tz=tz, now=timezone.now())
    except BaseException:
        slot.release()  # the stream that would release it is never made
        raise
    name = download_name(pipeline=pipeline, what="batches", time_range=time_range, ext="csv")
    stream = _ReleasingStream(csv_stream(header=header, rows=data, preamble=preamble), slot)
    return _attachment(StreamingHttpResponse(stream, content_type="text/csv; charset=utf-8"), name)


@role_required(VIEWER)  # first: a stranger is sent to log in, not told which methods exist
@require_POST
@bad_params_answered(page=True)
def export_job_new(request, pipeline_id: int):
    """Queue a background export (the form of the "too large" page or the pipeline page)."""
    pipeline = _pipeline_or_404(pipeline_id)
    kind = params.choice("export", params.single(request.POST, "export"), ExportJob.Kind.values)
    if kind == ExportJob.Kind.CHART_CSV:
        chart_params = params.parse_chart_params(request.POST, now=timezone.now())
        time_range, chart_kind, unit = chart_params.range, chart_params.kind, chart_params.unit
    else:
        time_range = params.parse_range(request.POST, now=timezone.now(), allow_all=True, default="all")
        chart_kind, unit = "total", "messages"
    try:
        export_job_create(user=request.user, pipeline=pipeline, kind=kind, time_range=time_range,
                                   chart_kind=chart_kind, chart_unit=unit)
    except ExportQueueFull as exc:
        return heavy.busy_response(request, heavy.Busy(str(exc), retry_after_s=60))
    return redirect("export_jobs")


@require_GET
@role_required(VIEWER)
def export_jobs(request):
    return render(request, "dashboard/exports.html", {"jobs": export_selectors.export_jobs(user=request.user)})


@require_GET
@role_required(VIEWER)
def export_jobs_live(request):
    return render(request, "dashboard/partials/export_jobs.html", {"jobs": export_selectors.export_jobs(user=request.user)})


@require_GET
@role_required(VIEWER)
def export_job_download(request, job_id: int):
    # Someone else's export is a 404, like one that does not exist.
    job = export_job_done(user=request.user, job_id=job_id)
    if job is None:
        raise Http404(f"no finished export {job_id} of yours")
    try:
        handle = open(job.file_path, "rb")
    except FileNotFoundError:
        raise Http404(f"the file of export {job_id} is gone (exports are kept a limited time)") from None
    return FileResponse(handle, as_attachment=True, filename=job.file_name, content_type="text/csv; charset=utf-8")
