"""Server time of the dashboard's pages on a platform-sized history, and the chart payload.

Builds, in its own PostgreSQL database: one pipeline with 64 partitions and 30 days of history at
one batch per minute (43,200 batches, ~2.8 million offset values), its lag and watermark samples
shaped as the retention policy keeps them (10 s for a day, per minute for a week, per hour to 30
days), the charts' roll-ups of that history (by the upgrade's backfill), and 1,000 more pipelines
with evaluations for the overview. Then times each page in
process (Django's test client: middleware, views, queries, templates; no network), N requests
each, and an empty Django view in the same run as the floor.

With --big-partitions N (issue #16: 1,000), one more pipeline with N partitions: a batch a minute
for --big-days (1), its samples shaped as above, an evaluation whose N partition rows hold a few
stalled, at-risk and out-of-range partitions, ten start reports of N offsets; its page, live
partial and on-demand views (show more, all, only not OK, one partition, older batches) are timed
after the others (build_big, time_big).

Run: .venv/bin/python bench/pages.py [--requests 40] [--big-partitions 1000] [--database NAME]
(needs PostgreSQL on 127.0.0.1:5432)
"""
from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from benchdb import fresh_django_database  # noqa: E402

DB = "offsetwatch_bench_pages"

# An empty view beside the real ones: the floor of what any request costs here.
urlpatterns: list = []


def empty_view(request):
    from django.http import HttpResponse

    return HttpResponse(b"")


def build(partitions: int, days: int, overview_pipelines: int) -> int:
    from dashboard.models import Batch, LagSample, Pipeline, PipelineEvaluation, Store, WatermarkSample
    from dashboard.monitoring.services import cluster_get_or_create
    from offsetwatch.lib import sparkline
    from offsetwatch.lib.packing import pack, pack_partitions
    from offsetwatch.lib.pgcopy import copy_insert

    rng = random.Random(3)
    now = datetime.now(timezone.utc).replace(microsecond=0)
    cluster = cluster_get_or_create(name="prod", bootstrap_servers="kafka:9092")
    store = Store.objects.create(name="hbase-prod", kind="hbase", url="hbase://h:9090/t", cluster=cluster)
    big = Pipeline.objects.create(store=store, topic="payments", group="ledger-writer")
    parts = list(range(partitions))
    ids = pack_partitions(parts)

    t0 = time.perf_counter()
    offsets = [rng.randint(10**8, 10**9) for _ in parts]
    batches = []
    minutes = days * 24 * 60
    for i in range(minutes):
        offsets = [o + rng.randint(500, 1500) for o in offsets]
        at = now - timedelta(minutes=minutes - i)
        batches.append(Batch(pipeline=big, batch_time_ms=int(at.timestamp() * 1000),
                             offsets={str(p): o for p, o in zip(parts, offsets)}, records=partitions * 1000))
    copy_insert(Batch, batches)
    big.last_batch_ms = batches[-1].batch_time_ms
    big.recent_batch_ms = [b.batch_time_ms for b in batches[-Pipeline.RECENT_BATCHES:]]
    big.save()

    # Sample times as prune leaves them: hourly beyond a week, per minute within it, 10 s for a day.
    times = [now - timedelta(hours=h) for h in range(days * 24, 7 * 24, -1)]
    times += [now - timedelta(minutes=m) for m in range(7 * 24 * 60, 24 * 60, -1)]
    times += [now - timedelta(seconds=s) for s in range(24 * 3600, 0, -10)]
    committed = [rng.randint(10**8, 10**9) for _ in parts]
    lag_rows, wm_rows = [], []
    for at in times:
        highs = [c + rng.randint(0, 5000) + (200_000 if rng.random() < 0.001 else 0) for c in committed]
        lag_rows.append(LagSample(pipeline=big, sampled_at=at, total_lag=sum(h - c for h, c in zip(highs, committed)),
                                  partitions=ids, committed=pack(committed), last_batch_ms=big.last_batch_ms))
        wm_rows.append(WatermarkSample(cluster=cluster, topic="payments", sampled_at=at, partitions=ids,
                                       lows=pack([0] * partitions), highs=pack(highs)))
        committed = [c + rng.randint(0, 300) for c in committed]
    copy_insert(LagSample, lag_rows)
    copy_insert(WatermarkSample, wm_rows)

    others = Pipeline.objects.bulk_create([
        Pipeline(store=store, topic=f"topic-{i:04d}", group=f"job-{i % 37}", last_batch_ms=big.last_batch_ms)
        for i in range(overview_pipelines)
    ])
    spark: list = []
    for m in range(60):
        spark = sparkline.push(spark, now.timestamp() - 3600 + m * 60, rng.randint(0, 10_000))
    evaluations = []
    for p in [big] + others:
        rows = [{"partition": q, "committed": 100, "low": 0, "high": 100 + q, "lag": q, "state": "lagging",
                 "messages_lost": 0, "lag_seconds": float(q), "lag_method": "interpolated", "retention_margin": 100,
                 "retention_seconds_left": None, "lag_absent": None, "status": "OK", "status_reason": ""}
                for q in range(20)]
        status = rng.choice([0, 0, 0, 0, 1, 2, 3, 5])
        evaluations.append(PipelineEvaluation(
            pipeline=p, evaluated_at=now, status=status, reasons=["consuming normally"], partitions=rows,
            total_lag=sum(range(20)), lag_seconds=19.0, lag_seconds_method="interpolated", batch_interval_s=60.0,
            retention_seconds_left=None, sparkline=spark, sparkline_svg=sparkline.svg_points(spark),
            sparkline_max=max(v for _, v in spark), worst_partition=19, worst_partition_lag=19))
    copy_insert(PipelineEvaluation, evaluations)
    print(f"built in {time.perf_counter() - t0:.0f} s: {len(batches):,} batches x {partitions} partitions "
          f"({len(batches) * partitions:,} offset values), {len(lag_rows):,} lag and watermark samples, "
          f"{len(others) + 1:,} pipelines with evaluations")
    return big.pk


def rollups_backfill_timed() -> None:
    """The charts' minute and hour roll-ups of the built history, by the upgrade's backfill command
    (the collectors write them as they evaluate; history from before them is backfilled)."""
    from django.core.management import call_command

    from dashboard.models import ChartRollup

    t0 = time.perf_counter()
    call_command("rollups_backfill", stdout=open("/dev/null", "w"))
    print(f"{ChartRollup.objects.count():,} roll-ups backfilled in {time.perf_counter() - t0:.1f} s")


def build_big(partitions: int, days: int) -> int:
    """A pipeline of `partitions` partitions beside the others (issue #16's pipeline page): a batch
    a minute for `days`, lag and watermark samples as prune keeps them, an evaluation with its
    troubles spread across the partitions (the worst far from the first rows), start reports."""
    from dashboard.models import (
        Batch,
        Incident,
        LagSample,
        Pipeline,
        PipelineEvaluation,
        StartReport,
        Store,
        WatermarkSample,
    )
    from offsetwatch.lib.packing import pack, pack_partitions
    from offsetwatch.lib.pgcopy import copy_insert

    rng = random.Random(16)
    t0 = time.perf_counter()
    now = datetime.now(timezone.utc).replace(microsecond=0)
    store = Store.objects.get(name="hbase-prod")
    cluster = store.cluster
    big = Pipeline.objects.create(store=store, topic="clickstream", group="sessionizer")
    parts = list(range(partitions))
    offsets = [rng.randint(10**8, 10**9) for _ in parts]
    batches = []
    minutes = days * 24 * 60
    for i in range(minutes):
        offsets = [o + rng.randint(500, 1500) for o in offsets]
        at = now - timedelta(minutes=minutes - i)
        batches.append(Batch(pipeline=big, batch_time_ms=int(at.timestamp() * 1000),
                             offsets={str(p): o for p, o in zip(parts, offsets)}, records=partitions * 1000))
    copy_insert(Batch, batches)
    big.last_batch_ms = batches[-1].batch_time_ms
    big.recent_batch_ms = [b.batch_time_ms for b in batches[-Pipeline.RECENT_BATCHES:]]
    big.save()

    times = [now - timedelta(hours=h) for h in range(days * 24, 7 * 24, -1)]
    times += [now - timedelta(minutes=m) for m in range(min(days, 7) * 24 * 60, 24 * 60, -1)]
    times += [now - timedelta(seconds=s) for s in range(24 * 3600, 0, -10)]
    ids, zeros = pack_partitions(parts), pack([0] * partitions)
    committed = list(offsets)
    lag_rows, wm_rows = [], []
    for at in times:
        highs = [c + rng.randint(0, 5000) for c in committed]
        lag_rows.append(LagSample(pipeline=big, sampled_at=at, total_lag=sum(h - c for h, c in zip(highs, committed)),
                                  partitions=ids, committed=pack(committed), last_batch_ms=big.last_batch_ms))
        wm_rows.append(WatermarkSample(cluster=cluster, topic="clickstream", sampled_at=at, partitions=ids,
                                       lows=zeros, highs=pack(highs)))
        committed = [c + rng.randint(0, 300) for c in committed]
    copy_insert(LagSample, lag_rows)
    copy_insert(WatermarkSample, wm_rows)

    # Troubles far from partition 0: one out of range (ERR), a few stalled and stopped, some near
    # retention; the rest lagging a little. The page must show them first whatever their number.
    err, stalled = partitions - 63, set(rng.sample(parts, k=min(12, partitions)))
    rows = []
    for p, c in zip(parts, committed):
        lag = rng.randint(0, 5000)
        row = {"partition": p, "committed": c, "low": 0, "high": c + lag, "lag": lag, "state": "lagging" if lag else "ok",
               "messages_lost": 0, "lag_seconds": lag / 50, "lag_method": "interpolated", "retention_margin": c,
               "retention_seconds_left": None, "lag_absent": None, "status": "OK", "status_reason": ""}
        if p in stalled:
            row["status"], row["status_reason"] = rng.choice(["STALLED", "STOPPED"]), "no offset moved in 10 min"
        if p % 97 == 5:
            row["retention_seconds_left"] = rng.uniform(600, 10 * 3600)
        if p == err:
            row.update(low=c + 40, lag=None, lag_seconds=None, state="low out-of-range", messages_lost=40,
                       lag_absent="out of range", retention_margin=-40)
        rows.append(row)
    PipelineEvaluation.objects.create(
        pipeline=big, evaluated_at=now, status=5, reasons=[f"partition {err}: 40 messages were deleted"],
        partitions=rows, total_lag=sum(r["lag"] or 0 for r in rows), lag_seconds=100.0,
        lag_seconds_method="interpolated", batch_interval_s=60.0, retention_seconds_left=600.0,
        worst_partition=0, worst_partition_lag=5000)
    Incident.objects.bulk_create(
        [Incident(pipeline=big, partition=None, opened_at=now, worst_status=5, status=5, reasons=["out of range"])]
        + [Incident(pipeline=big, partition=p, opened_at=now, worst_status=2, status=2, reasons=["stalled"])
           for p in sorted(stalled)])
    StartReport.objects.bulk_create([StartReport(pipeline=big, report={
        "topic": "clickstream", "group": "sessionizer", "offsets": {str(p): o for p, o in zip(parts, offsets)},
        "decisions": ["resumed from the stored offsets"]}) for _ in range(10)])
    print(f"built the big pipeline in {time.perf_counter() - t0:.0f} s: {len(batches):,} batches x {partitions:,} "
          f"partitions, {len(lag_rows):,} lag and watermark samples, partition {err} out of range")
    return big.pk


def time_big(client, pipeline_id: int, partitions: int, n: int, reference_id: int) -> None:
    """The big pipeline's page and what it loads on demand; the other pipeline's page again
    beside them (`reference_id`), as this host's load at that moment."""
    from django.urls import reverse

    page = reverse("pipeline", args=[pipeline_id])
    live = reverse("pipeline_live", args=[pipeline_id])
    for label, url in (
        ("pipeline page of the first pipeline, again", reverse("pipeline", args=[reference_id])),
        (f"pipeline page, {partitions:,} partitions", page),
        ("  its live partial", live),
        ("  live partial, show more (100 rows)", live + "?shown=100"),
        ("  live partial, only not OK", live + "?only=problems"),
        ("  live partial, one partition", live + f"?partition={partitions // 2}"),
        ("  page, older batches (page 20)", page + "?page=20"),
        (f"  live partial, all {partitions:,} rows", live + "?shown=all"),
    ):
        times, size = timed(client, url, n)
        p95 = statistics.quantiles(times, n=20)[-1]
        print(f"{label:<52} {statistics.median(times):>8.1f} {p95:>8.1f} {size:>10,}")


def timed(client, url: str, n: int, cold: bool = False) -> tuple[list[float], int]:
    """`cold`: the server-side chart cache is emptied before each request (outside the timing),
    so the chart is computed from the database every time."""
    from dashboard.charts import cache as chart_cache

    client.get(url)  # warm: the first request pays template compilation and connection set-up
    times, size = [], 0
    for _ in range(n):
        if cold:
            chart_cache.reset()
        t = time.perf_counter()
        response = client.get(url)
        times.append((time.perf_counter() - t) * 1000)
        assert response.status_code == 200, (url, response.status_code)
        size = len(response.content)
    return times, size


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--partitions", type=int, default=64)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--overview-pipelines", type=int, default=1000)
    parser.add_argument("--db", "--database", dest="db", default=DB,
                        help="the benchmark's own PostgreSQL database (dropped and made anew)")
    parser.add_argument("--big-partitions", type=int, default=0, help="add a pipeline of this many partitions")
    parser.add_argument("--big-days", type=int, default=1, help="days of history of that pipeline")
    args = parser.parse_args()
    fresh_django_database(args.db)
    from django.test import Client
    from django.test.utils import override_settings, setup_test_environment
    from django.urls import include, path, reverse

    from dashboard.accounts.roles import VIEWER
    from tests.factories import person

    pipeline_id = build(args.partitions, args.days, args.overview_pipelines)
    big_id = build_big(args.big_partitions, args.big_days) if args.big_partitions else None
    rollups_backfill_timed()
    subprocess.run(["psql", "-q", "-h", "127.0.0.1", "-U", "postgres", "-d", args.db, "-c", "VACUUM ANALYZE"], check=True)

    urlpatterns[:] = [path("__empty__", empty_view), path("", include("offsetwatch.urls"))]
    setup_test_environment()
    with override_settings(ROOT_URLCONF=__name__, ALLOWED_HOSTS=["testserver"]):
        client = Client()
        client.force_login(person("bench", VIEWER))
        pages = [
            ("empty Django view (floor)", "/__empty__"),
            (f"overview, {args.overview_pipelines + 1:,} pipelines (page 1)", reverse("overview")),
            ("overview live partial", reverse("overview_live")),
            ("overview, the last page", reverse("overview") + "?page=1000000"),
            ("overview, filtered (ERR) and sorted by lag", reverse("overview") + "?status=ERR&sort=lag"),
            ("pipeline page", reverse("pipeline", args=[pipeline_id])),
            ("pipeline page, oldest batches (page 864)", reverse("pipeline", args=[pipeline_id]) + "?page=864"),
            ("pipeline live partial", reverse("pipeline_live", args=[pipeline_id])),
        ]
        chart = reverse("pipeline_lag_chart", args=[pipeline_id])
        pages += [(f"chart partitions in seconds, {key} (cached)", f"{chart}?range={key}&kind=partitions&unit=seconds")
                  for key in ("1h", "30d")]
        print(f"{'page':<52} {'p50 ms':>8} {'p95 ms':>8} {'bytes':>10}")
        for label, url, *cold in pages:
            times, size = timed(client, url, args.requests, cold=bool(cold and cold[0]))
            p95 = statistics.quantiles(times, n=20)[-1]
            print(f"{label:<52} {statistics.median(times):>8.1f} {p95:>8.1f} {size:>10,}")
        charts_cold(client, chart, args.requests)

        if big_id is not None:
            time_big(client, big_id, args.big_partitions, args.requests, reference_id=pipeline_id)

def charts_cold(client, chart: str, n: int) -> None:
    """Every chart cold (the Redis chart cache emptied before each request): kind x unit x range,
    p50/p95 of the request's wall time and p95 of this process's CPU time (the host is shared:
    wall time also counts the other processes' turns)."""
    from dashboard.charts import cache as chart_cache

    print(f"{'chart, cold':<52} {'p50 ms':>8} {'p95 ms':>8} {'cpu p95':>8} {'bytes':>10}")
    for kind in ("total", "partitions"):
        for unit in ("messages", "seconds"):
            for key in ("1h", "24h", "7d", "30d"):
                url = f"{chart}?range={key}&kind={kind}&unit={unit}"
                client.get(url)
                wall, cpu, size = [], [], 0
                for _ in range(n):
                    chart_cache.reset()
                    t, c = time.perf_counter(), time.process_time()
                    response = client.get(url)
                    wall.append((time.perf_counter() - t) * 1000)
                    cpu.append((time.process_time() - c) * 1000)
                    assert response.status_code == 200, (url, response.status_code)
                    size = len(response.content)
                p95 = statistics.quantiles(wall, n=20)[-1]
                print(f"{f'{kind} in {unit}, {key}':<52} {statistics.median(wall):>8.1f} {p95:>8.1f} "
                      f"{statistics.quantiles(cpu, n=20)[-1]:>8.1f} {size:>10,}")


if __name__ == "__main__":
    main()
