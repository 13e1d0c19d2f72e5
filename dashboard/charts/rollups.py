"""Chart roll-ups: each pipeline's lag per minute and per hour (ChartRollup), the largest seen in
each bucket. Written at every cluster poll from the evaluation's own numbers (rollups_record,
called by dashboard.monitoring.evaluation.pipelines_evaluate), so a chart's points are the
page's numbers; read by dashboard.charts.selectors for ranges too long for raw samples; pruned
with the retention policy (rollups_prune, from dashboard.monitoring.pruning.history_prune).

A cycle costs the same few statements whatever the number of pipelines: the open buckets
(minute and hour) are read in one query, merged in Python, and upserted at once (offsetwatch.lib.pgcopy.copy_upsert: COPY into a
staging table, then one INSERT ... SELECT ... ON CONFLICT).
"""
from __future__ import annotations

from array import array
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from django.conf import settings
from django.db.models import Q

from dashboard.models import ChartRollup, PipelineEvaluation
from offsetwatch.lib.pgcopy import copy_upsert
from offsetwatch.lib.rollup_packing import (
    MISSING,
    decode,
    decode_partitions,
    encode,
    encode_partitions,
    tenths_array,
)

RESOLUTIONS = (ChartRollup.MINUTE, ChartRollup.HOUR)
_FIELDS = ["partitions", "lags", "total_lag", "lag_seconds", "samples"]


def bucket_start(at: datetime, resolution_s: int) -> datetime:
    """The start of the bucket holding `at` (UTC epoch-aligned: whole minutes, whole hours)."""
    t = int(at.timestamp())
    return datetime.fromtimestamp(t - t % resolution_s, tz=timezone.utc)


@dataclass
class Point:
    """A pipeline's lag at one moment (or the largest over a bucket), as a roll-up keeps it."""

    partitions: list[int]
    lags: array  # 'q', MISSING unknown
    seconds: array  # 'i' tenths, SECONDS_MISSING unknown
    total_lag: int | None
    lag_seconds: float | None
    samples: int = 1


def evaluation_point(e: PipelineEvaluation) -> Point:
    """The evaluation's per-partition numbers (what the pipeline page shows) as a roll-up point."""
    rows = e.partitions
    try:
        lags, seconds = [r["lag"] for r in rows], [r["lag_seconds"] for r in rows]
    except KeyError:  # a row stored before these fields: unknown
        lags, seconds = [r.get("lag") for r in rows], [r.get("lag_seconds") for r in rows]
    return Point(
        partitions=[r["partition"] for r in rows],
        lags=array("q", [MISSING if v is None else v for v in lags]),
        seconds=tenths_array(seconds),
        total_lag=e.total_lag, lag_seconds=e.lag_seconds,
    )


def _larger(a, b):
    return b if a is None else a if b is None else max(a, b)


def merged(old: Point, new: Point) -> Point:
    """The largest of two points per partition (unknown is the smallest value: max() keeps the
    known one); partitions of either are kept (a topic that grew, a partition gone)."""
    if old.partitions == new.partitions:
        lags = array("q", map(max, old.lags, new.lags))
        seconds = array("i", map(max, old.seconds, new.seconds))
        partitions = new.partitions
    else:
        by_partition = {p: (lag, s) for p, lag, s in zip(old.partitions, old.lags, old.seconds)}
        for p, lag, s in zip(new.partitions, new.lags, new.seconds):
            was = by_partition.get(p)
            by_partition[p] = (lag, s) if was is None else (max(was[0], lag), max(was[1], s))
        partitions = sorted(by_partition)
        lags = array("q", (by_partition[p][0] for p in partitions))
        seconds = array("i", (by_partition[p][1] for p in partitions))
    return Point(partitions, lags, seconds, _larger(old.total_lag, new.total_lag),
                 _larger(old.lag_seconds, new.lag_seconds), old.samples + new.samples)


def _point_of(parts: bytes, packed: bytes, total_lag, lag_seconds, samples) -> Point:
    lags, seconds = decode(packed)
    return Point(decode_partitions(parts, len(lags)), lags, seconds, total_lag, lag_seconds, samples)


def rollups_merge(points: dict[tuple[int, int, datetime], Point], *, keep_existing: bool = False) -> int:
    """Merge `points` ((pipeline id, resolution, bucket start) -> Point) into the stored roll-ups:
    the stored buckets among them are read in one query, merged (largest per partition), and
    written back in one upsert. `keep_existing`: a stored bucket wins untouched
    (the backfill: a bucket written live from evaluations is the page's number). Returns the rows
    written."""
    if not points:
        return 0
    wanted = Q()
    for resolution in RESOLUTIONS:
        buckets = {b for (_, r, b) in points if r == resolution}
        if buckets:
            wanted |= Q(resolution_s=resolution, bucket__in=buckets)
    stored = (ChartRollup.objects.filter(wanted, pipeline_id__any={pk for pk, _, _ in points})
              .values_list("pipeline_id", "resolution_s", "bucket", *_FIELDS))
    points = dict(points)
    for pk, resolution, bucket, *fields in stored:
        key = (pk, resolution, bucket)
        if key in points:
            if keep_existing:
                del points[key]
            else:
                points[key] = merged(_point_of(*fields), points[key])
    rows = [(pk, r, b, encode_partitions(p.partitions), encode(p.lags, p.seconds), p.total_lag, p.lag_seconds, p.samples)
            for (pk, r, b), p in points.items()]
    _upsert(rows, keep_existing=keep_existing)
    return len(rows)


_COLUMNS = ("pipeline_id", "resolution_s", "bucket", "partitions", "lags", "total_lag", "lag_seconds", "samples")


def _upsert(rows: list[tuple], *, keep_existing: bool) -> None:
    """Insert or replace the rows (in _COLUMNS' order): a COPY and one INSERT ... ON CONFLICT
    (offsetwatch.lib.pgcopy.copy_upsert), the same statements whatever the rows."""
    copy_upsert(ChartRollup, _COLUMNS, rows, conflict=("pipeline_id", "resolution_s", "bucket"),
                update=() if keep_existing else _FIELDS)


def rollups_record(evaluations: list[PipelineEvaluation], now: datetime) -> int:
    """Add a cycle's evaluations to their pipelines' open minute and hour (in the poll's
    transaction): the same statements whatever the number of pipelines."""
    points = {}
    buckets = [(resolution, bucket_start(now, resolution)) for resolution in RESOLUTIONS]
    for e in evaluations:
        point = evaluation_point(e)
        for resolution, bucket in buckets:
            points[(e.pipeline_id, resolution, bucket)] = point
    return rollups_merge(points)


def rollups_prune(*, now: datetime) -> dict[str, int]:
    """Minute roll-ups older than RETENTION_MINUTE_S and hour roll-ups older than RETENTION_HOUR_S
    go, as the samples they summarise do."""
    counts = {}
    for resolution, keep_s, name in ((ChartRollup.MINUTE, settings.RETENTION_MINUTE_S, "minute"),
                                     (ChartRollup.HOUR, settings.RETENTION_HOUR_S, "hour")):
        # A bucket goes once all of it is past retention.
        until = now - timedelta(seconds=keep_s + resolution)
        counts[f"ChartRollup {name} expired"] = ChartRollup.objects.filter(
            resolution_s=resolution, bucket__lt=until).delete()[0]
    return counts


def _floored(at: datetime, resolution_s: int) -> datetime:
    try:
        return bucket_start(at, resolution_s)
    except (ValueError, OverflowError, OSError):
        return at  # a range from year 1: nothing is stored before it anyway


def rollup_points(*, pipeline_id: int, resolution_s: int, since: datetime, until: datetime,
                  per_partition: bool):
    """(bucket start, Point) in time order for the buckets overlapping [since, until]; without
    `per_partition` the packed columns are not read (a total's chart needs two numbers a row)."""
    fields = ["bucket", "total_lag", "lag_seconds", "samples"] + (["partitions", "lags"] if per_partition else [])
    rows = (ChartRollup.objects.filter(pipeline_id=pipeline_id, resolution_s=resolution_s,
                                       bucket__gte=_floored(since, resolution_s),
                                       bucket__lte=until)
            .order_by("bucket").values_list(*fields))
    for bucket, total_lag, lag_seconds, samples, *packed in rows:
        if per_partition:
            yield bucket, _point_of(packed[0], packed[1], total_lag, lag_seconds, samples)
        else:
            yield bucket, Point([], array("q"), array("i"), total_lag, lag_seconds, samples)
