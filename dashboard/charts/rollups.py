"""Chart roll-ups: each pipeline's lag per minute and per hour (ChartRollup), the largest seen in
each bucket. Written at every cluster poll from the evaluation's own numbers (rollups_record,
called by dashboard.monitoring.evaluation.pipelines_evaluate), so a chart's points are the
page's numbers; read by dashboard.charts.selectors for ranges too long for raw samples; pruned
with the retention policy (rollups_prune, from dashboard.monitoring.pruning.history_prune).

A cycle adds its numbers to each pipeline's open minute. An hour is the largest of its minutes:
a minute is folded into its hour once, by the first cycle of the pipeline's next minute (the
fold), instead of every cycle writing the hour too (that was half of the roll-ups' writes).
So every minute row of a pipeline but its newest is in its hour, and the reader of hours
(rollup_points) adds that newest minute: a chart of hours is exact at any moment.

A cycle costs the same few statements whatever the number of pipelines: the buckets it changes
are read in one query (two at a fold), merged in Python, and upserted at once
(offsetwatch.lib.pgcopy.copy_upsert: COPY into a staging table, then one INSERT ... SELECT ...
ON CONFLICT).
"""
from __future__ import annotations

from array import array
from bisect import bisect_left
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from django.conf import settings
from django.db import connection
from django.db.models import Exists, Max, OuterRef, Q

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
    return _merge_write(points, _stored(points), keep_existing=keep_existing)


def _stored(points) -> dict[tuple[int, int, datetime], tuple]:
    """The stored roll-ups among the keys of `points` (their packed fields, decoded only where
    they are merged: the backfill keeps a stored bucket as it is), in one query."""
    if not points:
        return {}
    wanted = Q()
    for resolution in RESOLUTIONS:
        buckets = {b for (_, r, b) in points if r == resolution}
        if buckets:
            wanted |= Q(resolution_s=resolution, bucket__in=buckets)
    rows = (ChartRollup.objects.filter(wanted, pipeline_id__any={pk for pk, _, _ in points})
            .values_list("pipeline_id", "resolution_s", "bucket", *_FIELDS))
    return {(pk, resolution, bucket): fields for pk, resolution, bucket, *fields in rows
            if (pk, resolution, bucket) in points}


def _merge_write(points, stored, *, keep_existing: bool = False) -> int:
    points = dict(points)
    for key, fields in stored.items():
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
    """Add a cycle's evaluations to their pipelines' open minute (in the poll's transaction); a
    pipeline whose minute opens with this cycle has its previous minute folded into that
    minute's hour (the module's docstring). The same statements whatever the number of
    pipelines. Returns the rows written."""
    minute = bucket_start(now, ChartRollup.MINUTE)
    points = {(e.pipeline_id, ChartRollup.MINUTE, minute): evaluation_point(e) for e in evaluations}
    if not points:
        return 0
    stored = _stored(points)
    opened = [pk for pk, resolution, bucket in points if (pk, resolution, bucket) not in stored]
    hours = {(pk, ChartRollup.HOUR, bucket_start(bucket, ChartRollup.HOUR)): point
             for (pk, bucket), point in _newest_minutes(opened, before=minute).items()}
    stored.update(_stored(hours))
    return _merge_write(points | hours, stored)


def _newest_minutes(pipeline_ids, *, before: datetime) -> dict[tuple[int, datetime], Point]:
    """(pipeline id, bucket) -> Point of each pipeline's newest minute row before `before`: the
    one not yet in its hour."""
    if not pipeline_ids:
        return {}
    table = connection.ops.quote_name(ChartRollup._meta.db_table)
    if connection.vendor == "postgresql":
        # One probe of the (pipeline, resolution, bucket) key per pipeline (a week of minutes each).
        sql = (f"SELECT p.id, r.bucket, r.partitions, r.lags, r.total_lag, r.lag_seconds, r.samples "
               f"FROM unnest(%s::bigint[]) AS p(id) CROSS JOIN LATERAL (SELECT * FROM {table} "
               f"WHERE pipeline_id = p.id AND resolution_s = %s AND bucket < %s ORDER BY bucket DESC LIMIT 1) AS r")
        with connection.cursor() as cursor:
            cursor.execute(sql, [sorted(pipeline_ids), ChartRollup.MINUTE, before])
            rows = cursor.fetchall()
    else:  # the demo's SQLite: in Django's terms
        newest = (ChartRollup.objects.filter(resolution_s=ChartRollup.MINUTE, bucket__lt=before,
                                             pipeline_id__in=pipeline_ids)
                  .values("pipeline_id").annotate(newest=Max("bucket")).values_list("pipeline_id", "newest"))
        wanted = Q(pk__in=[])
        for pk, bucket in newest:
            wanted |= Q(pipeline_id=pk, bucket=bucket)
        rows = (ChartRollup.objects.filter(wanted, resolution_s=ChartRollup.MINUTE)
                .values_list("pipeline_id", "bucket", *_FIELDS))
    return {(pk, bucket): _point_of(bytes(parts), bytes(packed), total, seconds, samples)
            for pk, bucket, parts, packed, total, seconds, samples in rows}


def rollups_prune(*, now: datetime) -> dict[str, int]:
    """Minute roll-ups older than RETENTION_MINUTE_S (but each pipeline's newest minute) and hour
    roll-ups older than RETENTION_HOUR_S go, as the samples they summarise do."""
    counts = {}
    for resolution, keep_s, name in ((ChartRollup.MINUTE, settings.RETENTION_MINUTE_S, "minute"),
                                     (ChartRollup.HOUR, settings.RETENTION_HOUR_S, "hour")):
        # A bucket goes once all of it is past retention.
        until = now - timedelta(seconds=keep_s + resolution)
        expired = ChartRollup.objects.filter(resolution_s=resolution, bucket__lt=until)
        if resolution == ChartRollup.MINUTE:
            # A pipeline's newest minute is not in its hour until its next minute opens
            # (rollups_record): it stays until then, however old (a pipeline silent for a week).
            newer = ChartRollup.objects.filter(pipeline_id=OuterRef("pipeline_id"), resolution_s=resolution,
                                               bucket__gt=OuterRef("bucket"))
            expired = expired.filter(Exists(newer))
        counts[f"ChartRollup {name} expired"] = expired.delete()[0]
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
    since = _floored(since, resolution_s)
    rows = (ChartRollup.objects.filter(pipeline_id=pipeline_id, resolution_s=resolution_s,
                                       bucket__gte=since, bucket__lte=until)
            .order_by("bucket").values_list(*fields))
    points = []
    for bucket, total_lag, lag_seconds, samples, *packed in rows:
        if per_partition:
            points.append((bucket, _point_of(packed[0], packed[1], total_lag, lag_seconds, samples)))
        else:
            points.append((bucket, Point([], array("q"), array("i"), total_lag, lag_seconds, samples)))
    if resolution_s == ChartRollup.HOUR:
        _newest_minute_add(points, pipeline_id=pipeline_id, since=since, until=until, per_partition=per_partition)
    yield from points


def _newest_minute_add(points: list[tuple[datetime, Point]], *, pipeline_id: int, since: datetime, until: datetime,
                       per_partition: bool) -> None:
    """The pipeline's newest minute, not folded into its hour yet (rollups_record), added to that
    hour among `points` (hours in time order), or as its hour when that hour has no row yet."""
    newest = (ChartRollup.objects.filter(pipeline_id=pipeline_id, resolution_s=ChartRollup.MINUTE)
              .order_by("-bucket").values_list("bucket", *_FIELDS).first())
    if newest is None:
        return
    bucket, parts, packed, total_lag, lag_seconds, samples = newest
    hour = bucket_start(bucket, ChartRollup.HOUR)
    if not since <= hour <= until:
        return
    if per_partition:
        minute = _point_of(parts, packed, total_lag, lag_seconds, samples)
    else:
        minute = Point([], array("q"), array("i"), total_lag, lag_seconds, samples)
    i = bisect_left([at for at, _ in points], hour)
    if i < len(points) and points[i][0] == hour:
        points[i] = (hour, merged(points[i][1], minute))
    else:
        points.insert(i, (hour, minute))
