"""Alert latency (issue #15): from a pipeline's status change to its notification at the on-call peer,
with the deployed processes, at 1,000 pipelines and the default poll interval.

Setup: a lone Tansu broker and a ZooKeeper (the local stack's), --topics topics of --partitions
partitions with a few records each, and --pipelines simulated jobs, each its own consumer group
in the old Kafka-consumer layout under one of --stores ZooKeeper chroots (one Offset Watch store
each, one cluster for the broker). Every job commits its partitions' high watermarks (caught up)
every --batch-s in one ZooKeeper transaction, the jobs spread evenly over the interval: a
ZooKeeper node's mtime is the batch time, so the fleet stays OK. The dashboard runs as deployed
(devstack/deployment.py): a Celery worker (2 processes, compose's default on 2 cores: queues
collect and default) and beat, separate processes, on database offsetwatch_bench_alerts and Redis
db 11, at the default poll interval (or --poll-interval). A JSON-webhook channel (json://) points
at a local HTTP peer in this process (tests/peers' webhook) that notes each arrival's time.time(),
and one route sends every alert-* pipeline's incidents there.

Once every pipeline is collected and OK, --changes times (a random pause of up to one poll
interval between them, so changes fall at any phase of the cycle), one pipeline not changed before:

  --change out-of-range (default): its job commits a position 1,000 past the partitions' end (as
    after its topic was deleted and re-created): ERR by rule 1 (partition out of range) at the
    first evaluation that reads it, with no threshold to wait for: the fastest any rule detects
    (REWOUND, rule 2, is as fast; STALLED needs 2 batch intervals; a stop at least
    OFFSETWATCH_STALE_AFTER, 30 s).
  --change stop: 5 records arrive on its topic, its job writes one last batch behind them and
    stops. Measured: STALLED (rule 4) at the first evaluation, since the idle job re-wrote the same
    offsets before (batches came, no offset moved, messages wait); rule 3's ERR (stopped with
    messages waiting) would follow after the stop threshold as a "worsened" notification.

and measures, per change (all clocks this machine's):
  detection    from the change (the ZooKeeper write acknowledged) to the evaluation that shows the
               new status (its time: the incident's opened_at, when that cluster poll started);
  notification from that evaluation to the notification's arrival at the peer; split into the
               evaluating poll until its commit (when this process first sees the incident, polling
               every 50 ms) and from the commit to the arrival (outbox -> Celery -> apprise -> peer);
  total        from the change to the arrival.
Prints min / median / max of each, the poll interval, the pipelines, whether the notification path
is within one poll interval, and the cycles' wall time (beat's fan-out until the last poll ended).

Run: .venv/bin/python bench/alert_latency.py [--pipelines 1000 --changes 5 --change out-of-range|stop
     --poll-interval S --stores 4 --topics 20 --partitions 2 --batch-s 10]
(needs PostgreSQL on 127.0.0.1:5432 and Redis on 127.0.0.1:6379; Java for ZooKeeper)
"""
from __future__ import annotations

import argparse
import logging
import os
import random
import shutil
import statistics
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from benchdb import create_topics, drop_database, fresh_django_database, start_components, stop_components  # noqa: E402

from devstack.components import LOOPBACK  # noqa: E402
from tests.peers.http import WebhookServer  # noqa: E402
from tests.peers.record import Received, Record  # noqa: E402

DB = "offsetwatch_bench_alerts"
REDIS_URL = "redis://127.0.0.1:6379/11"  # a database of the machine's Redis that nothing else here uses
RECORDS_PER_PARTITION = 10
SLOTS = 10  # the jobs write in this many groups spread over the batch interval


@dataclass
class ArrivalRecord(Record):
    """The webhook peer's record, with when each request arrived (time.time())."""

    arrived: list[tuple[float, dict]] = field(default_factory=list)

    def add(self, item) -> None:
        at = time.time()
        super().add(item)
        if isinstance(item, Received) and isinstance(item.json, dict):
            self.arrived.append((at, item.json))


class Fleet:
    """The simulated jobs: pipeline i is group job-<i> on topic alert-<i // stores % topics> under the
    ZooKeeper chroot /ow-alert-<i % stores>; each writes its offsets once per batch interval."""

    def __init__(self, zk_hosts: str, bootstrap: str, args):
        from kazoo.client import KazooClient

        from streamoffsets.kafka import KafkaWatermarkReader

        self.args, self.n = args, args.pipelines
        self.topics = [f"alert-{t:03d}" for t in range(args.topics)]
        self.zk = KazooClient(hosts=zk_hosts, timeout=10)
        self.zk.start(timeout=10)
        self.reader = KafkaWatermarkReader(bootstrap)
        self.override: dict[int, dict[int, int]] = {}  # pipeline -> the offsets its job writes instead
        self.stopped: set[int] = set()
        self.stop_event = threading.Event()
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, name="fleet", daemon=True)

    def chroot(self, i: int) -> str:
        return f"/ow-alert-{i % self.args.stores}"

    def topic(self, i: int) -> str:
        return self.topics[i // self.args.stores % len(self.topics)]

    def group(self, i: int) -> str:
        return f"job-{i:04d}"

    def highs(self) -> dict[str, dict[int, int]]:
        result = self.reader.watermarks(self.topics)
        return {t: {p: w.high for p, w in parts.items()} for t, parts in result.by_topic.items()}

    def node(self, i: int, partition: int | str = "") -> str:
        return f"{self.chroot(i)}/consumers/{self.group(i)}/offsets/{self.topic(i)}/{partition}".rstrip("/")

    def create(self) -> None:
        highs = self.highs()
        for s in range(self.args.stores):
            self.zk.ensure_path(f"/ow-alert-{s}/consumers")
        for result in [self.zk.ensure_path_async(self.node(i)) for i in range(self.n)]:
            result.get(timeout=30)
        pending = [self.zk.create_async(self.node(i, p), str(offset).encode())
                   for i in range(self.n) for p, offset in highs[self.topic(i)].items()]
        for result in pending:
            result.get(timeout=30)

    def _send(self, i: int, offsets: dict[int, int]):
        """One batch of job i: its partitions' offsets in one transaction (as the store's save does).
        Sent under self.lock: one ZooKeeper session applies its requests in the order sent."""
        tx = self.zk.transaction()
        for p, offset in offsets.items():
            tx.set_data(self.node(i, p), str(offset).encode())
        return tx.commit_async()

    @staticmethod
    def _wait(pending: list) -> None:
        for result in pending:
            failed = [r for r in result.get(timeout=30) if isinstance(r, Exception)]
            if failed:
                raise RuntimeError(f"a job's batch was not written: {failed[0]!r}")

    def write(self, pipelines: list[int], highs: dict[str, dict[int, int]]) -> None:
        with self.lock:
            pending = [self._send(i, self.override.get(i) or highs[self.topic(i)])
                       for i in pipelines if i not in self.stopped]
        self._wait(pending)

    def _run(self) -> None:
        slot, step = 0, self.args.batch_s / SLOTS
        while not self.stop_event.is_set():
            t = time.monotonic()
            self.write([i for i in range(self.n) if i % SLOTS == slot], self.highs())
            slot = (slot + 1) % SLOTS
            self.stop_event.wait(max(0.0, step - (time.monotonic() - t)))

    def change(self, i: int, how: str, bootstrap: str) -> float:
        """Make pipeline i's status change; the time.time() at which it is in the store."""
        from reference_job.producer import produce

        highs = self.highs()[self.topic(i)]
        if how == "out-of-range":
            offsets = {p: high + 1000 for p, high in highs.items()}
        else:  # stop: records arrive, the job writes one last batch behind them and stops
            produce(bootstrap, self.topic(i), len(highs), 5, start=int(time.time() * 1000))
            offsets = highs
        with self.lock:
            self.override[i] = offsets
            pending = [self._send(i, offsets)]
            if how == "stop":
                self.stopped.add(i)
        self._wait(pending)
        return time.time()

    def close(self) -> None:
        self.stop_event.set()
        if self.thread.is_alive():
            self.thread.join(30)
        for s in range(self.args.stores):
            self.zk.delete(f"/ow-alert-{s}", recursive=True)
        self.zk.stop()
        self.zk.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pipelines", type=int, default=1000)
    parser.add_argument("--changes", type=int, default=5)
    parser.add_argument("--change", choices=("out-of-range", "stop"), default="out-of-range")
    parser.add_argument("--poll-interval", type=float, default=None, help="seconds; default: the product's default")
    parser.add_argument("--stores", type=int, default=4, help="ZooKeeper chroots, one store each")
    parser.add_argument("--topics", type=int, default=20)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--batch-s", type=float, default=10.0, help="each job's batch interval")
    args = parser.parse_args()
    for name in [k for k in os.environ if k.startswith("OFFSETWATCH_")]:
        del os.environ[name]  # the product's defaults, here as in the deployed processes
    os.environ["REDIS_URL"] = REDIS_URL
    logging.getLogger("kazoo").setLevel(logging.WARNING)
    stack = start_components("ow-alerts-", ("kafka", "zookeeper"))
    fleet = deployment = server = cycles = None
    try:
        bootstrap = f"{LOOPBACK}:{stack.ports.kafka}"
        fresh_django_database(DB)
        from django.conf import settings

        poll_s = args.poll_interval or settings.POLL_INTERVAL_S
        import redis

        redis.Redis.from_url(REDIS_URL).flushdb()
        t0 = time.monotonic()
        fleet = Fleet(f"{LOOPBACK}:{stack.ports.zookeeper}", bootstrap, args)
        create_topics(bootstrap, fleet.topics, args.partitions)
        from reference_job.producer import produce

        for topic in fleet.topics:
            produce(bootstrap, topic, args.partitions, RECORDS_PER_PARTITION * args.partitions)
        fleet.create()
        fleet.thread.start()
        register_sources(bootstrap, f"{LOOPBACK}:{stack.ports.zookeeper}", args.stores)
        from devstack.deployment import Deployment

        deployment = Deployment(stack.run_dir / "deployed", poll_interval_s=poll_s, env={
            "DATABASE_URL": os.environ["DATABASE_URL"], "REDIS_URL": REDIS_URL,
            "OFFSETWATCH_IO_TIMEOUT": str(settings.IO_TIMEOUT_S),  # the product's default, not the harness's 2 s
            "OFFSETWATCH_PUBLIC_URL": "http://offsetwatch.example"})
        deployment.start(processes=("worker", "beat"))
        print(f"setup: {args.pipelines} pipelines ({args.stores} ZooKeeper stores, {args.topics} topics x "
              f"{args.partitions} partitions, a batch every {args.batch_s:g} s each), worker and beat up in "
              f"{time.monotonic() - t0:.0f} s; poll interval {poll_s:g} s", flush=True)
        cycles = CycleWatch()
        waited = fleet_ok(args.pipelines, deployment, timeout_s=max(300.0, 30 * poll_s))
        print(f"fleet collected and OK {waited:.0f} s after the processes started", flush=True)
        peer = ArrivalRecord()
        server = WebhookServer(peer)
        channel_and_route(f"json://{LOOPBACK}:{server.port}/on-call")
        rng = random.Random(15)
        rows = []
        for n, i in enumerate(rng.sample(range(args.pipelines), args.changes)):
            time.sleep(rng.uniform(0, poll_s))
            row = measure(fleet, i, args.change, bootstrap, peer, poll_s)
            rows.append(row)
            print(f"change {n + 1}: {fleet.topic(i)} / {fleet.group(i)} -> {row['status']}: detection "
                  f"{row['detection']:.1f} s, notification {row['notification']:.2f} s (evaluation to commit "
                  f"{row['commit']:.2f} s, commit to peer {row['delivery']:.2f} s), total {row['total']:.1f} s",
                  flush=True)
        report(rows, args, poll_s, cycles)
        others = [str(body.get("title")) for _, body in list(peer.arrived)
                  if not any(f"/ {r['group']} (" in str(body.get("title")) for r in rows)]
        print(f"other notifications at the peer (pipelines not changed): {len(others)}"
              + (f", e.g. {others[0]!r}" if others else ""))
    finally:
        if cycles is not None:
            cycles.close()
        if server is not None:
            server.stop()
        if deployment is not None:
            deployment.stop()
        if fleet is not None:
            fleet.close()
        stop_components(stack, ("kafka", "zookeeper"))
        drop_database(DB)
        import redis

        redis.Redis.from_url(REDIS_URL).flushdb()
        shutil.rmtree(stack.run_dir, ignore_errors=True)


def register_sources(bootstrap: str, zk_hosts: str, stores: int) -> None:
    from dashboard.monitoring.services import cluster_get_or_create, store_get_or_create

    cluster = cluster_get_or_create(name="bench", bootstrap_servers=bootstrap)
    for s in range(stores):
        store_get_or_create(name=f"zk-{s}", kind="zookeeper", url=f"zk://{zk_hosts}/ow-alert-{s}", cluster=cluster)


def channel_and_route(url: str) -> None:
    from dashboard.models import Channel, Route

    channel = Channel.objects.create(name="on-call", kind="webhook", url=url)
    Route.objects.create(name="every alert-* pipeline", channel=channel, topic_pattern="alert-*")


class CycleWatch:
    """Cycles' wall time, from the SourceHealth rows: beat's fan-out (the collector:beat row) until
    the last poll that started after it ended; looked at every 0.5 s by a thread of its own."""

    def __init__(self):
        self.seen: dict[object, float] = {}
        self.cluster_polls: dict[object, float] = {}
        self.store_polls: list[float] = []
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, name="cycles", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        from django.db import connection

        while not self.stop_event.wait(0.5):
            self.look()
        connection.close()

    def close(self) -> None:
        self.stop_event.set()
        self.thread.join(10)

    def look(self) -> None:
        from dashboard.models import SourceHealth
        from dashboard.monitoring.health import BEAT_SOURCE

        rows = {r.source: r for r in SourceHealth.objects.all()}
        beat = rows.pop(BEAT_SOURCE, None)
        if beat is None or not rows or beat.last_attempt_at in self.seen:
            return
        tick = beat.last_attempt_at
        if any(r.last_attempt_at is None or r.last_attempt_at < tick for r in rows.values()):
            return  # a poll of this cycle has not ended yet
        end = max(r.last_attempt_at + timedelta(milliseconds=r.last_duration_ms or 0) for r in rows.values())
        self.seen[tick] = (end - tick).total_seconds()
        self.cluster_polls[tick] = sum((r.last_duration_ms or 0) / 1000 for s, r in rows.items() if s.startswith("cluster:"))
        self.store_polls += [(r.last_duration_ms or 0) / 1000 for s, r in rows.items() if s.startswith("store:")]


def fleet_ok(pipelines: int, deployment, timeout_s: float) -> float:
    from dashboard.models import Incident, PipelineEvaluation
    from streamoffsets.evaluation import Status

    t0 = time.monotonic()
    ok = 0
    while time.monotonic() - t0 < timeout_s:
        ok = PipelineEvaluation.objects.filter(status=Status.OK).count()
        if ok >= pipelines and not Incident.objects.filter(closed_at=None).exists():
            return time.monotonic() - t0
        time.sleep(1)
    raise RuntimeError(f"only {ok} of {pipelines} pipelines OK after {timeout_s:.0f} s\n{deployment.logs()}")


def measure(fleet: Fleet, i: int, how: str, bootstrap: str, peer: ArrivalRecord, poll_s: float) -> dict:
    from dashboard.models import Incident, Pipeline
    from streamoffsets.evaluation import Status

    pipeline = Pipeline.objects.get(topic=fleet.topic(i), group=fleet.group(i), store__name=f"zk-{i % fleet.args.stores}")
    changed = fleet.change(i, how, bootstrap)
    deadline = time.monotonic() + 60 + 6 * poll_s + (40 if how == "stop" else 0)
    incident = None
    while incident is None and time.monotonic() < deadline:
        incident = Incident.objects.filter(pipeline=pipeline, partition=None, closed_at=None).first()
        if incident is None:
            time.sleep(0.02)
    if incident is None:
        raise RuntimeError(f"{fleet.group(i)}: no incident within {60 + 6 * poll_s:.0f} s of the change")
    visible = time.time()
    evaluated = incident.opened_at.timestamp()
    marker = f"/ {fleet.group(i)} ("
    arrived = None
    while arrived is None and time.monotonic() < deadline + 60:
        arrived = next((at for at, body in list(peer.arrived) if marker in str(body.get("title", ""))), None)
        if arrived is None:
            time.sleep(0.02)
    if arrived is None:
        raise RuntimeError(f"{fleet.group(i)}: incident opened but no notification at the peer within 60 s")
    return {"group": fleet.group(i), "status": Status(incident.worst_status).name, "detection": evaluated - changed,
            "notification": arrived - evaluated, "commit": visible - evaluated, "delivery": arrived - visible,
            "total": arrived - changed}


def report(rows: list[dict], args, poll_s: float, cycles: CycleWatch) -> None:
    def stats(key: str) -> str:
        values = [r[key] for r in rows]
        return f"min {min(values):6.2f}  median {statistics.median(values):6.2f}  max {max(values):6.2f} s"

    print(f"\n{args.pipelines} pipelines; poll interval {poll_s:g} s (beat), worker with 2 processes; "
          f"change: {args.change} ({rows[0]['status']}); {len(rows)} changes; {os.cpu_count()} cores")
    print(f"(a) detection, change -> evaluation showing it:     {stats('detection')}")
    print(f"(b) notification, evaluation -> arrival at the peer: {stats('notification')}")
    print(f"      evaluating poll -> its commit:                {stats('commit')}")
    print(f"      commit -> arrival (outbox, Celery, apprise):  {stats('delivery')}")
    print(f"(c) total, change -> arrival:                       {stats('total')}")
    worst = max(r["notification"] for r in rows)
    print(f"notification path within one poll interval ({poll_s:g} s): {'yes' if worst <= poll_s else 'NO'} "
          f"(worst {worst:.2f} s)")
    if cycles.seen:
        walls = sorted(cycles.seen.values())
        polls = sorted(cycles.cluster_polls.values())
        print(f"cycle wall time (beat's fan-out to the last poll's end) over {len(walls)} cycles: min {walls[0]:.2f}, "
              f"median {statistics.median(walls):.2f}, max {walls[-1]:.2f} s; of which the cluster poll "
              f"(read watermarks, evaluate {args.pipelines} pipelines, commit): median {statistics.median(polls):.2f} s; "
              f"a store's poll ({args.pipelines // args.stores} pipelines): median "
              f"{statistics.median(cycles.store_polls):.2f} s, max {max(cycles.store_polls):.2f} s")


if __name__ == "__main__":
    main()
