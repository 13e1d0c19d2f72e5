"""Bytes per stored offset value in PostgreSQL, and the dashboard's page queries on that history.

Simulates 10 s samples for 10,000 partitions (500 pipelines x 20 partitions, one topic each) for
--minutes of history through the same models the collectors write (packed int64 arrays, one row
per topic and per pipeline per cycle), then reads the table sizes (heap + indexes + TOAST).
Each cycle stores 3 values per partition (low, high, committed). Rows are independent, so the
bytes per value extrapolate linearly to 24 h (8,640 cycles).

Run: .venv/bin/python bench/storage.py [--minutes 60] (needs PostgreSQL on 127.0.0.1:5432)
"""
from __future__ import annotations

import argparse
import random
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from benchdb import fresh_django_database  # noqa: E402

DB = "offsetwatch_bench_storage"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=int, default=60)
    parser.add_argument("--pipelines", type=int, default=500)
    parser.add_argument("--partitions", type=int, default=20)
    args = parser.parse_args()
    fresh_django_database(DB)
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from dashboard.models import LagSample, Pipeline, Store, WatermarkSample
    from dashboard.monitoring.overview import overview_rows
    from dashboard.monitoring.selectors import pipeline_lag_series
    from dashboard.monitoring.services import cluster_get_or_create
    from offsetwatch.lib.packing import pack, pack_partitions

    cluster = cluster_get_or_create(name="bench", bootstrap_servers="b:9092")
    store = Store.objects.create(name="bench", kind="hbase", url="hbase://h:9090/t", cluster=cluster)
    pipelines = Pipeline.objects.bulk_create(
        [Pipeline(store=store, topic=f"topic-{i:04d}", group="etl") for i in range(args.pipelines)]
    )
    rng = random.Random(1)
    parts = list(range(args.partitions))
    ids = pack_partitions(parts)
    highs = {p.pk: [rng.randint(10**6, 10**9) for _ in parts] for p in pipelines}
    cycles = args.minutes * 6
    start = datetime.now(timezone.utc) - timedelta(minutes=args.minutes)
    t0 = time.perf_counter()
    for c in range(cycles):
        at = start + timedelta(seconds=10 * c)
        wm, lag = [], []
        for p in pipelines:
            h = highs[p.pk] = [x + rng.randint(0, 200) for x in highs[p.pk]]
            committed = [x - rng.randint(0, 300) for x in h]
            wm.append(WatermarkSample(cluster=cluster, topic=p.topic, sampled_at=at, partitions=ids,
                                      lows=pack([x // 2 for x in h]), highs=pack(h)))
            lag.append(LagSample(pipeline=p, sampled_at=at, total_lag=sum(h) - sum(committed), partitions=ids,
                                 committed=pack(committed), last_batch_ms=int(at.timestamp() * 1000)))
        WatermarkSample.objects.bulk_create(wm, batch_size=1000)
        LagSample.objects.bulk_create(lag, batch_size=1000)
    write_s = time.perf_counter() - t0
    with connection.cursor() as cur:
        cur.execute("VACUUM ANALYZE dashboard_watermarksample")
        cur.execute("VACUUM ANALYZE dashboard_lagsample")
        cur.execute("SELECT pg_total_relation_size('dashboard_watermarksample') + pg_total_relation_size('dashboard_lagsample')")
        total_bytes = cur.fetchone()[0]
    values = cycles * args.pipelines * args.partitions * 3
    rows = cycles * args.pipelines * 2
    print(f"{args.pipelines} pipelines x {args.partitions} partitions = {args.pipelines * args.partitions:,} partitions, "
          f"{cycles} cycles of 10 s ({args.minutes} min)")
    print(f"rows written: {rows:,} in {write_s:.1f} s ({rows / write_s:,.0f} rows/s through the ORM)")
    print(f"stored: {total_bytes / 1e6:.1f} MB for {values:,} offset values -> {total_bytes / values:.1f} bytes per value "
          f"(heap + indexes + TOAST)")
    per_day = total_bytes / cycles * 8640
    print(f"extrapolated: 24 h at full resolution = {per_day / 1e9:.2f} GB; with the retention policy "
          f"(1 day raw, 6 more days per minute, 23 more days per hour) = "
          f"{(per_day + per_day / 6 * 6 + per_day / 360 * 23) / 1e9:.2f} GB")
    pipeline = pipelines[0]
    now = datetime.now(timezone.utc)
    for label, fn in [
        ("lag series, 1 h", lambda: pipeline_lag_series(pipeline=pipeline, since=now - timedelta(hours=1))),
        ("overview (500 pipelines)", lambda: overview_rows()),
        ("evaluation window + 1 h of watermarks", lambda: list(WatermarkSample.objects.filter(
            cluster=cluster, topic=pipeline.topic, sampled_at__gte=now - timedelta(hours=1)))),
    ]:
        with CaptureQueriesContext(connection) as q:
            t = time.perf_counter()
            result = fn()
            elapsed = (time.perf_counter() - t) * 1000
        print(f"query {label}: {elapsed:.1f} ms, {len(q)} queries, {len(result)} rows")
    connection.close()
    subprocess.run(["psql", "-q", "-h", "127.0.0.1", "-U", "postgres", "-c", f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)"], check=True)


if __name__ == "__main__":
    main()
