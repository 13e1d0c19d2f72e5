"""One collection cycle over 10,000 partitions (500 pipelines x 20 partitions) on the local stack.

500 topics of 20 partitions on Tansu, 500 consumer groups with committed offsets (a Kafka
group-offsets store), PostgreSQL. Prints the bare client calls' time (watermarks for all
partitions + every group's committed offsets) and the full cycle (`collect_once`: read, store,
evaluate, incidents) in the same run, with CPU time, broker requests, database queries, rows and
bytes written, and the process's peak RSS.

Run: .venv/bin/python bench/collect_cycle.py [--pipelines 500 --partitions 20 --cycles 3]
     [--profile /tmp/cycle.prof] [--queries 15]   (where the full cycle's time goes)
BENCH_DATABASE names the scratch database (default offsetwatch_bench_cycle; it is dropped after).
"""
from __future__ import annotations

import argparse
import gc
import math
import os
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from benchdb import create_topics, with_lone_kafka_and_database  # noqa: E402

DB = os.environ.get("BENCH_DATABASE", "offsetwatch_bench_cycle")  # one per engineer on a shared server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pipelines", type=int, default=500)
    parser.add_argument("--partitions", type=int, default=20)
    parser.add_argument("--cycles", type=int, default=3)
    parser.add_argument("--profile", metavar="PATH", help="profile one more cycle with cProfile, stats to PATH")
    parser.add_argument("--profile-sort", default="tottime", help="pstats sort key of the printed rows")
    parser.add_argument("--profile-rows", type=int, default=25)
    parser.add_argument("--queries", type=int, default=0, metavar="N",
                        help="print the N query shapes of the last cycle that took the most time")
    args = parser.parse_args()
    with_lone_kafka_and_database("ow-cycle-", DB, lambda bootstrap: run(args, bootstrap))


def run(args, bootstrap: str) -> None:
    from confluent_kafka import Consumer, TopicPartition
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from collectors.cycle import collect_once
    from dashboard.monitoring.services import cluster_get_or_create, store_get_or_create
    from streamoffsets.kafka import KafkaWatermarkReader
    from streamoffsets.stores.kafka_groups import KafkaGroupOffsetStore

    topics = [f"bench-{i:04d}" for i in range(args.pipelines)]
    t0 = time.perf_counter()
    create_topics(bootstrap, topics, args.partitions)
    for topic in topics:  # each job committed a position (the topics are empty: lag 0, same work)
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-job", "enable.auto.commit": False})
        consumer.commit(offsets=[TopicPartition(topic, p, 0) for p in range(args.partitions)], asynchronous=False)
        consumer.close()
    print(f"setup: {len(topics)} topics x {args.partitions} partitions and {len(topics)} groups in "
          f"{time.perf_counter() - t0:.0f} s")
    cluster = cluster_get_or_create(name="bench", bootstrap_servers=bootstrap)
    store_get_or_create(name="groups", kind="kafka", url=f"kafka://{bootstrap}", cluster=cluster)
    collect_once()  # first cycle discovers the pipelines
    gc.freeze()  # as each Celery pool process does once started (offsetwatch.celery)

    reader = KafkaWatermarkReader(bootstrap)
    groups = KafkaGroupOffsetStore(bootstrap)

    def bare_calls() -> float:
        t = time.perf_counter()
        reader.watermarks(topics)
        groups.snapshot()
        return time.perf_counter() - t

    def table_bytes() -> int:
        with connection.cursor() as cur:
            cur.execute("SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c JOIN pg_namespace n "
                        "ON n.oid = c.relnamespace WHERE n.nspname = 'public' AND c.relkind = 'r'")
            return int(cur.fetchone()[0])

    # Bare calls and full cycles alternate, so both see the same machine: this host's speed drifts
    # by tens of percent over a minute, which skewed the ratio when all of one ran before the other.
    bare, full, cpu, queries, writes = [], [], [], [], []
    size_before = table_bytes()
    for _ in range(args.cycles):
        time.sleep(1)  # distinct sample times
        bare.append(bare_calls())
        c0, t = time.process_time(), time.perf_counter()
        with CaptureQueriesContext(connection) as q:
            summary = collect_once()
        full.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c0)
        queries.append(len(q))
        writes.append(sum(1 for x in q.captured_queries if x["sql"].startswith(("INSERT", "UPDATE", "DELETE"))))
        assert not summary.errors, summary.errors
    size_after = table_bytes()
    if args.profile:
        # One more cycle under cProfile, after the measured ones (the profiler slows Python code
        # by a good part, so it is never one of them); the stats file is for pstats or snakeviz.
        import cProfile
        import pstats

        cProfile.runctx("collect_once()", globals(), {"collect_once": collect_once}, args.profile)
        pstats.Stats(args.profile).sort_stats(args.profile_sort).print_stats(args.profile_rows)
    if args.queries:
        # The last measured cycle's queries by shape: how many, and their time in the database
        # (as the client saw it: execute to the rows fetched).
        from collections import defaultdict

        shapes: dict[str, list[float]] = defaultdict(list)
        for x in q.captured_queries:
            shapes[x["sql"][:110]].append(float(x["time"]))
        for shape, times in sorted(shapes.items(), key=lambda kv: -sum(kv[1]))[:args.queries]:
            print(f"  {len(times):>4} x {sum(times) * 1000:7.1f} ms  {shape}")
    partitions = args.pipelines * args.partitions
    chunks = math.ceil(partitions / reader.chunk_size)
    requests = 1 + 2 * chunks + 1 + args.pipelines
    best_bare, best_full = min(bare), min(full)
    print(f"partitions: {partitions:,}; pipelines: {args.pipelines}")
    print(f"bare client calls (watermarks + committed offsets): best {best_bare:.2f} s of {args.cycles}")
    ratios = sorted(f / b for f, b in zip(full, bare))
    print(f"full cycle (collect_once): best {best_full:.2f} s wall, {min(cpu):.2f} s CPU; ratio of bests "
          f"{best_full / best_bare:.2f}x; per cycle (full / the bare calls just before it): median "
          f"{ratios[len(ratios) // 2]:.2f}x, range {ratios[0]:.2f}-{ratios[-1]:.2f}x over {len(ratios)} cycles")
    print(f"broker requests per cycle: {requests} (1 metadata + 2 x {chunks} ListOffsets chunks + 1 ListGroups + "
          f"{args.pipelines} OffsetFetch, one per group)")
    print(f"database per cycle: {queries[-1]} queries ({writes[-1]} writes); "
          f"{(size_after - size_before) / args.cycles / 1e6:.2f} MB added per cycle")
    print(f"peak RSS of this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")


if __name__ == "__main__":
    main()
