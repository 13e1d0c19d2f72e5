"""Lag in seconds from every group's own record, over 10,000 partitions read by 3 groups each.

The harness of bench/collect_cycle.py (500 topics x 20 partitions on a lone Tansu, a Kafka
group-offsets store, PostgreSQL), with records in every partition and three groups per topic at
different positions, all lagging: 30,000 (topic, partition, offset) positions. Prints

- the share of lagging partition rows (one per group and partition) whose lag in seconds is
  known after the FIRST cycle, and how many from the record itself (target >= 99 %);
- the full cycle (`collect_once`) without record reads (OFFSETWATCH_RECORD_TIMESTAMP_PARTITIONS
  = 0), with every position read (the remembered timestamps dropped first: the cost of a cycle
  where every group moved), and with them remembered (groups that did not move), alternated so
  all see the same machine; target: every position read at most 20 % slower than without.

Run: REDIS_URL=redis://127.0.0.1:6379/9 .venv/bin/python bench/lag_seconds.py [--pipelines 500 --partitions 20 --cycles 3]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from benchdb import create_topics, with_lone_kafka_and_database  # noqa: E402

DB = "offsetwatch_bench_lagsec"
GROUPS = 3
RECORDS = 4  # per partition; the groups sit at offsets 0, 1 and 2: all three lag


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pipelines", type=int, default=500, help="topics; each read by 3 groups")
    parser.add_argument("--partitions", type=int, default=20)
    parser.add_argument("--cycles", type=int, default=3)
    args = parser.parse_args()
    with_lone_kafka_and_database("ow-lagsec-", DB, lambda bootstrap: run(args, bootstrap))


def run(args, bootstrap: str) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from django.conf import settings

    from collectors.cycle import collect_once
    from collectors.locks import redis_client
    from collectors.record_times import _key
    from dashboard.models import PipelineEvaluation
    from dashboard.monitoring.services import cluster_get_or_create, store_get_or_create

    topics = [f"lagsec-{i:04d}" for i in range(args.pipelines)]
    t0 = time.perf_counter()
    create_topics(bootstrap, topics, args.partitions)
    # One record per batch (Tansu miscounts the high watermark of multi-record batches), each
    # partition's records a second apart and an hour old, so every position has its own time.
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "batch.num.messages": 1,
                         "queue.buffering.max.messages": 1_000_000})
    base_ms = int(time.time() * 1000) - 3_600_000
    for r in range(RECORDS):
        for topic in topics:
            for p in range(args.partitions):
                producer.produce(topic, value=b"x", partition=p, timestamp=base_ms + r * 1000)
        producer.flush(120)
    for topic in topics:
        for g in range(GROUPS):
            consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-job{g}", "enable.auto.commit": False})
            consumer.commit(offsets=[TopicPartition(topic, p, g) for p in range(args.partitions)], asynchronous=False)
            consumer.close()
    print(f"setup: {len(topics)} topics x {args.partitions} partitions, {RECORDS} records each, "
          f"{len(topics) * GROUPS} groups in {time.perf_counter() - t0:.0f} s")
    cluster = cluster_get_or_create(name="bench", bootstrap_servers=bootstrap)
    store_get_or_create(name="groups", kind="kafka", url=f"kafka://{bootstrap}", cluster=cluster)

    # The first cycle: the pipelines appear (store poll) and are evaluated (cluster poll).
    t = time.perf_counter()
    summary = collect_once()
    first_s = time.perf_counter() - t
    assert not summary.errors, summary.errors
    lagging = known = from_record = 0
    methods: dict[str, int] = {}
    for rows in PipelineEvaluation.objects.values_list("partitions", flat=True).iterator(chunk_size=500):
        for row in rows:
            if row["lag"] and row["lag"] > 0:
                lagging += 1
                known += row["lag_seconds"] is not None
                from_record += row["lag_method"] == "record timestamp"
                if row["lag_method"] != "record timestamp":
                    methods[row["lag_method"]] = methods.get(row["lag_method"], 0) + 1
    print(f"first cycle ({first_s:.1f} s, pipelines discovered): {lagging:,} lagging partition rows; lag in seconds known "
          f"for {known:,} ({100 * known / max(1, lagging):.2f} %), from the record for {from_record:,}")
    for method, count in sorted(methods.items(), key=lambda kv: -kv[1])[:5]:
        print(f"  {count:>6} x {method}")

    def cycle(cap: int, forget: bool) -> float:
        settings.RECORD_TIMESTAMP_PARTITIONS = cap
        if forget:
            redis_client().delete(_key(cluster.pk))
        time.sleep(1)  # distinct sample times
        t = time.perf_counter()
        summary = collect_once()
        assert not summary.errors, summary.errors
        return time.perf_counter() - t

    cap = settings.RECORD_TIMESTAMP_PARTITIONS
    without, cold, warm = [], [], []
    for _ in range(args.cycles):  # alternated: this host's speed drifts over a minute
        without.append(cycle(0, False))
        cold.append(cycle(cap, True))
        warm.append(cycle(cap, False))
    settings.RECORD_TIMESTAMP_PARTITIONS = cap
    med = lambda xs: sorted(xs)[len(xs) // 2]
    positions = args.pipelines * args.partitions * GROUPS
    print(f"partitions: {args.pipelines * args.partitions:,}; groups: {args.pipelines * GROUPS:,}; positions: {positions:,}")
    print(f"full cycle without record reads: median {med(without):.2f} s (best {min(without):.2f}) of {args.cycles}")
    print(f"full cycle reading every position: median {med(cold):.2f} s (best {min(cold):.2f}): "
          f"{100 * (med(cold) / med(without) - 1):+.1f} % (budget {settings.RECORD_TIMESTAMP_BUDGET_BASE_S:g} s + "
          f"{settings.RECORD_TIMESTAMP_BUDGET_PER_POSITION_MS:g} ms x positions, at most {settings.RECORD_TIMESTAMP_BUDGET_MAX_S:g} s)")
    print(f"full cycle with the timestamps remembered: median {med(warm):.2f} s (best {min(warm):.2f}): "
          f"{100 * (med(warm) / med(without) - 1):+.1f} %")


if __name__ == "__main__":
    main()
