"""The cost of a store poll when the store holds many malformed rows (issue #11, observation 8).

An HBase stand-in table with --bad malformed row keys (not <topic>:<group>:<ms>) and --pipelines
healthy pipelines of one row each; one poll_store with discovery (the store listed, every bad
row recorded as a problem), then --polls polls between discoveries (the known pipelines only,
one new row each). Prints the time and the queries of each kind of poll.

Run: .venv/bin/python bench/bad_rows.py [--bad 23000] (needs PostgreSQL on 127.0.0.1:5432)
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from benchdb import fresh_django_database  # noqa: E402

DB = "offsetwatch_bench_bad_rows"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bad", type=int, default=23_000)
    parser.add_argument("--pipelines", type=int, default=10)
    parser.add_argument("--polls", type=int, default=5)
    args = parser.parse_args()
    fresh_django_database(DB)
    from devstack.components import LOOPBACK, Stack, StackPorts, free_port

    stack = Stack(Path(tempfile.mkdtemp(prefix="bench-bad-rows-")),
                  StackPorts(kafka=0, hbase=free_port(), zookeeper=0, redis=0), with_redis=False)
    stack.log_dir.mkdir(parents=True)
    stack.pid_dir.mkdir(parents=True)
    hbase = next(c for c in stack.components() if c.name == "hbase")
    stack.start_component(hbase, progress=lambda line: None)
    try:
        run(args, f"hbase://{LOOPBACK}:{stack.ports.hbase}/offsets")
    finally:
        stack.stop_component("hbase")


def run(args, url: str) -> None:
    import happybase
    from django.conf import settings
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from collectors.cycle import poll_store
    from dashboard.models import StoreProblem
    from dashboard.monitoring.services import cluster_get_or_create, store_get_or_create
    from streamoffsets.stores.hbase import HBaseOffsetStore
    from streamoffsets.types import BatchOffsets

    store_lib = HBaseOffsetStore.from_url(url)
    store_lib.ensure_table()
    table = happybase.Connection(store_lib.host, store_lib.port).table(store_lib.table_name)
    with table.batch(batch_size=1000) as batch:
        for i in range(args.bad):
            batch.put(f"junk-{i:06d}".encode(), {b"offsets:0": b"1"})
    now = int(time.time() * 1000)
    for p in range(args.pipelines):
        store_lib.save_batch(BatchOffsets(f"topic-{p:03d}", "etl", now - 60_000, {0: 1}))
    cluster = cluster_get_or_create(name="bench", bootstrap_servers="127.0.0.1:1")
    store = store_get_or_create(name="bench", kind="hbase", url=url, cluster=cluster)

    with CaptureQueriesContext(connection) as queries:
        t0 = time.perf_counter()
        poll_store(store.pk)
        first = time.perf_counter() - t0
    print(f"{args.bad} malformed rows, {args.pipelines} pipelines (HBase stand-in, PostgreSQL)")
    print(f"poll with discovery: {first * 1000:.0f} ms, {len(queries)} queries, "
          f"{StoreProblem.objects.filter(store=store).count()} problems recorded")
    times, counts = [], []
    for i in range(args.polls):
        for p in range(args.pipelines):
            store_lib.save_batch(BatchOffsets(f"topic-{p:03d}", "etl", now - 50_000 + i * 1000, {0: 2 + i}))
        with CaptureQueriesContext(connection) as queries:
            t0 = time.perf_counter()
            poll_store(store.pk)
            times.append(time.perf_counter() - t0)
        counts.append(len(queries))
    print(f"polls between discoveries (every {settings.STORE_DISCOVERY_INTERVAL_S:.0f} s): "
          f"median {statistics.median(times) * 1000:.0f} ms, max {max(times) * 1000:.0f} ms, "
          f"{max(counts)} queries")


if __name__ == "__main__":
    main()
