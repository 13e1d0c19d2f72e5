"""The fault matrix (over 400 lines: one scenario per component, each next to the row it yields):
each component of a deployed Offset Watch killed (SIGKILL, then restarted)
or frozen (SIGSTOP, then SIGCONT) while a job whose every batch is known writes to four stores,
and what the product showed meanwhile (tests/integration/test_fault_matrix.py asserts it, bench/faults.py
prints it).

Per row: seconds from the fault to the dashboard showing it (the affected source failing, the
collectors part down, or the API's 503), seconds from the restore to everything healthy again,
batches the stores still hold that never reached the database or reached it twice, the poll
cadence of the sources the fault does not touch (relative to before it), and 5xx answers.
"""
from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from devstack.components import LOOPBACK, Stack, StackPorts, free_port
from devstack.deployment import Deployment, wait_for

COMPONENTS = ("broker", "zookeeper", "hbase", "redis", "postgres", "worker", "beat", "web")
FAULTS = ("kill", "freeze")
STORES = ("hbase", "zookeeper", "kafka", "file")
# Which sources each component's fault takes down: the others must keep their cadence.
AFFECTS = {
    "broker": {"cluster", "kafka"}, "zookeeper": {"zookeeper"}, "hbase": {"hbase"},
    "redis": {"all"}, "postgres": {"all"}, "worker": {"all"}, "beat": {"all"}, "web": set(),
}
# The local stack's name for each server component.
SERVER_NAMES = {"broker": "kafka", "zookeeper": "zookeeper", "hbase": "hbase"}


@dataclass
class LocalStack:
    """The local stack's addresses in the form Deployment takes (as tests' RunningStack)."""

    kafka_bootstrap: str
    zookeeper_hosts: str
    hbase_host: str
    hbase_port: int


@dataclass
class FaultRun:
    """A deployment on its own local stack (Tansu, ZooKeeper, the HBase stand-in), all of which
    the matrix may kill or freeze, and an API token to watch it with."""

    dep: Deployment
    stack: Stack
    poll_interval_s: float
    api_token: str = ""

    @classmethod
    def start(cls, run_dir: Path, *, poll_interval_s: float, io_timeout_s: float) -> "FaultRun":
        stack = Stack(run_dir / "stack", StackPorts(kafka=free_port(), hbase=free_port(), zookeeper=free_port(),
                                                    redis=0), with_redis=False)
        stack.log_dir.mkdir(parents=True, exist_ok=True)
        stack.pid_dir.mkdir(parents=True, exist_ok=True)
        servers = [c for c in stack.components() if c.name != "redis"]
        for comp in servers:
            stack.start_component(comp, progress=lambda line: None)
        addresses = LocalStack(f"{LOOPBACK}:{stack.ports.kafka}", f"{LOOPBACK}:{stack.ports.zookeeper}", LOOPBACK,
                               stack.ports.hbase)
        dep = Deployment(run_dir / "deployment", stack=addresses, poll_interval_s=poll_interval_s,
                         env={"OFFSETWATCH_IO_TIMEOUT": str(io_timeout_s)})
        run = cls(dep, stack, poll_interval_s)
        try:
            dep.start()
            dep.manage("create_user", "watcher", "--role", "viewer")
            run.api_token = dep.manage("issue_api_token", "--user", "watcher", "--name", "fault-run").stdout.split()[-1]
        except BaseException:
            run.stop()
            raise
        return run

    def stop(self) -> None:
        self.dep.stop()
        for comp in reversed(self.stack.components()):
            if comp.name != "redis":
                self.stack.stop_component(comp.name)

    @property
    def run_dir(self) -> Path:
        return self.dep.run_dir

    def get(self, path: str, timeout_s: float = 3.0) -> tuple[int, dict | str]:
        """(status, JSON or text) of a GET with the API token; status 0 when nothing answered."""
        import urllib.error
        import urllib.request

        request = urllib.request.Request(f"{self.dep.base_url}{path}",
                                         headers={"Authorization": f"Bearer {self.api_token}"})
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                status, body = response.status, response.read()
        except urllib.error.HTTPError as exc:
            status, body = exc.code, exc.read()
        except (urllib.error.URLError, OSError, TimeoutError):
            return 0, ""
        try:
            return status, json.loads(body)
        except ValueError:
            return status, body.decode("utf-8", "replace")

    def shell_lines(self, code: str, stdin: str) -> str:
        return self.dep.manage("shell", "-c", code, input=stdin).stdout


@dataclass
class Row:
    component: str
    fault: str
    detect_s: float | None = None
    recover_s: float | None = None
    lost: int = 0
    duplicated: int = 0
    cadence: float | None = None  # the untouched sources' mean poll interval during / before; None: n/a
    http_5xx: int = 0
    http_500: int = 0
    notes: list[str] = field(default_factory=list)


@dataclass
class Sources:
    topic: str
    group: str
    cluster: int
    stores: dict[str, int]  # kind -> store pk
    urls: dict[str, str]
    ledger: Path
    writer: subprocess.Popen | None = None

    def source_ids(self) -> dict[str, str]:
        ids = {kind: f"store:{pk}" for kind, pk in self.stores.items()}
        ids["cluster"] = f"cluster:{self.cluster}"
        return ids


SETUP = """
import json, sys
from dashboard.monitoring.services import cluster_get_or_create, store_get_or_create
spec = json.loads(sys.stdin.read())
cluster = cluster_get_or_create(name="faults", bootstrap_servers=spec["bootstrap"])
stores = {kind: store_get_or_create(name=f"faults-{kind}", kind=spec["kinds"][kind], url=url,
                                             cluster=cluster).pk for kind, url in spec["urls"].items()}
print(json.dumps({"cluster": cluster.pk, "stores": stores}))
"""


def sources_start(dep: FaultRun, *, every_s: float = 1.0) -> Sources:
    """A topic, four stores registered in the dashboard, and the known writer saving to them."""
    from reference_job.producer import ensure_topic

    ports = dep.stack.ports
    bootstrap = f"{LOOPBACK}:{ports.kafka}"
    topic = "faults"
    ensure_topic(bootstrap, topic, 2)
    (dep.run_dir / "files").mkdir(exist_ok=True)
    urls = {
        "hbase": f"hbase://{LOOPBACK}:{ports.hbase}/offsets",
        "zookeeper": f"zk://{LOOPBACK}:{ports.zookeeper}",
        "kafka": f"kafka://{bootstrap}",
        "file": f"file://{dep.run_dir / 'files'}",
    }
    kinds = {"hbase": "hbase", "zookeeper": "zookeeper", "kafka": "kafka", "file": "file"}
    created = json.loads(dep.shell_lines(SETUP, json.dumps(
        {"bootstrap": bootstrap, "urls": urls, "kinds": kinds})).strip().splitlines()[-1])
    sources = Sources(topic, "etl", created["cluster"], created["stores"], urls, dep.run_dir / "ledger.jsonl")
    argv = [sys.executable, "-m", "devstack.known_writer", "--ledger", str(sources.ledger), "--topic", topic,
            "--group", sources.group, "--partitions", "2", "--bootstrap", bootstrap, "--every", str(every_s),
            "--timeout", "2"]
    for kind, url in urls.items():
        argv += ["--store", f"{kind}={url}"]
    sources.writer = subprocess.Popen(argv, cwd=Path(__file__).resolve().parent.parent,
                                      stdout=(dep.run_dir / "logs" / "writer.log").open("ab"), stderr=subprocess.STDOUT)
    return sources


class Sampler(threading.Thread):
    """Every `every_s`: the collectors API as people see it, and each source's last poll from
    PostgreSQL directly (so polls are counted while the web is down)."""

    def __init__(self, dep: FaultRun, every_s: float = 0.25):
        super().__init__(daemon=True, name="fault-sampler")
        self.dep, self.every_s = dep, every_s
        self.api: list[tuple[float, int, dict | str]] = []
        self.polls: dict[str, set[datetime]] = {}
        self.poll_seen_at: list[tuple[float, str, datetime]] = []
        self.statuses: list[tuple[float, str, int]] = []
        self.stopped = threading.Event()

    def run(self) -> None:
        # The polls are read in a thread of their own: a frozen PostgreSQL may hold a connection
        # attempt longer than its timeout, and the API's answers must still be sampled meanwhile.
        reader = threading.Thread(target=self._polls_loop, daemon=True, name="fault-sampler-db")
        reader.start()
        while not self.stopped.is_set():
            t = time.monotonic()
            status, body = self.dep.get("/api/v1/collectors", timeout_s=2.0)
            self.api.append((time.monotonic(), status, body))
            self.statuses.append((t, "/api/v1/collectors", status))
            status, _ = self.dep.get("/api/v1/pipelines", timeout_s=2.0)
            self.statuses.append((t, "/api/v1/pipelines", status))
            self.stopped.wait(max(0.0, self.every_s - (time.monotonic() - t)))

    def _polls_loop(self) -> None:
        while not self.stopped.is_set():
            t = time.monotonic()
            self._read_polls(t)
            self.stopped.wait(max(0.0, self.every_s - (time.monotonic() - t)))

    def _read_polls(self, t: float) -> None:
        import psycopg

        try:
            with psycopg.connect(self.dep.dep.database_url.replace("postgres://", "postgresql://"), connect_timeout=1,
                                 autocommit=True) as conn:
                rows = conn.execute("SELECT source, last_attempt_at FROM dashboard_sourcehealth "
                                    "WHERE last_attempt_at IS NOT NULL").fetchall()
        except psycopg.Error:
            return
        for source, at in rows:
            if at not in self.polls.setdefault(source, set()):
                self.polls[source].add(at)
                self.poll_seen_at.append((t, source, at))

    def poll_gaps(self, sources: list[str], start: float, end: float) -> list[float]:
        """The seconds between consecutive polls of each source seen in [start, end), from the
        polls' own start times (the database's), not from when the sampler noticed them: over a
        window of a few intervals, counting polls is off by up to one poll per source."""
        gaps = []
        for source in sources:
            ats = sorted(at for t, s, at in self.poll_seen_at if s == source and start <= t < end)
            gaps += [(b - a).total_seconds() for a, b in zip(ats, ats[1:])]
        return gaps


def _states(body) -> dict[str, str]:
    if not isinstance(body, dict):
        return {}
    return {s["source"]: s.get("state", "") for s in body.get("sources", [])}


def shows_fault(component: str, status: int, body, ids: dict[str, str]) -> bool:
    """Whether one answer of the collectors API shows the fault of `component`."""
    if component == "web":
        return status == 0  # nothing answers: every monitor sees it
    if component == "postgres":
        return status == 503 or status == 0
    if status != 200 or not isinstance(body, dict):
        return False
    if component in ("redis", "worker", "beat"):
        part = {"redis": "broker", "worker": "workers", "beat": "beat"}[component]
        return part in body.get("down", [])
    states = _states(body)
    return all(states.get(ids[s]) in ("failing", "stale", "hanging") for s in AFFECTS[component])


def all_healthy(status: int, body, ids: dict[str, str]) -> bool:
    if status != 200 or not isinstance(body, dict) or not body.get("healthy"):
        return False
    states = _states(body)
    return all(states.get(i) == "ok" for i in ids.values())


APP_PROCESSES = ("web", "worker", "beat")


def supervise(run: "FaultRun", row: "Row") -> bool:
    """Start again an app process that exited by itself, as compose's `restart: unless-stopped`
    does, and say so in the row. True if one was restarted."""
    restarted = False
    for name in APP_PROCESSES:
        proc = run.dep.procs.get(name)
        if proc is not None and proc.popen is not None and proc.popen.poll() is not None:
            row.notes.append(f"{name} exited by itself (code {proc.popen.returncode}); restarted as compose's "
                             "restart policy does")
            proc.popen = None
            run.dep.start_process(name)
            restarted = True
    return restarted


def wait_until(predicate, timeout_s: float, every_s: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(every_s)
    return False


def _in_flight(dep: FaultRun, source: str) -> bool:
    """A poll of `source` is running now (its lock is held in Redis)."""
    import redis

    try:
        return bool(redis.Redis.from_url(dep.dep.redis_url, socket_timeout=0.5).exists(f"offsetwatch:poll:{source}"))
    except redis.RedisError:
        return False


def _poll_start_wait(dep: FaultRun, sources: list[str], timeout_s: float) -> bool:
    """Wait until a poll of one of `sources` starts (its lock taken since the last look), at most
    `timeout_s`. A poll already in flight may be about to end: a freeze then lands between two
    polls and is seen only after the next one has hung, which measures the beat's phase, not the
    detection. True if a start was seen."""
    was = {s: _in_flight(dep, s) for s in sources}
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        now = {s: _in_flight(dep, s) for s in sources}
        if any(now[s] and not was[s] for s in sources):
            return True
        was = now
        time.sleep(0.01)
    return False


def apply_fault(run: FaultRun, component: str, fault: str) -> None:
    import os
    import signal

    if component in SERVER_NAMES:
        name = SERVER_NAMES[component]
        pid = run.stack.running_pid(name)
        if fault == "kill":
            os.killpg(pid, signal.SIGKILL)
            wait_for(lambda: run.stack.running_pid(name) is None, 10)
        else:
            os.killpg(pid, signal.SIGSTOP)
        return
    run.dep.kill(component) if fault == "kill" else run.dep.freeze(component)


def restore(run: FaultRun, component: str, fault: str) -> None:
    """The component back: a killed one restarted (and ready), a frozen one thawed."""
    import os
    import signal

    if component in SERVER_NAMES:
        name = SERVER_NAMES[component]
        if fault == "kill":
            comp = next(c for c in run.stack.components() if c.name == name)
            run.stack.start_component(comp, progress=lambda line: None)
        else:
            os.killpg(run.stack.running_pid(name), signal.SIGCONT)
        return
    run.dep.start_process(component) if fault == "kill" else run.dep.thaw(component)


def run_row(dep: FaultRun, sources: Sources, component: str, fault: str, *, hold_s: float,
            settle_s: float | None = None) -> Row:
    """One fault: wait for health, measure the cadence before, apply the fault (while a poll of
    the affected source is in flight where there is one), hold it, restore, measure."""
    interval = dep.poll_interval_s
    settle_s = settle_s if settle_s is not None else 4 * interval
    ids = sources.source_ids()
    row = Row(component, fault)
    supervise(dep, row)
    sampler = Sampler(dep)
    sampler.start()
    try:
        if not wait_until(lambda: bool(sampler.api) and all_healthy(*sampler.api[-1][1:], ids), 60):
            row.notes.append("not healthy before the fault: " + json.dumps(sampler.api[-1][2])[:500])
            return row
        before_start = time.monotonic()
        time.sleep(2 * interval)
        before_end = time.monotonic()
        if component in SERVER_NAMES:  # really during: a poll of the source has just entered its call
            affected = [ids[s] for s in AFFECTS[component]]
            _poll_start_wait(dep, affected, 3 * interval)
        t0 = time.monotonic()
        apply_fault(dep, component, fault)
        detected = wait_until(lambda: shows_fault(component, *sampler.api[-1][1:], ids) and sampler.api[-1][0] > t0,
                              hold_s)
        if detected:
            first = next(t for t, status, body in sampler.api if t > t0 and shows_fault(component, status, body, ids))
            row.detect_s = round(first - t0, 2)
        if time.monotonic() < t0 + hold_s:
            time.sleep(t0 + hold_s - time.monotonic())
        restore_started = time.monotonic()
        restore(dep, component, fault)
        if component in ("broker", "hbase") and fault == "kill":
            _refill_memory_server(dep, sources, component)
        t1 = time.monotonic()  # the component is back (a killed one restarted and ready)
        if wait_until(lambda: not supervise(dep, row) and sampler.api[-1][0] > t1
                      and all_healthy(*sampler.api[-1][1:], ids), 60):
            first = next(t for t, status, body in sampler.api if t > t1 and all_healthy(status, body, ids))
            row.recover_s = round(first - t1, 2)
        else:
            row.notes.append("not healthy 60 s after the restore: " + json.dumps(sampler.api[-1][2])[:800])
        untouched = [i for kind, i in ids.items()
                     if "all" not in AFFECTS[component] and kind not in AFFECTS[component]]
        if untouched:
            # The mean time between two polls of the untouched sources, during the fault against
            # before it (a source not polled twice in the fault's window counts as one gap as
            # long as the window: a starved source is not averaged away).
            before = sampler.poll_gaps(untouched, before_start, before_end)
            during = sampler.poll_gaps(untouched, t0, restore_started)
            starved = [s for s in untouched if len(sampler.poll_gaps([s], t0, restore_started)) == 0]
            during += [restore_started - t0] * len(starved)
            if before and during:
                row.cadence = round((sum(during) / len(during)) / (sum(before) / len(before)), 2)
            else:
                row.notes.append(f"untouched sources: {len(before)} gaps between polls before, {len(during)} during")
            if starved:
                row.notes.append(f"untouched sources not polled twice during the fault: {', '.join(starved)}")
        time.sleep(settle_s)
    finally:
        sampler.stopped.set()
        sampler.join(5)
    row.http_5xx = sum(1 for _, _, status in sampler.statuses if status >= 500 and status != 503)
    row.http_500 = sum(1 for _, _, status in sampler.statuses if status == 500)
    row.lost, row.duplicated, notes = batches_compared(dep, sources)
    row.notes += notes
    return row


def _refill_memory_server(dep: FaultRun, sources: Sources, component: str) -> None:
    """Tansu and the HBase stand-in keep nothing over a restart (a real broker and HBase do): put
    the topic back; the writer goes on saving to the store."""
    if component == "broker":
        from reference_job.producer import ensure_topic

        ensure_topic(f"{LOOPBACK}:{dep.stack.ports.kafka}", sources.topic, 2)


COMPARE = """
import json, sys
from dashboard.models import Pipeline
spec = json.loads(sys.stdin.read())
out = {}
for kind, pk in spec["stores"].items():
    p = Pipeline.objects.filter(store_id=pk, topic=spec["topic"], group=spec["group"]).first()
    out[kind] = [] if p is None else [[ms, o] for ms, o in p.batches.order_by("batch_time_ms").values_list("batch_time_ms", "offsets")]
print(json.dumps(out))
"""


def batches_compared(dep: FaultRun, sources: Sources) -> tuple[int, int, list[str]]:
    """(lost, duplicated, notes): a batch the store still holds (HBase: every row; the others:
    the current offsets) that is not in the database, or is there twice (the same offsets
    recorded again after a different state, for the sample stores; the same row for HBase)."""
    import os
    import signal

    from streamoffsets.stores.registry import open_store

    # The writer pauses so the collectors can catch up with what the stores hold.
    os.kill(sources.writer.pid, signal.SIGSTOP)
    try:
        time.sleep(2 * dep.poll_interval_s)
        return _compare(dep, sources, open_store)
    finally:
        os.kill(sources.writer.pid, signal.SIGCONT)


def _compare(dep: FaultRun, sources: Sources, open_store) -> tuple[int, int, list[str]]:
    recorded = json.loads(dep.shell_lines(COMPARE, json.dumps(
        {"stores": sources.stores, "topic": sources.topic, "group": sources.group})).strip().splitlines()[-1])
    lost = duplicated = 0
    notes = []
    for kind, url in sources.urls.items():
        rows = recorded[kind]
        offsets = [json.dumps(o, sort_keys=True) for _, o in rows]
        if kind == "hbase":
            from streamoffsets.errors import OffsetStoreError

            with open_store(url, timeout_s=5) as store:
                try:
                    held = {b.batch_time_ms for b in store.history(sources.topic, sources.group).batches}
                except OffsetStoreError as exc:  # the stand-in lost its table in a kill: it holds nothing
                    held = set()
                    notes.append(f"hbase: {exc}")
            missing = held - {ms for ms, _ in rows}
            dups = len(offsets) - len(set(offsets))
        else:
            with open_store(url, timeout_s=5) as store:
                current = store.load_latest(sources.topic, sources.group)
            last = rows[-1][1] if rows else None
            wanted = {str(p): o for p, o in current.offsets.items()} if current else None
            missing = set() if wanted is None or last == wanted else {current.batch_time_ms}
            if missing:
                notes.append(f"{kind}: the store holds {wanted} (batch time {current.batch_time_ms}), the database's "
                             f"newest is {last} (batch time {rows[-1][0] if rows else None})")
            dups = sum(1 for a, b in zip(offsets, offsets[1:]) if a == b)
        if missing:
            notes.append(f"{kind}: {len(missing)} batch(es) the store holds are not in the database")
        if dups:
            notes.append(f"{kind}: {dups} batch(es) recorded twice")
        lost += len(missing)
        duplicated += dups
    return lost, duplicated, notes


def format_table(rows: list[Row], interval_s: float) -> str:
    lines = [f"poll interval {interval_s:g} s; detect/recover in seconds (and poll intervals); cadence = the untouched "
             "sources' poll interval during the fault / before it",
             "| component | fault | detect | recover | lost | duplicated | cadence | 5xx (500) | notes |",
             "|---|---|---|---|---|---|---|---|---|"]

    def secs(value):
        return "-" if value is None else f"{value:.1f} s ({value / interval_s:.1f})"

    for r in rows:
        cadence = "n/a" if r.cadence is None else f"{r.cadence:.2f}x"
        lines.append(f"| {r.component} | {r.fault} | {secs(r.detect_s)} | {secs(r.recover_s)} | {r.lost} | "
                     f"{r.duplicated} | {cadence} | {r.http_5xx} ({r.http_500}) | {'; '.join(r.notes)[:300]} |")
    return "\n".join(lines)
