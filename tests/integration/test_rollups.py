"""The charts' minute and hour roll-ups: written by the collection cycle from the evaluation's own
numbers (the largest in each bucket), read by the charts over long ranges (equal to what the
samples say there), backfilled from stored history, pruned with the retention policy, and a
migration that keeps what was stored before it."""
from __future__ import annotations

import csv
import io
import time
from array import array
from datetime import datetime, timedelta, timezone

import pytest
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.urls import reverse
from django.utils import timezone as dj_timezone

from collectors.cycle import collect_once
from dashboard.charts import rollups
from dashboard.charts.selectors import HOUR, MINUTE, SAMPLES, chart_resolution, pipeline_chart_table
from dashboard.models import ChartRollup, LagSample, Pipeline, PipelineEvaluation
from dashboard.monitoring.pruning import history_prune
from dashboard.monitoring.selectors import Committed
from dashboard.monitoring.services import watermarks_record
from offsetwatch.lib.rollup_packing import MISSING, decode, decode_partitions
from reference_job.producer import produce
from streamoffsets.kafka import WatermarkResult
from streamoffsets.types import Watermarks
from tests.factories import hbase_store_setup, pipeline_row, samples_bulk, save

pytestmark = pytest.mark.django_db


def _stored(pipeline, resolution):
    """(bucket, {partition: (lag, tenths)}, total, seconds, samples) of the pipeline's stored roll-ups."""
    out = []
    for r in ChartRollup.objects.filter(pipeline=pipeline, resolution_s=resolution).order_by("bucket"):
        lags, tenths = decode(r.lags)
        parts = decode_partitions(r.partitions, len(lags))
        out.append((r.bucket, dict(zip(parts, zip(lags, tenths))), r.total_lag, r.lag_seconds, r.samples))
    return out


def _rows(pipeline, resolution):
    """The same as the charts read them (rollups.rollup_points): an hour includes the pipeline's
    newest minute, which is folded into its stored hour only when the next minute opens."""
    points = rollups.rollup_points(pipeline_id=pipeline.pk, resolution_s=resolution, per_partition=True,
                                   since=datetime(2000, 1, 1, tzinfo=timezone.utc),
                                   until=datetime(2100, 1, 1, tzinfo=timezone.utc))
    return [(bucket, dict(zip(p.partitions, zip(p.lags, p.seconds))), p.total_lag, p.lag_seconds, p.samples)
            for bucket, p in points]


# --- written by a real collection cycle (Tansu, the HBase stand-in) -------------------------------


def test_a_collection_cycle_writes_the_minute_and_hour_from_the_evaluations_numbers(stack, unique_name):
    s = hbase_store_setup(stack, unique_name, partitions=2, records=40)  # 20 per partition
    save(s, "etl", int(time.time() * 1000), {0: 5, 1: 20})
    collect_once()
    collect_once()
    pipeline = Pipeline.objects.get(store=s.store)
    evaluation = PipelineEvaluation.objects.get(pipeline=pipeline)
    page = {r["partition"]: r for r in evaluation.partitions}
    assert page[0]["lag"] == 15 and page[1]["lag"] == 0
    for resolution in (ChartRollup.MINUTE, ChartRollup.HOUR):
        rows = _rows(pipeline, resolution)
        assert sum(r[4] for r in rows) == 2  # both cycles merged (in one bucket, or two across its edge)
        bucket, parts, total, seconds, _ = rows[-1]
        assert bucket == rollups.bucket_start(evaluation.evaluated_at, resolution)
        assert {p: lag for p, (lag, _) in parts.items()} == {0: 15, 1: 0}
        assert parts[1][1] == 0  # caught up: 0.0 s
        assert total == evaluation.total_lag == 15
        assert seconds == evaluation.lag_seconds


def test_a_spike_between_two_cycles_is_kept_while_the_page_shows_the_recovery(stack, unique_name):
    s = hbase_store_setup(stack, unique_name, partitions=1, records=10)
    save(s, "etl", int(time.time() * 1000), {0: 10})
    collect_once()  # caught up
    produce(stack.kafka_bootstrap, s.topic, 1, 500)  # a burst: 500 behind at the next cycle
    collect_once()
    save(s, "etl", int(time.time() * 1000), {0: 510})  # the job catches up
    collect_once()
    pipeline = Pipeline.objects.get(store=s.store)
    assert PipelineEvaluation.objects.get(pipeline=pipeline).total_lag == 0  # the page: recovered
    for resolution in (ChartRollup.MINUTE, ChartRollup.HOUR):
        rows = _rows(pipeline, resolution)
        assert max(parts[0][0] for _, parts, *_ in rows) == 500  # the roll-ups: the peak
        assert max(r[2] for r in rows) == 500


# --- a chart over a long range reads the roll-ups: the samples' numbers at those points -----------


def _history(pipeline, base, *, spike_after: int):
    """Cycles every minute for 3 hours through watermarks_record (the cluster poll's service), and
    one more cycle 20 s into minute `spike_after` whose partition 0 is 60,100 behind. Returns the
    evaluation after each cycle (what the page showed then)."""
    seen = []
    extra = 0
    cycles = [(base + timedelta(minutes=i), False) for i in range(180)]
    cycles.insert(spike_after + 1, (base + timedelta(minutes=spike_after, seconds=20), True))
    for n, (at, spike) in enumerate(cycles):
        if spike:
            extra = 60_000
        i = n  # offsets keep rising with each cycle
        highs = {0: 10_000 + 1000 * i + extra, 1: 10_000 + 500 * i}
        committed = {0: highs[0] - (60_100 if spike else 100), 1: max(0, highs[1] - 20 - i % 7)}
        result = WatermarkResult(by_topic={pipeline.topic: {p: Watermarks(p, 0, h) for p, h in highs.items()}})
        watermarks_record(cluster=pipeline.store.cluster, result=result, sampled_at=at,
                          committed={pipeline.pk: Committed(int(at.timestamp() * 1000), committed)})
        e = PipelineEvaluation.objects.get(pipeline=pipeline)
        seen.append((at, {r["partition"]: r["lag_seconds"] for r in e.partitions}))
    return seen


def _bucket_max(table, resolution_s):
    """{bucket start: [largest per column]} of a full-resolution table."""
    out = {}
    for t, values in table.rows():
        key = int(t) - int(t) % resolution_s
        was = out.get(key)
        out[key] = values if was is None else [max(a, b) if None not in (a, b) else (a if b is None else b)
                                               for a, b in zip(was, values)]
    return out


def test_long_range_charts_read_the_rollups_and_equal_the_samples_at_those_points():
    p = pipeline_row("long")
    now = dj_timezone.now()
    base = now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=4)
    seen = _history(p, base, spike_after=90)
    since, until = base - timedelta(minutes=30), base + timedelta(hours=3, minutes=30)
    for unit in ("messages", "seconds"):
        assert chart_resolution(unit=unit, since=since, until=until, now=now) == MINUTE
        assert chart_resolution(unit=unit, since=now - timedelta(days=7), until=now, now=now) == HOUR
        assert chart_resolution(unit=unit, since=now - timedelta(minutes=15), until=now, now=now) == SAMPLES
        # A day that starts before the minutes' retention: hours.
        assert chart_resolution(unit=unit, since=now - timedelta(days=9), until=now - timedelta(days=8),
                                now=now) == HOUR
    assert chart_resolution(unit="messages", since=now - timedelta(hours=1), until=now, now=now) == SAMPLES
    assert chart_resolution(unit="seconds", since=now - timedelta(hours=1), until=now, now=now) == MINUTE

    for kind in ("partitions", "total"):
        raw = pipeline_chart_table(pipeline=p, kind=kind, unit="messages", since=since, until=until, resolution=SAMPLES)
        assert len(raw.times) == 181  # every sample, the spike's included
        for resolution, resolution_s in ((MINUTE, 60), (HOUR, 3600)):
            table = pipeline_chart_table(pipeline=p, kind=kind, unit="messages", since=since, until=until,
                                         resolution=resolution)
            want = _bucket_max(raw, resolution_s)
            rows = [(int(t), list(r)) for t, r in table.rows()]
            if rows[-1][0] not in want:
                # After the buckets, the newest evaluation: the page's numbers, the last sample's.
                assert rows.pop() == (int(raw.times[-1]), list(list(raw.rows())[-1][1]))
            # One point per bucket, at its start (not at the samples' times): read from the roll-ups.
            assert rows == [(k, want[k]) for k in sorted(want)]
    # The spike 20 s into a minute is in that minute and in its hour.
    minute = pipeline_chart_table(pipeline=p, kind="partitions", unit="messages", since=since, until=until,
                                  resolution=MINUTE)
    hour = pipeline_chart_table(pipeline=p, kind="partitions", unit="messages", since=since, until=until,
                                resolution=HOUR)
    spike_minute = (base + timedelta(minutes=90)).timestamp()
    assert minute.values(0)[list(minute.times).index(spike_minute)] == 60_100
    assert max(minute.values(0)) == max(hour.values(0)) == 60_100
    assert hour.values(0)[list(hour.times).index((base + timedelta(hours=1)).timestamp())] == 60_100

    # In seconds: the evaluation's numbers (the page's), the largest in each minute.
    seconds = pipeline_chart_table(pipeline=p, kind="partitions", unit="seconds", since=since, until=until,
                                   resolution=MINUTE)
    want: dict[int, list] = {}
    for at, by_partition in seen:
        key = int(at.timestamp()) // 60 * 60
        row = [None if by_partition[q] is None else round(by_partition[q], 1) for q in (0, 1)]
        want[key] = row if key not in want else [
            max(a, b) if None not in (a, b) else (a if b is None else b) for a, b in zip(want[key], row)]
    assert [list(r) for _, r in seconds.rows()] == [want[k] for k in sorted(want)]


def test_the_newest_point_of_a_rollup_chart_is_the_pages_number():
    p = pipeline_row("newest")
    at = dj_timezone.now().replace(second=30, microsecond=0) - timedelta(minutes=5)
    for k, lag in enumerate((700, 40)):  # within one minute: the peak, then the recovery
        when = at + timedelta(seconds=10 * k)
        result = WatermarkResult(by_topic={p.topic: {0: Watermarks(0, 0, 1000 + k)}})
        watermarks_record(cluster=p.store.cluster, result=result, sampled_at=when,
                          committed={p.pk: Committed(int(when.timestamp() * 1000), {0: 1000 + k - lag})})
    table = pipeline_chart_table(pipeline=p, kind="total", unit="messages", since=at - timedelta(hours=5),
                                 until=dj_timezone.now())
    assert table.values(0) == [700, 40]  # the minute's peak at its start, then the evaluation
    assert table.times[-1] == (at + timedelta(seconds=10)).timestamp()


def test_a_partition_added_later_is_unknown_before_it_existed():
    p = pipeline_row("grown")
    now = dj_timezone.now()
    b0, b1 = (rollups.bucket_start(now - timedelta(hours=h), ChartRollup.MINUTE) for h in (3, 2))
    rollups.rollups_merge({
        (p.pk, ChartRollup.MINUTE, b0): rollups.Point([0, 1], array("q", [4, 5]), array("i", [10, 20]), 9, 2.0),
        (p.pk, ChartRollup.MINUTE, b1): rollups.Point([0, 1, 2], array("q", [6, 7, 8]), array("i", [30, 40, 50]), 21, 5.0),
    })
    PipelineEvaluation.objects.create(pipeline=p, evaluated_at=now - timedelta(hours=1), status=0, total_lag=1,
                                      partitions=[{"partition": 1, "lag": 1, "lag_seconds": None}])
    messages = pipeline_chart_table(pipeline=p, kind="partitions", unit="messages", since=now - timedelta(hours=5),
                                    until=now)
    assert messages.partitions == [0, 1, 2]
    assert [messages.values(i) for i in range(3)] == [[4, 6, None], [5, 7, 1], [None, 8, None]]
    seconds = pipeline_chart_table(pipeline=p, kind="partitions", unit="seconds", since=now - timedelta(hours=5),
                                   until=now)
    assert [seconds.values(i) for i in range(3)] == [[1.0, 3.0, None], [2.0, 4.0, None], [None, 5.0, None]]


# --- backfill of history stored before roll-ups existed -------------------------------------------


def test_backfill_computes_rollups_from_stored_samples_and_keeps_live_buckets():
    p = pipeline_row("backfill")
    now = dj_timezone.now()
    start = now.replace(minute=0, second=0, microsecond=0) - timedelta(days=2)
    samples_bulk(p, start=start, step_s=60, count=36 * 60,
                 highs=lambda i: [100 * i + (9_000 if i == 700 else 0), 50 * i],
                 committed=lambda i: [max(0, 100 * i - 300), 50 * i])
    live_bucket = rollups.bucket_start(start + timedelta(hours=30), ChartRollup.HOUR)
    rollups.rollups_merge({(p.pk, ChartRollup.HOUR, live_bucket): rollups.Point(
        [0, 1], array("q", [1, 2]), array("i", [3, 4]), 3, 0.4)})
    assert not ChartRollup.objects.filter(pipeline=p, resolution_s=ChartRollup.MINUTE).exists()
    call_command("rollups_backfill", "--pipeline", str(p.pk), stdout=io.StringIO())

    since, until = start, start + timedelta(hours=36)
    raw = pipeline_chart_table(pipeline=p, kind="partitions", unit="messages", since=since, until=until,
                               resolution=SAMPLES)
    hour = pipeline_chart_table(pipeline=p, kind="partitions", unit="messages", since=since, until=until,
                                resolution=HOUR)
    want = _bucket_max(raw, 3600)
    want[int(live_bucket.timestamp())] = [1, 2]  # written live: the page's numbers win
    assert [list(r) for _, r in hour.rows()] == [want[k] for k in sorted(want)]
    assert max(hour.values(0)) == 9_300  # the one-minute spike is in its hour
    assert ChartRollup.objects.filter(pipeline=p, resolution_s=ChartRollup.MINUTE).count() == 36 * 60
    again = io.StringIO()
    call_command("rollups_backfill", "--pipeline", str(p.pk), stdout=again)  # idempotent
    assert "0 roll-ups written" in again.getvalue().splitlines()[-1]


def test_a_range_without_rollups_is_read_from_the_samples():
    p = pipeline_row("before")
    start = dj_timezone.now() - timedelta(hours=10)
    samples_bulk(p, start=start, step_s=600, count=50, highs=lambda i: [10 * i], committed=lambda i: [0])
    table = pipeline_chart_table(pipeline=p, kind="total", unit="messages", since=start, until=dj_timezone.now())
    assert len(table.times) == 50 and table.values(0)[-1] == 490


# --- exports keep full resolution ------------------------------------------------------------------


def test_chart_csv_export_keeps_every_sample_where_the_chart_reads_rollups(vera_client):
    p = pipeline_row("export")
    minute = dj_timezone.now().replace(second=0, microsecond=0) - timedelta(hours=2)
    for k in range(6):  # six cycles 10 s apart in one minute
        at = minute + timedelta(seconds=10 * k)
        result = WatermarkResult(by_topic={p.topic: {0: Watermarks(0, 0, 100 * k)}})
        watermarks_record(cluster=p.store.cluster, result=result, sampled_at=at,
                          committed={p.pk: Committed(int(at.timestamp() * 1000), {0: 0})})
    response = vera_client.get(reverse("pipeline_chart_csv", args=[p.pk]) + "?range=24h&kind=total")
    body = b"".join(response.streaming_content).decode()
    data = [r for r in csv.reader(io.StringIO(body)) if r and r[-1].isdigit()]
    assert [int(r[-1]) for r in data] == [0, 100, 200, 300, 400, 500]
    figure = vera_client.get(reverse("pipeline_lag_chart", args=[p.pk]) + "?range=24h&kind=total").json()
    # The chart: the minute's peak at its start, then the newest evaluation (the page's number).
    assert list(figure["data"][0]["y"]) == [500, 500]


# --- pruning ---------------------------------------------------------------------------------------


def test_pruning_drops_minutes_after_a_week_and_hours_after_thirty_days():
    p = pipeline_row("prune")
    now = datetime(2026, 11, 20, 12, tzinfo=timezone.utc)
    point = rollups.Point([0], array("q", [5]), array("i", [1]), 5, 0.1)
    ages = (timedelta(hours=1), timedelta(days=6), timedelta(days=8), timedelta(days=29), timedelta(days=31))
    rollups.rollups_merge({(p.pk, res, rollups.bucket_start(now - age, res)): point
                           for age in ages for res in (ChartRollup.MINUTE, ChartRollup.HOUR)})
    counts = history_prune(now=now)
    assert counts["ChartRollup minute expired"] == 3 and counts["ChartRollup hour expired"] == 1
    left = {(r.resolution_s, now - r.bucket) for r in ChartRollup.objects.filter(pipeline=p)}
    minute_ages = sorted(age for res, age in left if res == ChartRollup.MINUTE)
    hour_ages = sorted(age for res, age in left if res == ChartRollup.HOUR)
    assert minute_ages == [timedelta(hours=1), timedelta(days=6)]
    assert hour_ages == [timedelta(hours=1), timedelta(days=6), timedelta(days=8), timedelta(days=29)]


# --- hostile ranges on a chart that has roll-ups ---------------------------------------------------


def test_hostile_ranges_on_a_chart_with_rollups_are_answered_never_a_500(vera_client):
    p = pipeline_row("hostile")
    at = dj_timezone.now() - timedelta(hours=2)
    result = WatermarkResult(by_topic={p.topic: {0: Watermarks(0, 0, 10)}})
    watermarks_record(cluster=p.store.cluster, result=result, sampled_at=at,
                      committed={p.pk: Committed(int(at.timestamp() * 1000), {0: 1})})
    url = reverse("pipeline_lag_chart", args=[p.pk])
    for query, want in (
        ("from=0001-01-01T00:00:30&to=0001-01-20T00:00&kind=partitions&unit=seconds", 200),
        ("from=9999-12-20T00:00&to=9999-12-31T23:59:59&kind=partitions", 200),
        ("from=0001-01-01T00:00&to=9999-12-31T23:59&kind=partitions", 400),  # longer than a chart spans
        ("range=30d&kind=partitions&unit=seconds", 200),
        ("range=30d&kind=nope", 400),
        ("from=2026-13-01T00:00", 400),
    ):
        response = vera_client.get(f"{url}?{query}")
        assert response.status_code == want, (query, response.status_code, response.content[:200])


# --- the migration keeps what was stored before it -------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_the_migration_keeps_existing_samples_and_evaluations():
    executor = MigrationExecutor(connection)
    leaves = executor.loader.graph.leaf_nodes()
    executor.migrate([("dashboard", "0020_channel_delivery_state")])
    try:
        old = executor.loader.project_state([("dashboard", "0020_channel_delivery_state")]).apps
        cluster = old.get_model("dashboard", "Cluster").objects.create(name="old", bootstrap_servers="127.0.0.1:9")
        store = old.get_model("dashboard", "Store").objects.create(name="old", kind="hbase", url="hbase://127.0.0.1:9/t",
                                                                   cluster=cluster)
        pipeline = old.get_model("dashboard", "Pipeline").objects.create(store=store, topic="orders", group="etl")
        at = datetime(2026, 11, 1, tzinfo=timezone.utc)
        old.get_model("dashboard", "LagSample").objects.create(pipeline=pipeline, sampled_at=at, total_lag=42,
                                                                partitions=b"", committed=b"\x07" + b"\x00" * 7)
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(leaves)
    sample = LagSample.objects.get(pipeline_id=pipeline.pk)
    assert (sample.sampled_at, sample.total_lag, sample.committed_offsets()) == (at, 42, {0: 7})
    assert Pipeline.objects.get(pk=pipeline.pk).topic == "orders"
    assert not ChartRollup.objects.exists()  # new history starts empty: the backfill fills it
    e = PipelineEvaluation(pipeline_id=pipeline.pk, evaluated_at=at, status=0,
                           partitions=[{"partition": 0, "lag": 3, "lag_seconds": 1.5}], total_lag=3, lag_seconds=1.5)
    assert rollups.rollups_record([e], at) == 1  # its minute (its hour: when the next minute opens)
    (_, parts, total, *_), = _rows(Pipeline.objects.get(pk=pipeline.pk), ChartRollup.HOUR)
    assert parts == {0: (3, 15)} and total == 3 and MISSING < 0


# --- an hour gets each minute once, when the pipeline's next minute opens --------------------------


def _cycle(p, at, lag):
    result = WatermarkResult(by_topic={p.topic: {0: Watermarks(0, 0, 1_000)}})
    watermarks_record(cluster=p.store.cluster, result=result, sampled_at=at,
                      committed={p.pk: Committed(int(at.timestamp() * 1000), {0: 1_000 - lag})})


def lag_of(rows):
    return [(bucket, parts[0][0], samples) for bucket, parts, _, _, samples in rows]


def test_a_minute_is_folded_into_its_hour_when_the_next_minute_opens_and_hours_are_read_exact():
    p = pipeline_row("fold")
    hour = dj_timezone.now().replace(minute=0, second=0, microsecond=0) - timedelta(hours=5)
    _cycle(p, hour + timedelta(minutes=10, seconds=5), 10)
    _cycle(p, hour + timedelta(minutes=10, seconds=35), 50)
    assert _stored(p, ChartRollup.HOUR) == []  # the open minute is not in the stored hour yet...
    assert lag_of(_rows(p, ChartRollup.HOUR)) == [(hour, 50, 2)]  # ...but the hours read include it
    _cycle(p, hour + timedelta(minutes=11, seconds=5), 5)  # the next minute opens: 10:xx folded
    assert lag_of(_stored(p, ChartRollup.HOUR)) == [(hour, 50, 2)]
    assert lag_of(_rows(p, ChartRollup.HOUR)) == [(hour, 50, 3)]
    _cycle(p, hour + timedelta(minutes=14), 70)  # after a gap: the newest minute before it is folded
    assert lag_of(_stored(p, ChartRollup.HOUR)) == [(hour, 50, 3)]
    assert lag_of(_rows(p, ChartRollup.HOUR)) == [(hour, 70, 4)]
    _cycle(p, hour + timedelta(hours=1, minutes=2), 20)  # the next hour: minute 14 goes to its own hour
    assert lag_of(_stored(p, ChartRollup.HOUR)) == [(hour, 70, 4)]
    assert lag_of(_rows(p, ChartRollup.HOUR)) == [(hour, 70, 4), (hour + timedelta(hours=1), 20, 1)]
    # Every minute is in exactly one place: the stored minutes are the cycles, one each.
    assert [samples for *_, samples in _stored(p, ChartRollup.MINUTE)] == [2, 1, 1, 1]
    # A range ending before the newest minute's hour does not get it.
    points = rollups.rollup_points(pipeline_id=p.pk, resolution_s=ChartRollup.HOUR, per_partition=False,
                                   since=hour - timedelta(hours=1), until=hour + timedelta(minutes=30))
    assert [(bucket, point.total_lag) for bucket, point in points] == [(hour, 70)]


def test_the_prune_keeps_a_silent_pipeline_s_newest_minute_until_it_is_in_its_hour():
    p = pipeline_row("silent")
    now = dj_timezone.now()
    old = (now - timedelta(days=8)).replace(minute=10, second=0, microsecond=0)  # two minutes of one hour
    _cycle(p, old, 40)
    _cycle(p, old + timedelta(minutes=1), 30)  # folds the first minute
    assert history_prune(now=now)["ChartRollup minute expired"] == 1  # the first: it is in its hour
    assert [lag for _, parts, *_ in _stored(p, ChartRollup.MINUTE) for lag, _ in parts.values()] == [30]
    assert [parts[0][0] for _, parts, *_ in _rows(p, ChartRollup.HOUR)] == [40]
    _cycle(p, now, 5)  # the pipeline is back: its old minute goes to its hour, then may go
    assert history_prune(now=now)["ChartRollup minute expired"] == 1
    old_hour = old.replace(minute=0)
    assert [(parts[0][0], samples) for bucket, parts, *_, samples in _stored(p, ChartRollup.HOUR)
            if bucket == old_hour] == [(40, 2)]  # both old minutes are in it
