"""Roll-ups of history stored before they existed (the upgrade that added them): computed from the
stored samples by the same code as the full-resolution chart (pipeline_chart_table at SAMPLES),
then kept as the largest per bucket, as the live writer keeps them. `manage.py rollups_backfill`."""
from __future__ import annotations

from array import array
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Min

from dashboard.charts import rollups
from dashboard.charts.selectors import SAMPLES, pipeline_chart_table
from dashboard.models import ChartRollup, Pipeline
from offsetwatch.lib.rollup_packing import tenths

CHUNK = timedelta(days=1)  # whole days: no minute or hour straddles two chunks


def _runs(times: array, resolution_s: int):
    """(bucket start epoch s, first row, end row) of each bucket's run of rows (times increase)."""
    start = 0
    for i in range(1, len(times) + 1):
        if i == len(times) or int(times[i]) // resolution_s != int(times[start]) // resolution_s:
            yield int(times[start]) // resolution_s * resolution_s, start, i
            start = i


def _chunk_points(pipeline: Pipeline, since: datetime, until: datetime, now: datetime) -> dict:
    def table(kind, unit):
        return pipeline_chart_table(pipeline=pipeline, kind=kind, unit=unit, since=since, until=until,
                                    resolution=SAMPLES)

    messages, seconds, totals = table("partitions", "messages"), table("partitions", "seconds"), table("total", "messages")
    points = {}
    if not len(messages.times):
        return points
    # Seconds as stored (tenths, unknown the smallest) so max() per bucket is the roll-up's rule.
    tenth_columns = [array("i", map(tenths, col)) for col in seconds.columns]
    total = totals.columns[0]
    minutes_since = (now - timedelta(seconds=settings.RETENTION_MINUTE_S)).timestamp()
    for resolution in rollups.RESOLUTIONS:
        for start, i, j in _runs(messages.times, resolution):
            if resolution == ChartRollup.MINUTE and start < minutes_since:
                continue  # past the minutes' retention: pruning would drop it
            lags = array("q", (max(col[i:j]) for col in messages.columns))
            secs = array("i", (max(col[i:j]) for col in tenth_columns))
            known = [s for s in secs if s >= 0]
            top = max(total[i:j])
            bucket = datetime.fromtimestamp(start, tz=since.tzinfo)
            points[(pipeline.pk, resolution, bucket)] = rollups.Point(
                list(messages.partitions), lags, secs, None if top == rollups.MISSING else top,
                max(known) / 10 if known else None, j - i)
    return points


def rollups_backfill(*, pipeline: Pipeline, since: datetime, until: datetime, now: datetime) -> int:
    """Roll-ups of `pipeline` over [since, until) from its stored samples, a day at a time; a bucket
    already stored (written live, the page's numbers) is left as it is. Returns the rows written."""
    written = 0
    first = pipeline.lag_samples.filter(sampled_at__gte=since, sampled_at__lt=until).aggregate(first=Min("sampled_at"))
    if first["first"] is None:
        return 0  # no history: nothing to walk
    since = first["first"]
    start = since.replace(hour=0, minute=0, second=0, microsecond=0)
    while start < until:
        end = min(start + CHUNK, until)
        # The range of the chart selectors is inclusive: stop a microsecond before the next chunk.
        points = _chunk_points(pipeline, max(start, since), end - timedelta(microseconds=1), now)
        written += rollups.rollups_merge(points, keep_existing=True)
        start = end
    return written
