"""How a collection cycle's wall time falls as Celery workers are added.

The local stack's Kafka-protocol broker (Tansu) holds T topics of P partitions, each with a
consumer group that committed offsets. The dashboard gets S Kafka group-offset stores and S
clusters on it (2 x S sources; each store discovers every group, so each store poll reads T
groups' offsets and records T pipelines, and each cluster poll reads T x P watermarks and
evaluates the T x (stores on it) pipelines). Real `celery worker` processes (`--concurrency 1`
each, so a worker is the unit of scale) consume the local Redis; one cycle is what beat does
every poll interval: `collect_all` fans out one task per source, and the cycle ends when every
source's SourceHealth shows a successful poll that started after the cycle began.

For each worker count (1, 2, 3 by default): one warm-up cycle (first polls discover pipelines;
worker processes connect), then --cycles measured cycles; prints each cycle's wall time and the
median, and the speed-up against one worker.

Run: .venv/bin/python bench/scale_workers.py [--sources 20 --topics 20 --partitions 50 --cycles 3 --workers 1,2,3]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from benchdb import celery_workers_start, celery_workers_stop, start_lone_kafka  # noqa: E402

DB = "offsetwatch_bench_scale"
REDIS_DB = 11  # a database of the machine's Redis that nothing else here uses


def psql(sql: str, check: bool = True) -> None:
    subprocess.run(["psql", "-q", "-h", "127.0.0.1", "-U", "postgres", "-c", sql], check=check, capture_output=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sources", type=int, default=20, help="stores, and as many clusters (2x sources in all)")
    parser.add_argument("--topics", type=int, default=20)
    parser.add_argument("--partitions", type=int, default=50)
    parser.add_argument("--cycles", type=int, default=3)
    parser.add_argument("--workers", default="1,2,3")
    args = parser.parse_args()
    stack, bootstrap = start_lone_kafka("ow-scale-")
    psql(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
    psql(f"CREATE DATABASE {DB}")
    os.environ["DATABASE_URL"] = f"postgres://postgres:postgres@127.0.0.1:5432/{DB}"
    os.environ["REDIS_URL"] = f"redis://127.0.0.1:6379/{REDIS_DB}"
    os.environ["DJANGO_SETTINGS_MODULE"] = "offsetwatch.settings"
    try:
        run(args, bootstrap, stack.run_dir)
    finally:
        stack.stop_component("kafka")
        from django.db import connections

        connections.close_all()
        psql(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)", check=False)


def setup_broker(bootstrap: str, topics: list[str], partitions: int) -> None:
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(t, num_partitions=partitions, replication_factor=1) for t in topics]).values():
        f.result(60)
    for topic in topics:
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-job", "enable.auto.commit": False})
        consumer.commit(offsets=[TopicPartition(topic, p, 0) for p in range(partitions)], asynchronous=False)
        consumer.close()


def wait_for_workers(app, count: int, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if len(app.control.ping(timeout=1.0)) >= count:
            return
    raise RuntimeError(f"{count} workers did not answer a ping within {timeout_s:.0f} s")


def one_cycle(sources: int, timeout_s: float = 600.0) -> float:
    """Run beat's fan-out once; the wall time until every source recorded a poll started after it."""
    from django.utils import timezone

    from collectors.tasks import collect_all
    from dashboard.models import SourceHealth

    started = timezone.now()
    t0 = time.perf_counter()
    collect_all.delay()
    deadline = t0 + timeout_s
    while time.perf_counter() < deadline:
        done = SourceHealth.objects.filter(last_attempt_at__gte=started)
        if done.count() >= sources:
            failed = list(done.filter(consecutive_failures__gt=0).values_list("label", "last_error"))
            if failed:
                raise RuntimeError(f"polls failed: {failed[:3]}")
            return time.perf_counter() - t0
        time.sleep(0.05)
    raise RuntimeError(f"the cycle did not finish within {timeout_s:.0f} s")


def run(args, bootstrap: str, work: Path) -> None:
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    from dashboard.monitoring.services import cluster_get_or_create, store_get_or_create
    from offsetwatch.celery import app

    call_command("migrate", verbosity=0)
    topics = [f"scale-{i:03d}" for i in range(args.topics)]
    t = time.perf_counter()
    setup_broker(bootstrap, topics, args.partitions)
    for i in range(args.sources):
        cluster = cluster_get_or_create(name=f"cluster-{i:03d}", bootstrap_servers=bootstrap)
        store_get_or_create(name=f"groups-{i:03d}", kind="kafka", url=f"kafka://{bootstrap}", cluster=cluster)
    sources = 2 * args.sources
    print(f"setup: {args.topics} topics x {args.partitions} partitions, {args.topics} groups; {args.sources} stores + "
          f"{args.sources} clusters = {sources} sources ({time.perf_counter() - t:.0f} s)", flush=True)
    connection.close()  # the bench's own connection is idle while the workers write
    app.control.purge()
    results: dict[int, list[float]] = {}
    for count in [int(n) for n in args.workers.split(",")]:
        procs = celery_workers_start(count, work, "bench")
        try:
            wait_for_workers(app, count)
            warm = one_cycle(sources)
            cycles = [one_cycle(sources) for _ in range(args.cycles)]
        finally:
            celery_workers_stop(procs, 60)
        results[count] = cycles
        print(f"{count} worker(s): warm-up {warm:.2f} s; cycles " + ", ".join(f"{c:.2f}" for c in cycles)
              + f" s; median {statistics.median(cycles):.2f} s", flush=True)
    base = statistics.median(results[min(results)])
    print(f"\npolls per cycle: {sources} ({args.sources} stores reading {args.topics} groups each, {args.sources} "
          f"clusters reading {args.topics * args.partitions} partitions' watermarks each); {os.cpu_count()} cores")
    print("| workers | cycle wall time (median) | speed-up |")
    print("|---:|---:|---:|")
    for count, cycles in results.items():
        med = statistics.median(cycles)
        print(f"| {count} | {med:.2f} s | {base / med:.2f}x |")


if __name__ == "__main__":
    main()
