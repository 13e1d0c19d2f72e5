"""Chart data: a pipeline's lag series in a range as packed columns (ChartTable), from raw
samples for short ranges and from the minute or hour roll-ups (dashboard.charts.rollups) for
longer ones; the series counts that bound a request, and the markers (incidents, restarts,
rewinds) drawn on it."""
from __future__ import annotations

from array import array
from dataclasses import dataclass
from datetime import datetime, timedelta
from math import nan as NAN
from typing import Iterator

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from dashboard.charts import rollups
from dashboard.models import ChartRollup, Pipeline, PipelineEvaluation, RewindRequest, WatermarkSample
from dashboard.params import shifted
from offsetwatch.lib import rollup_packing
from offsetwatch.lib.packing import NONE, unpack, unpack_partitions
from streamoffsets import evaluation

MISSING = rollup_packing.MISSING  # "unknown" in an int64 column (a lag can be negative: high out-of-range)


@dataclass
class ChartTable:
    """A chart's numbers: one row per lag sample, one column per series.

    Columns are arrays ('q' for messages with MISSING for unknown, 'd' for seconds with NaN for
    unknown), so 30 days of samples of 64 partitions take tens of MB, not hundreds.
    """

    kind: str  # "total" | "partitions"
    unit: str  # "messages" | "seconds"
    times: array  # epoch seconds ('d'), increasing
    names: list[str]
    partitions: list[int | None]  # the partition of each column (None for the total)
    columns: list[array]

    def values(self, index: int) -> list[int | float | None]:
        col = self.columns[index]
        if col.typecode == "q":
            return [None if v == MISSING else v for v in col]
        return [None if v != v else v for v in col]  # NaN is the only value unequal to itself

    def rows(self) -> Iterator[tuple[float, list[int | float | None]]]:
        """(time, values) row by row, read from the arrays as it goes (an export streams them)."""
        kinds = [(col, col.typecode == "q") for col in self.columns]
        for i, t in enumerate(self.times):
            yield t, [None if (col[i] == MISSING if ints else col[i] != col[i]) else col[i] for col, ints in kinds]


def _lag_rows(pipeline: Pipeline, since: datetime, until: datetime):
    return (pipeline.lag_samples.filter(sampled_at__gte=since, sampled_at__lte=until).order_by("sampled_at")
            .values_list("sampled_at", "partitions", "committed").iterator(chunk_size=2000))


def _watermark_rows(pipeline: Pipeline, since: datetime, until: datetime):
    # Only the high watermarks: the lows of 30 days of samples are not worth reading here.
    return (WatermarkSample.objects.filter(cluster_id=pipeline.store.cluster_id, topic=pipeline.topic,
                                           sampled_at__gte=since, sampled_at__lte=until)
            .order_by("sampled_at").values_list("sampled_at", "partitions", "highs").iterator(chunk_size=2000))


def _packed_columns(rows) -> tuple[array, dict[int, array]]:
    """(times, partition -> column) from rows of (time, packed partitions, packed values);
    packing.NONE where a row lacks a partition (e.g. before the topic grew)."""
    times = array("d")
    columns: dict[int, array] = {}
    for n, (at, parts, packed) in enumerate(rows):
        times.append(at.timestamp())
        values = unpack(packed)
        ids = unpack_partitions(parts, len(values))
        for p, v in zip(ids, values):
            col = columns.get(p)
            if col is None:
                col = columns[p] = array("q", [NONE]) * n
            col.append(NONE if v is None else v)
        if len(ids) != len(columns):
            for col in columns.values():
                if len(col) == n:
                    col.append(NONE)
    return times, columns


# A series of a chart has at most about SERIES_POINTS points: raw samples for short ranges
# (RAW_SPAN_S by unit), minute roll-ups while span/minute fits, hour roll-ups beyond. Raw lag in
# messages is one subtraction a value: an hour of samples (360 at 10 s). Raw lag in seconds walks
# each partition's watermark history with its lookback (LAG_SECONDS_LOOKBACK_S): 15 minutes.
SERIES_POINTS = 2000
RAW_SPAN_S = {"messages": 3600.0, "seconds": 900.0}
SAMPLES, MINUTE, HOUR = "samples", "minute", "hour"
_RESOLUTION_S = {MINUTE: ChartRollup.MINUTE, HOUR: ChartRollup.HOUR}


def chart_resolution(*, unit: str, since: datetime, until: datetime, now: datetime) -> str:
    """The resolution a chart over [since, until] is drawn at: SAMPLES, MINUTE or HOUR. Minute
    roll-ups are kept RETENTION_MINUTE_S: a range starting before that reads hours."""
    span_s = (until - since).total_seconds()
    if span_s <= RAW_SPAN_S[unit]:
        return SAMPLES
    minutes_kept_since = shifted(now, -timedelta(seconds=settings.RETENTION_MINUTE_S))
    if span_s / ChartRollup.MINUTE <= SERIES_POINTS and since >= minutes_kept_since:
        return MINUTE
    return HOUR


def pipeline_chart_table(*, pipeline: Pipeline, kind: str, unit: str, since: datetime, until: datetime,
                         resolution: str | None = None) -> ChartTable:
    """The chart of a pipeline over [since, until]: total or per-partition lag, in messages or
    seconds. `resolution` None picks it from the range (chart_resolution): the page's chart and
    images; SAMPLES reads every stored sample (exports: full resolution).

    From roll-ups, each point is the largest lag of its bucket, at the bucket's start, and the
    newest evaluation (the pipeline page's numbers) is the last point. A range with no roll-up at
    all (history from before they existed, not backfilled) is read from the samples."""
    if resolution is None:
        resolution = chart_resolution(unit=unit, since=since, until=until, now=timezone.now())
    if resolution != SAMPLES:
        table = _rollup_table(pipeline=pipeline, kind=kind, unit=unit, since=since, until=until,
                              resolution_s=_RESOLUTION_S[resolution])
        if table is not None:
            return table
    return _samples_table(pipeline=pipeline, kind=kind, unit=unit, since=since, until=until)


def _rollup_table(*, pipeline: Pipeline, kind: str, unit: str, since: datetime, until: datetime,
                  resolution_s: int) -> ChartTable | None:
    per_partition = kind == "partitions"
    points = list(rollups.rollup_points(pipeline_id=pipeline.pk, resolution_s=resolution_s, since=since, until=until,
                                        per_partition=per_partition))
    if not points:
        return None
    newest = (PipelineEvaluation.objects.filter(pipeline=pipeline, evaluated_at__gte=since, evaluated_at__lte=until)
              .first())
    if newest is not None and newest.evaluated_at > points[-1][0]:
        points.append((newest.evaluated_at, rollups.evaluation_point(newest)))
    times = array("d", (at.timestamp() for at, _ in points))
    if not per_partition:
        if unit == "messages":
            total = array("q", (MISSING if p.total_lag is None else p.total_lag for _, p in points))
            return ChartTable(kind, unit, times, ["total lag (largest in each bucket)"], [None], [total])
        total = array("d", (NAN if p.lag_seconds is None else round(p.lag_seconds, 1) for _, p in points))
        return ChartTable(kind, unit, times, ["lag (max over partitions)"], [None], [total])
    partitions, columns = _partition_columns([p for _, p in points], unit)
    return ChartTable(kind, unit, times, [f"partition {q}" for q in partitions], partitions, columns)


def _partition_columns(points: list[rollups.Point], unit: str) -> tuple[list[int], list[array]]:
    """(partitions, one column each) of roll-up points; a partition missing from a point (the
    topic grew, or the newest evaluation differs) is unknown there."""
    # The usual case: a run of points with the same partitions, transposed in C. Unknown is the
    # same int64 in both (rollup_packing.MISSING == MISSING).
    head = points[0].partitions
    run = next((i for i, p in enumerate(points) if p.partitions != head), len(points))
    if unit == "messages":
        columns = {q: array("q", col) for q, col in zip(head, zip(*(p.lags for p in points[:run])))}
    else:
        unknown = rollup_packing.SECONDS_MISSING
        columns = {q: array("d", [NAN if s == unknown else s / 10 for s in col])
                   for q, col in zip(head, zip(*(p.seconds for p in points[:run])))}
    empty = array("q", [MISSING]) if unit == "messages" else array("d", [NAN])
    for row, p in enumerate(points[run:], start=run):
        values = p.lags if unit == "messages" else [NAN if s == rollup_packing.SECONDS_MISSING else s / 10
                                                    for s in p.seconds]
        for col in columns.values():
            col.append(empty[0])
        for q, v in zip(p.partitions, values):
            col = columns.get(q)
            if col is None:
                col = columns[q] = empty * (row + 1)
            col[row] = v
    partitions = sorted(columns)
    return partitions, [columns[q] for q in partitions]


def _samples_table(*, pipeline: Pipeline, kind: str, unit: str, since: datetime, until: datetime) -> ChartTable:
    """The chart at each stored lag sample (full resolution)."""
    if kind == "total" and unit == "messages":
        times, total = array("d"), array("q")
        for at, lag in (pipeline.lag_samples.filter(sampled_at__gte=since, sampled_at__lte=until)
                        .order_by("sampled_at").values_list("sampled_at", "total_lag").iterator(chunk_size=5000)):
            times.append(at.timestamp())
            total.append(lag)
        return ChartTable(kind, unit, times, ["total lag"], [None], [total])

    times, committed = _packed_columns(_lag_rows(pipeline, since, until))
    # Lag in seconds needs the watermark history before the range too: as far back as the
    # evaluation looks, so the chart's newest point agrees with the pipeline page's number.
    # Saturating: a range from year 1 has no "before" to look back into (no OverflowError).
    lookback = timedelta(seconds=settings.LAG_SECONDS_LOOKBACK_S)
    wm_times, highs = _packed_columns(_watermark_rows(pipeline, shifted(since, -lookback), until))
    partitions = sorted(committed)
    columns: list[array] = []
    if unit == "messages":
        # Each lag sample against the newest watermark sample at or before it: the one of the
        # same cycle, unless pruning kept different samples of a minute or hour for the two.
        at_wm = array("q")
        k = -1
        for t in times:
            while k + 1 < len(wm_times) and wm_times[k + 1] <= t:
                k += 1
            at_wm.append(k)
        for p in partitions:
            c_col, h_col, col = committed[p], highs.get(p), array("q")
            for i, k in enumerate(at_wm):
                c, h = c_col[i], (h_col[k] if h_col is not None and k >= 0 else NONE)
                col.append(MISSING if c == NONE or h == NONE else h - c)
            columns.append(col)
    else:
        for p in partitions:
            h_col = highs.get(p, ())
            high_samples = [(t, h) for t, h in zip(wm_times, h_col) if h != NONE]
            committed_samples = [(t, None if c == NONE else c) for t, c in zip(times, committed[p])]
            seconds = evaluation.lag_seconds_series(committed_samples, high_samples)
            columns.append(array("d", (NAN if s is None else round(s, 1) for s in seconds)))
        if kind == "total":
            # The pipeline's lag in seconds is its most-behind partition's.
            total = array("d")
            for row in zip(*columns):
                known = [s for s in row if s == s]
                total.append(max(known) if known else NAN)
            return ChartTable(kind, unit, times, ["lag (max over partitions)"], [None], [total])
    return ChartTable(kind, unit, times, [f"partition {p}" for p in partitions], list(partitions), columns)


def lag_sample_count(*, pipeline: Pipeline, since: datetime, until: datetime) -> int:
    """The rows of the pipeline's chart data over [since, until]."""
    return pipeline.lag_samples.filter(sampled_at__gte=since, sampled_at__lte=until).count()


def chart_series_count(*, pipeline: Pipeline, kind: str, since: datetime, until: datetime) -> int:
    """The series of the pipeline's chart over [since, until]: 1 for a total, else the partitions
    of the newest lag sample in the range (one indexed row: enough to bound an export's size)."""
    if kind == "total":
        return 1
    newest = (pipeline.lag_samples.filter(sampled_at__gte=since, sampled_at__lte=until).order_by("-sampled_at")
              .values_list("committed", flat=True).first())
    return max(1, len(unpack(newest))) if newest is not None else 1


@dataclass(frozen=True)
class Marker:
    """An event drawn on a chart's time axis."""

    at: datetime
    kind: str  # "incident opened" | "incident closed" | "restart" | "rewind"
    label: str


def _incident_markers(*, pipeline: Pipeline, since: datetime, until: datetime) -> list[Marker]:
    markers = []
    # The pipeline's own incidents: its partitions' are named in their reasons already.
    for i in pipeline.incidents.filter(Q(opened_at__range=(since, until)) | Q(closed_at__range=(since, until)),
                                       partition=None):
        why = "; ".join(i.reasons[:2]) if i.reasons else ""
        if since <= i.opened_at <= until:
            markers.append(Marker(i.opened_at, "incident opened", f"{i.worst_status_name}: {why}"[:300]))
        if i.closed_at and since <= i.closed_at <= until:
            markers.append(Marker(i.closed_at, "incident closed", f"{i.worst_status_name} incident closed"))
    return markers


def _restart_markers(*, pipeline: Pipeline, since: datetime, until: datetime) -> list[Marker]:
    markers = []
    for r in pipeline.start_reports.filter(received_at__range=(since, until)):
        decisions = r.report.get("decisions") if isinstance(r.report, dict) else None
        what = "first start" if r.first_start else "job restarted"
        if r.messages_lost:
            what += f", {r.messages_lost:,} messages lost to clamping"
        detail = "; ".join(str(d) for d in decisions[:2]) if decisions else "resumed from the stored offsets"
        markers.append(Marker(r.received_at, "restart", f"{what}: {detail}"[:300]))
    return markers


def _rewind_markers(*, pipeline: Pipeline, since: datetime, until: datetime) -> list[Marker]:
    """Rewinds applied to the pipeline (when the job or the dashboard applied them): who asked,
    to what, and how it ended."""

    markers = []
    for r in RewindRequest.objects.filter(pipeline=pipeline, applied_at__range=(since, until)).select_related("requested_by"):
        target = ", ".join(f"p{p}: {o:,}" for p, o in r.target_offsets.items())
        markers.append(Marker(r.applied_at, "rewind", f"rewind #{r.pk} to {r.target_kind} ({target}) by "
                                                      f"{r.requested_by.username}: {r.status}"[:300]))
    return markers


# Each source of markers: a function (pipeline, since, until) -> list[Marker]. A new kind of event
# is one more function here.
MARKER_SOURCES = (_incident_markers, _restart_markers, _rewind_markers)


def chart_markers(*, pipeline: Pipeline, since: datetime, until: datetime) -> list[Marker]:
    """Every event of the pipeline within [since, until], in time order."""
    markers = [m for source in MARKER_SOURCES for m in source(pipeline=pipeline, since=since, until=until)]
    return sorted(markers, key=lambda m: m.at)
