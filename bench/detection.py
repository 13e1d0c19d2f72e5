"""Detection latency and lag accuracy, on the local stack while collection cycles run.
Over 400 lines because the phases (steady, stall, rewind, stop) run in one script against one stack.

A producer writes to 4 partitions; a simulated job saves one HBase row per batch (batch interval
--batch-s) following the producer closely. The script drives the job through phases and reads
the status from the dashboard's JSON API (/api/v1/pipelines, through the real view) every 0.2 s:
  steady -> stall (rows keep coming, offsets frozen) -> steady -> rewind (offsets go back)
  -> steady -> stop (the producer stops, the job catches up, then writes no more rows)
and prints per phase the time from the change to the status, in seconds and in batch intervals,
and during steady phases the error of the reported lag against the truth at the same moment.

Run: .venv/bin/python bench/detection.py [--batch-s 2 --poll-s 1]   (needs PostgreSQL on 127.0.0.1)

--partitions: the partition rules (issue #13, docs/PARTITION_RULES.md) instead, on a ZooKeeper store
and a Kafka-group store at once. A consumer commits every --commit-s, one partition at a time, as
the old Kafka consumer and Storm's spouts do; partitions 0-2 go through normal -> stall (the same
offset re-written while messages wait) -> rewind (back 50, then advancing again) -> stop (no
longer committed), while control partition 3 keeps advancing throughout. Prints, per store, when
the partitions API showed partitions 0-2 STALLED / STOPPED (and the pipeline REWOUND), in commit
intervals after the first commit that did not advance (or did not write them), and whether the
control partition was ever flagged.

Run: REDIS_URL=redis://127.0.0.1:6379/0 .venv/bin/python bench/detection.py --partitions [--commit-s 1 --poll-s 0.5]
   (needs PostgreSQL and Redis on 127.0.0.1)
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from dashboard.monitoring.services import cluster_get_or_create, store_get_or_create

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DB = "offsetwatch_bench_detection"
PARTITIONS = 4


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-s", type=float, default=2.0)
    parser.add_argument("--poll-s", type=float, default=1.0)
    parser.add_argument("--rate", type=float, default=40.0, help="records per second, all partitions")
    parser.add_argument("--partitions", action="store_true", help="the partition rules' benchmark (see above)")
    parser.add_argument("--commit-s", type=float, default=1.0, help="with --partitions: the consumer's commit interval")
    args = parser.parse_args()
    if args.partitions:
        main_partitions(args)
        return
    from devstack.components import Stack, StackPorts, free_port

    work = Path(tempfile.mkdtemp(prefix="ow-detect-"))
    stack = Stack(work, StackPorts(kafka=free_port(), hbase=free_port(), zookeeper=0, redis=0), with_redis=False)
    stack.log_dir.mkdir(parents=True)
    stack.pid_dir.mkdir(parents=True)
    started = []
    for comp in stack.components():
        if comp.name in ("kafka", "hbase"):
            stack.start_component(comp, progress=lambda line: None)
            started.append(comp.name)
    for sql in (f"DROP DATABASE IF EXISTS {DB}", f"CREATE DATABASE {DB}"):
        subprocess.run(["psql", "-q", "-h", "127.0.0.1", "-U", "postgres", "-c", sql], check=True, capture_output=True)
    os.environ.update(DATABASE_URL=f"postgres://postgres:postgres@127.0.0.1:5432/{DB}",
                      DJANGO_SETTINGS_MODULE="offsetwatch.settings",
                      OFFSETWATCH_POLL_INTERVAL=str(args.poll_s),
                      # The stop rule's floor: two polls (the default, 30 s, suits 10 s polls).
                      OFFSETWATCH_STALE_AFTER=str(2 * max(args.poll_s, args.batch_s)))
    try:
        run(args, f"127.0.0.1:{stack.ports.kafka}", f"hbase://127.0.0.1:{stack.ports.hbase}/offsets")
    finally:
        from django.db import connections

        connections.close_all()
        for name in reversed(started):
            stack.stop_component(name)
        subprocess.run(["psql", "-q", "-h", "127.0.0.1", "-U", "postgres", "-c", f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)"], check=False)


def run(args, bootstrap: str, hbase_url: str) -> None:
    import django

    django.setup()
    from confluent_kafka import Producer
    from django.core.management import call_command
    from django.test import Client

    from collectors.cycle import collect_once
    from dashboard.accounts.roles import VIEWER
    from dashboard.monitoring.services import cluster_get_or_create, store_get_or_create
    from reference_job.producer import ensure_topic, producer_config
    from streamoffsets.kafka import KafkaWatermarkReader
    from streamoffsets.stores.registry import open_store
    from streamoffsets.types import BatchOffsets
    from tests.factories import person

    call_command("migrate", verbosity=0)
    topic = "detect"
    ensure_topic(bootstrap, topic, PARTITIONS)
    cluster = cluster_get_or_create(name="local", bootstrap_servers=bootstrap)
    store_get_or_create(name="hbase", kind="hbase", url=hbase_url, cluster=cluster)
    store = open_store(hbase_url)
    store.ensure_table()
    client = Client()
    client.force_login(person("bench", VIEWER))
    reader = KafkaWatermarkReader(bootstrap)

    state = {"phase": "steady", "produce": True, "committed": {p: 0 for p in range(PARTITIONS)}, "rewound_at": None}
    # (monotonic-free wall time, running total) histories, to know the truth at any instant.
    produced: list[tuple[float, int]] = [(0.0, 0)]
    saved: list[tuple[float, int]] = [(0.0, 0)]
    stop = threading.Event()

    def producer():
        prod = Producer(producer_config(bootstrap))
        n = 0
        while not stop.is_set():
            if state["produce"]:
                prod.produce(topic, value=b"x", partition=n % PARTITIONS)
                prod.flush(5)  # delivered: the high watermark has moved
                n += 1
                produced.append((time.time(), n))
            time.sleep(1 / args.rate)
        prod.flush(5)

    def job():
        while not stop.is_set():
            phase = state["phase"]
            if phase == "stop":
                time.sleep(0.1)
                continue
            if phase in ("steady", "rewind-done"):
                state["committed"] = {p: w.high for p, w in reader.topic_watermarks(topic).items()}
            elif phase == "rewind":
                state["committed"] = {p: max(0, c - 50) for p, c in state["committed"].items()}
                state["phase"] = "rewind-done"
            store.save_batch(BatchOffsets(topic, "job", int(time.time() * 1000), dict(state["committed"])))
            saved.append((time.time(), sum(state["committed"].values())))
            if state["phase"] == "rewind-done" and state["rewound_at"] is None:
                state["rewound_at"] = time.monotonic()
            time.sleep(args.batch_s)

    def collector():
        while not stop.is_set():
            t = time.monotonic()
            collect_once()
            stop.wait(max(0.0, args.poll_s - (time.monotonic() - t)))

    threads = [threading.Thread(target=f, daemon=True) for f in (producer, job, collector)]
    for t in threads:
        t.start()

    def status():
        rows = client.get("/api/v1/pipelines").json()["pipelines"]
        return rows[0] if rows else None

    def wait_for(expected: str, timeout: float = 120.0) -> float:
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            row = status()
            if row and row["status"] == expected:
                return time.monotonic() - t0
            time.sleep(0.2)
        raise TimeoutError(f"status {expected} not reached in {timeout:.0f} s (last: {status()})")

    def at(history: list[tuple[float, int]], t: float) -> int:
        return max((v for ts, v in history if ts <= t), default=0)

    def lag_errors(seconds: float) -> list[int]:
        """Reported lag against the truth at the instant the cycle sampled it (its evaluated_at)."""
        from datetime import datetime

        errors, seen, t0 = [], set(), time.monotonic()
        while time.monotonic() - t0 < seconds:
            row = status()
            if row and row["total_lag"] is not None and row["evaluated_at"] not in seen:
                seen.add(row["evaluated_at"])
                t = datetime.fromisoformat(row["evaluated_at"]).timestamp()
                errors.append(abs(row["total_lag"] - (at(produced, t) - at(saved, t))))
            time.sleep(0.2)
        return errors

    results = []
    try:
        wait_for("OK", 60)
        errors = lag_errors(15)
        phases = [("stall", "STALLED", lambda: state.update(phase="stall")),
                  ("steady", "OK", lambda: state.update(phase="steady")),
                  ("rewind", "REWOUND", lambda: state.update(phase="rewind")),
                  ("steady", "OK", lambda: state.update(phase="steady")),
                  ("stop", "STOPPED", lambda: state.update(phase="stop"))]
        for name, expected, change in phases:
            if name == "stop":  # the producer stops first and the job catches up: nothing waits
                state["produce"] = False
                time.sleep(2 * args.batch_s + 1)
            change()
            seconds = wait_for(expected)
            if name == "rewind":  # from the moment the rewound offsets were written
                seconds -= state["rewound_at"] - (time.monotonic() - seconds)
            results.append((name, expected, seconds))
            if name == "steady":
                errors += lag_errors(10)
    finally:
        stop.set()
        for t in threads:
            t.join(10)
    movement = args.rate * args.poll_s
    print(f"batch interval {args.batch_s:g} s, collection cycle every {args.poll_s:g} s, producer {args.rate:g} records/s")
    print(f"{'phase':<8} {'status':<9} {'detected after':>15} {'batch intervals':>16} {'cycles':>7}")
    for name, expected, seconds in results:
        print(f"{name:<8} {expected:<9} {seconds:>13.1f} s {seconds / args.batch_s:>16.1f} {seconds / args.poll_s:>7.1f}")
    print(f"lag error in steady phases, against the truth at each sample's instant: max {max(errors)} messages, "
          f"mean {sum(errors) / len(errors):.1f} over {len(errors)} samples; one cycle's movement = {movement:.0f} messages")



# --- partition rules: partitions 0-2 stuck while control partition 3 advances ------------------

PARTS_DB = "offsetwatch_bench_detection_parts"
STUCK, CONTROL = (0, 1, 2), 3


def main_partitions(args) -> None:
    from devstack.components import Stack, StackPorts, free_port

    work = Path(tempfile.mkdtemp(prefix="ow-detect-parts-"))
    stack = Stack(work, StackPorts(kafka=free_port(), hbase=free_port(), zookeeper=free_port(), redis=0),
                  with_redis=False)
    stack.log_dir.mkdir(parents=True)
    stack.pid_dir.mkdir(parents=True)
    started = []
    for comp in stack.components():
        if comp.name in ("kafka", "zookeeper"):
            stack.start_component(comp, progress=lambda line: None)
            started.append(comp.name)
    for sql in (f"DROP DATABASE IF EXISTS {PARTS_DB}", f"CREATE DATABASE {PARTS_DB}"):
        subprocess.run(["psql", "-q", "-h", "127.0.0.1", "-U", "postgres", "-c", sql], check=True, capture_output=True)
    os.environ.update(DATABASE_URL=f"postgres://postgres:postgres@127.0.0.1:5432/{PARTS_DB}",
                      DJANGO_SETTINGS_MODULE="offsetwatch.settings",
                      OFFSETWATCH_POLL_INTERVAL=str(args.poll_s),
                      OFFSETWATCH_STALE_AFTER=str(2 * max(args.poll_s, args.commit_s)))
    try:
        run_partitions(args, f"127.0.0.1:{stack.ports.kafka}", f"127.0.0.1:{stack.ports.zookeeper}")
    finally:
        from django.db import connections

        connections.close_all()
        for name in reversed(started):
            stack.stop_component(name)
        subprocess.run(["psql", "-q", "-h", "127.0.0.1", "-U", "postgres", "-c",
                        f"DROP DATABASE IF EXISTS {PARTS_DB} WITH (FORCE)"], check=False)


def run_partitions(args, bootstrap: str, zk_hosts: str) -> None:
    import django

    django.setup()
    from confluent_kafka import Producer
    from django.core.management import call_command
    from django.test import Client
    from kazoo.client import KazooClient

    from collectors.cycle import collect_once
    from dashboard.accounts.roles import VIEWER
    from dashboard.models import Pipeline
    from reference_job.producer import ensure_topic, producer_config
    from streamoffsets.kafka import KafkaWatermarkReader
    from streamoffsets.stores.kafka_groups import KafkaGroupOffsetStore
    from streamoffsets.types import BatchOffsets
    from tests.factories import person

    call_command("migrate", verbosity=0)
    topic = "detect-parts"
    ensure_topic(bootstrap, topic, PARTITIONS)
    cluster = cluster_get_or_create(name="local", bootstrap_servers=bootstrap)
    store_get_or_create(name="zookeeper", kind="zookeeper", url=f"zk://{zk_hosts}", cluster=cluster)
    store_get_or_create(name="kafka-group", kind="kafka", url=f"kafka://{bootstrap}", cluster=cluster)
    client = Client()
    client.force_login(person("bench", VIEWER))
    reader = KafkaWatermarkReader(bootstrap)
    zk = KazooClient(hosts=zk_hosts, timeout=5)
    zk.start(timeout=5)
    kafka_store = KafkaGroupOffsetStore(bootstrap)
    groups = {"zookeeper": "spout-zk", "kafka-group": "spout-kafka"}

    state = {"phase": "normal", "committed": {p: 0 for p in range(PARTITIONS)}, "first_at": None}
    stop = threading.Event()

    def producer():
        prod = Producer(producer_config(bootstrap))
        n = 0
        while not stop.is_set():
            prod.produce(topic, value=b"x", partition=n % PARTITIONS)
            prod.flush(5)
            n += 1
            time.sleep(1 / args.rate)

    def commit(partitions):
        """One commit: a node write per partition (ZooKeeper) and one group commit (Kafka)."""
        ms = int(time.time() * 1000)
        base = f"/consumers/{groups['zookeeper']}/offsets/{topic}"
        zk.ensure_path(base)
        for p in partitions:
            path, value = f"{base}/{p}", str(state["committed"][p]).encode()
            if zk.exists(path):
                zk.set(path, value)  # re-written even when unchanged: its mtime moves
            else:
                zk.create(path, value)
        kafka_store.save_batch(BatchOffsets(topic, groups["kafka-group"], ms,
                                            {p: state["committed"][p] for p in partitions}))

    def job():
        while not stop.is_set():
            t = time.monotonic()
            phase = state["phase"]
            highs = {p: w.high for p, w in reader.topic_watermarks(topic).items()}
            advancing = range(PARTITIONS) if phase in ("normal", "rewound") else [CONTROL]
            for p in advancing:
                state["committed"][p] = highs[p]
            if phase == "rewind":
                for p in STUCK:
                    state["committed"][p] = max(0, state["committed"][p] - 50)
                state["phase"] = "rewound"
            commit(range(PARTITIONS) if phase != "stop" else [CONTROL])
            if state["first_at"] is None and phase != "normal":  # the phase's first commit not advancing 0-2
                state["first_at"] = time.monotonic()
            stop.wait(max(0.0, args.commit_s - (time.monotonic() - t)))

    def collector():
        while not stop.is_set():
            t = time.monotonic()
            collect_once()
            stop.wait(max(0.0, args.poll_s - (time.monotonic() - t)))

    threads = [threading.Thread(target=f, daemon=True) for f in (producer, job, collector)]
    for t in threads:
        t.start()

    control_flags: list[str] = []
    pipelines: dict[str, int] = {}

    def partitions_of(kind: str) -> tuple[dict | None, dict[int, dict]]:
        if kind not in pipelines:
            found = Pipeline.objects.filter(topic=topic, group=groups[kind]).values_list("pk", flat=True).first()
            if found is None:
                return None, {}
            pipelines[kind] = found
        pk = pipelines[kind]
        rows = {r["partition"]: r for r in client.get(f"/api/v1/pipelines/{pk}/partitions").json()["partitions"]}
        status = client.get(f"/api/v1/pipelines/{pk}").json()
        if rows.get(CONTROL, {}).get("status", "OK") != "OK":
            control_flags.append(f"{kind}: {rows[CONTROL]['status_reason']}")
        return status, rows

    def wait_phase(phase: str, expected: str, timeout: float = 40.0) -> dict[str, tuple[float | None, str]]:
        """Switch the job to `phase`, then per store the time from the phase's first commit until
        partitions 0-2 all show `expected` (REWOUND: the pipeline's status)."""
        state["first_at"] = None
        state["phase"] = phase
        found: dict[str, tuple[float | None, str]] = {}
        t0 = time.monotonic()
        while len(found) < len(groups) and time.monotonic() - t0 < timeout:
            for kind in groups:
                if kind in found:
                    continue
                status, rows = partitions_of(kind)
                if status is None or state["first_at"] is None:
                    continue
                if expected == "REWOUND":
                    hit, why = status.get("status") == "REWOUND", "; ".join(status.get("reasons", []))[:160]
                else:
                    hit = all(rows.get(p, {}).get("status") == expected for p in STUCK)
                    why = rows.get(0, {}).get("status_reason", "")
                if hit:
                    found[kind] = (time.monotonic() - state["first_at"], why)
            time.sleep(0.1)
        for kind in groups:
            if kind not in found:
                _, rows = partitions_of(kind)
                found[kind] = (None, f"not within {timeout:.0f} s; partition 0: "
                                     f"{rows.get(0, {}).get('status')} {rows.get(0, {}).get('status_reason', '')}")
        return found

    def settle(seconds: float) -> None:
        state["phase"] = "normal"
        t0 = time.monotonic()
        while time.monotonic() - t0 < seconds:
            for kind in groups:
                partitions_of(kind)
            time.sleep(0.2)

    results = []
    try:
        settle(8 * args.commit_s)  # discovered, a cadence known, every partition advancing
        results.append(("stall", "STALLED", wait_phase("stall", "STALLED")))
        results.append(("rewind", "REWOUND", wait_phase("rewind", "REWOUND")))
        settle(6 * args.commit_s)  # advancing again: the flags clear
        results.append(("stop", "STOPPED", wait_phase("stop", "STOPPED")))
    finally:
        stop.set()
        for t in threads:
            t.join(10)
        zk.stop()
        zk.close()
        kafka_store.close()
    print(f"consumer commits every {args.commit_s:g} s (one partition at a time), collection cycle every "
          f"{args.poll_s:g} s, producer {args.rate:g} records/s over {PARTITIONS} partitions; "
          f"partitions 0-2 stuck, partition 3 the control")
    print(f"{'store':<12} {'phase':<7} {'status':<8} {'detected after':>14} {'commit intervals':>17}  reason (partition 0)")
    for name, expected, found in results:
        for kind, (seconds, why) in found.items():
            when = f"{seconds:>12.1f} s {seconds / args.commit_s:>17.1f}" if seconds is not None else f"{'never':>14} {'—':>17}"
            print(f"{kind:<12} {name:<7} {expected:<8} {when}  {why}")
    print("control partition 3 flagged: " + ("never" if not control_flags else
                                             f"{len(control_flags)} times, first: {control_flags[0]}"))


if __name__ == "__main__":
    main()
