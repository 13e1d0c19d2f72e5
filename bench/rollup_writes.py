"""Write cost of the charts' roll-ups per collection cycle (dashboard.charts.rollups.rollups_record,
called in the cluster poll's transaction): milliseconds and queries per cycle at 10,000 and
100,000 partitions, and the bytes a roll-up row costs per partition.

Builds, in its own PostgreSQL database, N pipelines of 20 partitions and their evaluations (in
memory, as pipelines_evaluate hands them over), then runs C cycles 10 s apart (so the open
minute is inserted, then updated, then a new one inserted), each in its own transaction as the
poll's, timing rollups_record alone (wall time, and this process's CPU time: the host is shared).

Run: .venv/bin/python bench/rollup_writes.py [--partitions 10000 100000] [--cycles 12]
(needs PostgreSQL on 127.0.0.1:5432)
"""
from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from benchdb import drop_database, fresh_django_database  # noqa: E402

DB = "offsetwatch_bench_rollups_writes"
PER_PIPELINE = 20


def evaluations_of(pipelines, rng: random.Random, now: datetime):
    from dashboard.models import PipelineEvaluation

    out = []
    for p in pipelines:
        rows = [{"partition": q, "lag": rng.randint(0, 50_000), "lag_seconds": rng.random() * 600}
                for q in range(PER_PIPELINE)]
        rows[rng.randrange(PER_PIPELINE)]["lag_seconds"] = None  # an unknown here and there
        out.append(PipelineEvaluation(pipeline=p, evaluated_at=now, status=0, partitions=rows,
                                      total_lag=sum(r["lag"] for r in rows),
                                      lag_seconds=max(r["lag_seconds"] or 0 for r in rows)))
    return out


def run(partitions: int, cycles: int) -> None:
    from django.db import connection, transaction
    from django.test.utils import CaptureQueriesContext

    from dashboard.charts.rollups import rollups_record
    from dashboard.models import ChartRollup, Pipeline, Store
    from dashboard.monitoring.services import cluster_get_or_create

    rng = random.Random(7)
    cluster = cluster_get_or_create(name=f"c{partitions}", bootstrap_servers="kafka:9092")
    store = Store.objects.create(name=f"s{partitions}", kind="hbase", url=f"hbase://h:9090/t{partitions}", cluster=cluster)
    pipelines = Pipeline.objects.bulk_create([Pipeline(store=store, topic=f"t-{i}", group="g")
                                              for i in range(partitions // PER_PIPELINE)])
    start = datetime(2026, 11, 20, 12, 0, 5, tzinfo=timezone.utc)
    times, cpu, queries = [], [], set()
    for c in range(cycles):
        now = start + timedelta(seconds=10 * c)
        evaluations = evaluations_of(pipelines, rng, now)  # made by the evaluation, not timed here
        with transaction.atomic(), CaptureQueriesContext(connection) as ctx:
            t, c0 = time.perf_counter(), time.process_time()
            rollups_record(evaluations, now)
            times.append((time.perf_counter() - t) * 1000)
            cpu.append((time.process_time() - c0) * 1000)
        queries.add(len(ctx.captured_queries))
    with connection.cursor() as cur:
        cur.execute("SELECT count(*), sum(length(lags)), pg_total_relation_size('dashboard_chartrollup') "
                    "FROM dashboard_chartrollup")
        rows, packed, table = cur.fetchone()
    assert ChartRollup.objects.count() == rows
    cells = rows * PER_PIPELINE
    print(f"{partitions:>8,} partitions ({len(pipelines):,} pipelines): per cycle p50 {statistics.median(times):.0f} ms, "
          f"max {max(times):.0f} ms (this process's CPU p50 {statistics.median(cpu):.0f} ms), queries {sorted(queries)} "
          f"and the COPY; packed {packed / cells:.1f} B per partition-bucket, "
          f"table with indexes {table / cells:.1f} B per partition-bucket ({rows:,} rows)")
    ChartRollup.objects.all().delete()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--partitions", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--cycles", type=int, default=12)
    args = parser.parse_args()
    fresh_django_database(DB)
    try:
        for n in args.partitions:
            run(n, args.cycles)
    finally:
        drop_database(DB)


if __name__ == "__main__":
    main()
