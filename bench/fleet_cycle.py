"""A whole fleet's collection cycle on real `celery worker` processes: 100,000 partitions by default.
Over 400 lines because building the fleet on three kinds of server and measuring its cycles are
one benchmark that reads top to bottom.

The fleet (issue #16): T topics of P partitions spread over K Kafka-protocol brokers (Tansu,
one dashboard cluster each), G consumer pipelines per topic (T x G pipelines, T x G x P
positions), each pipeline's offsets in one of three kinds of store, by the group's index
(`--mix`, default kafka,kafka,hbase,hbase,zk: 40 % Kafka groups, 40 % HBase, 20 % ZooKeeper):
- Kafka groups: one `kafka://` store per broker (it reads every group of its broker); the
  offsets are committed in Tansu;
- HBase: `--hbase-stores` tables per cluster on the Thrift stand-in, one row per batch; before
  each cycle every HBase pipeline writes a new batch (the jobs run), outside the timing;
- ZooKeeper: `--zk-stores` chroots per cluster on one ZooKeeper, one znode per partition.
Default: 1,000 topics x 20 partitions on 2 brokers, 5 groups per topic: 5,000 pipelines and
100,000 positions; 2 clusters + 2 Kafka + 4 HBase + 4 ZooKeeper stores = 12 sources, where each
cluster of 50,000 partitions is polled in shards of its topics (OFFSETWATCH_CLUSTER_SHARD_PARTITIONS,
20,000 by default: 3 shards each), so 16 sources once the first poll has counted the partitions.

Each broker sits behind a relay that counts the Kafka requests by API (bench/kafka_counter.py;
the broker advertises the relay's port). The bench runs a Redis of its own (the Celery broker
and the locks), so its command count is the cycle's alone.

For each worker count (`--workers 1,2,3,4`; `--concurrency 1` each, so a process is the unit
of scale, as deployed with one worker per core): a warm-up cycle (discovery, connections; one
more when it split a cluster in shards), then `--cycles` measured cycles of beat's fan-out (`collect_all`), each ending when every
source recorded a poll started after it. Before each cycle, the bare client calls are timed in
this process: for each store the same read the poll does (`read_store` with the poll's plan),
for each cluster `read_watermarks`; nothing recorded or evaluated. Per cycle: wall time, the
bare calls' sum, the sum of the polls' own durations (SourceHealth), Kafka requests by API,
PostgreSQL transactions, rows written and bytes added, Redis commands, and each worker
process's peak RSS (VmHWM of the pool process).

Run: .venv/bin/python bench/fleet_cycle.py [--topics 1000 --partitions 20 --groups 5 --workers 1,2,3,4 --cycles 2]
     (10,000 partitions: --topics 100)
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from benchdb import celery_workers_start, celery_workers_stop, start_components, stop_components  # noqa: E402

# Its own database (dropped and created): OFFSETWATCH_BENCH_DB names another, so two runs on one server do not collide.
DB = os.environ.get("OFFSETWATCH_BENCH_DB", "offsetwatch_bench_fleet")


def psql(sql: str, db: str = "postgres", check: bool = True) -> str:
    out = subprocess.run(["psql", "-qtA", "-h", "127.0.0.1", "-U", "postgres", "-d", db, "-c", sql],
                         check=check, capture_output=True, text=True)
    return out.stdout.strip()


class Procs:
    """Processes this bench started (brokers, relays, Redis), stopped by their own pids."""

    def __init__(self, work: Path):
        self.work, self.procs = work, []

    def start(self, name: str, argv: list[str]) -> subprocess.Popen:
        log = open(self.work / f"{name}.log", "w")
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, cwd=self.work)
        self.procs.append(proc)
        return proc

    def stop(self) -> None:
        for proc in reversed(self.procs):
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()


def wait_port(port: int, timeout_s: float = 20.0) -> None:
    from devstack.components import port_is_open

    deadline = time.monotonic() + timeout_s
    while not port_is_open(port):
        if time.monotonic() > deadline:
            raise RuntimeError(f"nothing listens on {port} after {timeout_s:.0f} s")
        time.sleep(0.05)


def start_brokers(procs: Procs, count: int) -> list[tuple[str, Path]]:
    """`count` Tansu brokers, each behind a counting relay; [(bootstrap, stats file)]."""
    from devstack.components import free_port, tansu_binary

    brokers = []
    for i in range(count):
        port, relay = free_port(), free_port()
        procs.start(f"tansu-{i}", [str(tansu_binary()), "broker", "--listener-url", f"tcp://127.0.0.1:{port}",
                                   "--advertised-listener-url", f"tcp://127.0.0.1:{relay}",
                                   "--storage-engine", "memory://tansu/"])
        stats = procs.work / f"kafka-requests-{i}.json"
        procs.start(f"relay-{i}", [sys.executable, str(ROOT / "bench" / "kafka_counter.py"), str(relay), str(port),
                                   str(stats)])
        wait_port(port)
        wait_port(relay)
        brokers.append((f"127.0.0.1:{relay}", stats))
    return brokers


def kafka_requests(brokers) -> dict[str, int]:
    from kafka_counter import API_NAMES

    total: dict[str, int] = {}
    for _, stats in brokers:
        for key, n in json.loads(stats.read_text()).items():
            name = API_NAMES.get(int(key), f"api{key}")
            total[name] = total.get(name, 0) + n
    return total


def build_fleet(args, brokers, hbase_port: int, zk_port: int) -> dict:
    """Topics, committed offsets, HBase rows and znodes; the dashboard's clusters and stores.
    Returns {store name: [(topic, group)]} for the HBase stores (their jobs write every cycle)."""
    import happybase
    from benchdb import create_topics
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient
    from kazoo.client import KazooClient

    from dashboard.monitoring.services import cluster_get_or_create, store_get_or_create
    from streamoffsets.stores.hbase import HBaseOffsetStore

    mix = args.mix.split(",")
    assert len(mix) == args.groups and set(mix) <= {"kafka", "hbase", "zk"}, "--mix names one kind per group"
    hbase_pipelines: dict[str, list[tuple[str, str]]] = {}
    now_ms = int(time.time() * 1000)
    zk = KazooClient(hosts=f"127.0.0.1:{zk_port}", timeout=30)
    zk.start(30)
    hb = happybase.Connection("127.0.0.1", hbase_port, timeout=60000)
    for c, (bootstrap, _) in enumerate(brokers):
        t0 = time.perf_counter()
        topics = [f"fleet-{c}-{i:04d}" for i in range(c, args.topics, len(brokers))]
        create_topics(bootstrap, topics, args.partitions)
        cluster = cluster_get_or_create(name=f"cluster-{c}", bootstrap_servers=bootstrap)
        store_get_or_create(name=f"groups-{c}", kind="kafka", url=f"kafka://{bootstrap}", cluster=cluster)
        hstores = [f"hbase-{c}-{h}" for h in range(args.hbase_stores)]
        zstores = [f"zk-{c}-{z}" for z in range(args.zk_stores)]
        for name in hstores:
            url = f"hbase://127.0.0.1:{hbase_port}/{name.replace('-', '_')}"
            HBaseOffsetStore.from_url(url).ensure_table()
            store_get_or_create(name=name, kind="hbase", url=url, cluster=cluster)
            hbase_pipelines[name] = []
        for name in zstores:
            zk.ensure_path(f"/{name}/consumers")
            store_get_or_create(name=name, kind="zookeeper", url=f"zk://127.0.0.1:{zk_port}/{name}", cluster=cluster)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        commits, znodes, hbase_count, zk_count = [], [], 0, 0
        for t, topic in enumerate(topics):
            for g, kind in enumerate(mix):
                group = f"{topic}-job{g}"
                if kind == "kafka":
                    tps = [TopicPartition(topic, p, 0) for p in range(args.partitions)]
                    commits.append(admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, tps)])[group])
                    if len(commits) >= 200:
                        [f.result(60) for f in commits]
                        commits = []
                elif kind == "hbase":
                    store = hstores[(hbase_count := hbase_count + 1) % len(hstores)]
                    hbase_pipelines[store].append((topic, group))
                else:
                    store = zstores[(zk_count := zk_count + 1) % len(zstores)]
                    base = f"/{store}/consumers/{group}/offsets/{topic}"
                    zk.ensure_path(base)
                    znodes += [zk.create_async(f"{base}/{p}", b"0") for p in range(args.partitions)]
        [f.result(60) for f in commits]
        [r.get(60) for r in znodes]
        for name in hstores:
            write_hbase_batches(hb, name, hbase_pipelines[name], args.partitions, now_ms - 60_000)
        print(f"  cluster-{c}: {len(topics)} topics, stores {', '.join([f'groups-{c}'] + hstores + zstores)} "
              f"({time.perf_counter() - t0:.0f} s)", flush=True)
    zk.stop()
    zk.close()
    hb.close()
    return hbase_pipelines


def write_hbase_batches(hb, store: str, pipelines: list[tuple[str, str]], partitions: int, batch_ms: int) -> None:
    """One batch row per pipeline, in mutateRows of 1,000 rows (the jobs' writes of one cycle)."""
    from streamoffsets.stores.hbase import row_key

    cells = {f"offsets:{p}".encode(): b"0" for p in range(partitions)}
    with hb.table(store.replace("-", "_")).batch(batch_size=1000) as batch:
        for topic, group in pipelines:
            batch.put(row_key(topic, group, batch_ms).encode(), cells)


def peak_rss_mb(proc: subprocess.Popen) -> float:
    """The peak RSS (VmHWM) of a worker's pool process (its child, which runs the tasks); of the
    main process when it has none."""
    pids = [proc.pid]
    try:
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        pids = [int(p) for p in children] or pids
    except OSError:
        pass
    peak = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    peak = max(peak, int(line.split()[1]))
        except OSError:
            pass
    return peak / 1024


def wait_for_workers(app, count: int, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if len(app.control.ping(timeout=1.0)) >= count:
            return
    raise RuntimeError(f"{count} workers did not answer a ping within {timeout_s:.0f} s")


def bare_calls(stores, clusters) -> float:
    """The reads one cycle makes, done directly in this process, one source after the other."""
    from django.conf import settings
    from django.utils import timezone

    from dashboard.models import Store
    from dashboard.monitoring.read_plan import store_read_plan
    from dashboard.monitoring.selectors import cluster_topics
    from streamoffsets.stores.reading import read_store, read_watermarks

    # Read afresh: the plan depends on the store's row (when it was last listed for new pipelines).
    plans = [(store.url, store_read_plan(store=Store.objects.get(pk=store.pk), now=timezone.now())) for store in stores]
    topics = [(cluster.bootstrap_servers, cluster_topics(cluster=cluster)) for cluster in clusters]
    took = []
    for url, plan in plans:
        t = time.perf_counter()
        read_store(url, plan, timeout_s=settings.IO_TIMEOUT_S, ping_timeout_s=settings.POLL_PROBE_TIMEOUT_S)
        took.append((url.split(":")[0], time.perf_counter() - t))
    for bootstrap, names in topics:
        t = time.perf_counter()
        read_watermarks(bootstrap, names, timeout_s=settings.IO_TIMEOUT_S, chunk_size=settings.KAFKA_LIST_OFFSETS_CHUNK,
                        ping_timeout_s=settings.POLL_PROBE_TIMEOUT_S)
        took.append(("watermarks", time.perf_counter() - t))
    print("    bare (s): " + ", ".join(f"{k} {x:.2f}" for k, x in took), flush=True)
    return sum(x for _, x in took)


def database_counters() -> dict[str, int]:
    row = psql(f"SELECT xact_commit, tup_inserted, tup_updated, tup_deleted, "
               f"(SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
               f"WHERE n.nspname = 'public' AND c.relkind = 'r')::bigint "
               f"FROM pg_stat_database WHERE datname = '{DB}'", db=DB)
    keys = ("transactions", "inserted", "updated", "deleted", "bytes")
    return dict(zip(keys, (int(x) for x in row.split("|"))))


def redis_commands(client) -> int:
    return int(client.info("stats")["total_commands_processed"])


BENCH_QUERIES = 0


def current_sources() -> list[str]:
    """The sources the fan-out sends now: every store, every cluster or each of its shards (as
    the workers' fan-out last set the shard counts, from what the polls read)."""
    from dashboard.monitoring.health import sources_polled

    global BENCH_QUERIES
    BENCH_QUERIES += 2  # the stores, the clusters
    return sources_polled()


def one_cycle(timeout_s: float = 900.0) -> tuple[float, float, list[str]]:
    """Beat's fan-out, repeated every poll interval as beat does until every source recorded a
    poll started after the first: (that wall time, the sum of those polls' own durations, the
    sources). A cycle longer than the interval is then measured as deployed: the sources polled
    late. The sources are read again at each check: the fan-out splits a large cluster in
    shards once its first poll has counted its partitions (the whole cluster's row then goes)."""
    from django.conf import settings
    from django.db.models import Sum
    from django.utils import timezone

    from collectors.tasks import collect_all
    from dashboard.models import SourceHealth

    started = timezone.now()
    t0 = time.perf_counter()
    collect_all.delay()
    deadline, tick = t0 + timeout_s, t0
    global BENCH_QUERIES
    while time.perf_counter() < deadline:
        BENCH_QUERIES += 1  # the count() below: this process's own transactions, not the cycle's
        if time.perf_counter() - tick >= settings.POLL_INTERVAL_S:
            # Beat's next tick, as deployed: sources whose poll expired unqueued are sent again
            # (the ones still queued or polling are skipped by their Redis mark).
            tick = time.perf_counter()
            collect_all.delay()
        sources = current_sources()
        done = SourceHealth.objects.filter(source__in=sources, last_attempt_at__gte=started)
        if done.count() >= len(sources):
            wall = time.perf_counter() - t0
            failed = list(done.filter(consecutive_failures__gt=0).values_list("label", "last_error"))
            if failed:  # shown, and the cycle counted as it ran (a failed poll is a poll)
                print(f"    FAILED polls: {failed}", flush=True)
            by_kind: dict[str, list[float]] = {}
            for label, ms in done.values_list("label", "last_duration_ms"):
                kind = ("cluster shard" if " part " in label else "cluster") if label.startswith("cluster") else (
                    label.split()[1].rsplit("-", 2)[0])
                by_kind.setdefault(kind, []).append(ms / 1000)
            print("    polls (s): " + "; ".join(f"{k} {', '.join(f'{x:.1f}' for x in v)}" for k, v in sorted(by_kind.items())),
                  flush=True)
            return wall, done.aggregate(s=Sum("last_duration_ms"))["s"] / 1000, sources
        time.sleep(0.05)
    raise RuntimeError(f"the cycle did not finish within {timeout_s:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=20)
    parser.add_argument("--groups", type=int, default=5, help="pipelines per topic")
    parser.add_argument("--mix", default="kafka,kafka,hbase,hbase,zk", help="each group index's store kind")
    parser.add_argument("--clusters", type=int, default=2, help="Tansu brokers (a cluster and a Kafka store each)")
    parser.add_argument("--hbase-stores", type=int, default=2, help="HBase stores per cluster")
    parser.add_argument("--zk-stores", type=int, default=2, help="ZooKeeper stores per cluster")
    parser.add_argument("--workers", default="1,2,3,4")
    parser.add_argument("--cycles", type=int, default=2)
    args = parser.parse_args()
    import logging

    logging.getLogger("kazoo").setLevel(logging.WARNING)  # a line per session opened and closed
    from devstack.components import free_port

    work = Path(tempfile.mkdtemp(prefix="ow-fleet-"))
    procs = Procs(work)
    stack = start_components("ow-fleet-", ("hbase", "zookeeper"))
    redis_port = free_port()
    procs.start("redis", ["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "",
                          "--appendonly", "no"])
    psql(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
    psql(f"CREATE DATABASE {DB}")
    os.environ["DATABASE_URL"] = f"postgres://postgres:postgres@127.0.0.1:5432/{DB}"
    os.environ["REDIS_URL"] = f"redis://127.0.0.1:{redis_port}/0"
    os.environ["DJANGO_SETTINGS_MODULE"] = "offsetwatch.settings"
    try:
        wait_port(redis_port)
        brokers = start_brokers(procs, args.clusters)
        run(args, brokers, stack, work)
    finally:
        from django.db import connections

        connections.close_all()
        stop_components(stack, ("hbase", "zookeeper"))
        procs.stop()
        psql(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)", check=False)


def run(args, brokers, stack, work: Path) -> None:
    import django

    django.setup()
    import happybase
    import redis
    from django.core.management import call_command
    from django.db import connection

    from dashboard.models import Cluster, Store
    from dashboard.monitoring.shards import cluster_shards_refresh
    from offsetwatch.celery import app

    call_command("migrate", verbosity=0)
    t = time.perf_counter()
    print(f"setup: {args.topics} topics x {args.partitions} partitions on {len(brokers)} brokers, "
          f"{args.groups} pipelines per topic ({args.mix})", flush=True)
    hbase_pipelines = build_fleet(args, brokers, stack.ports.hbase, stack.ports.zookeeper)
    stores = list(Store.objects.order_by("pk"))
    clusters = list(Cluster.objects.order_by("pk"))
    sources = current_sources()
    positions = args.topics * args.groups * args.partitions
    print(f"setup done in {time.perf_counter() - t:.0f} s: {args.topics * args.groups:,} pipelines, "
          f"{positions:,} positions, {len(sources)} sources; work dir {work}", flush=True)
    connection.close()
    app.control.purge()
    rclient = redis.Redis.from_url(os.environ["REDIS_URL"])
    hb = happybase.Connection("127.0.0.1", stack.ports.hbase, timeout=60000)
    env = os.environ.copy()
    # A queued poll expires with its mark (OFFSETWATCH_POLL_QUEUED_TTL, 30 s by default): when one
    # cycle's work exceeds that on the workers there are (one process at 100,000 partitions), the
    # sources sent last are dropped every cycle and never polled. The bench measures the cycle's
    # work, so it keeps them queued (the starvation itself is reported: docs/scaling.md).
    env.setdefault("OFFSETWATCH_POLL_QUEUED_TTL", "600")
    # Likewise the time limit (soft 30 s by default): a 2,500-pipeline cluster poll took 15-28 s on
    # the shared machine and was cut once; the bench measures it whole.
    env.setdefault("OFFSETWATCH_POLL_TIME_LIMIT", "135")
    rows = []
    for count in [int(n) for n in args.workers.split(",")]:
        workers = celery_workers_start(count, work, "fleet", env)
        try:
            wait_for_workers(app, count)
            # Warm-up cycles until the sources stay the same: the first poll of a large cluster is
            # whole (no partition count yet), the next fan-out splits it in shards.
            for _ in range(3):
                before = current_sources()
                warm, _, sources = one_cycle()
                print(f"{count} process(es): warm-up cycle {warm:.1f} s ({len(sources)} sources)", flush=True)
                cluster_shards_refresh()  # what the next fan-out does first: split a cluster just counted
                if current_sources() == before:
                    break
            for _ in range(args.cycles):
                batch_ms = int(time.time() * 1000)
                for name, pipelines in hbase_pipelines.items():  # the HBase jobs wrote their next batch
                    write_hbase_batches(hb, name, pipelines, args.partitions, batch_ms)
                time.sleep(1)  # distinct sample times
                bare = min(bare_calls(stores, clusters), bare_calls(stores, clusters))
                connection.close()
                db0, k0, r0 = database_counters(), kafka_requests(brokers), redis_commands(rclient)
                own = BENCH_QUERIES
                wall, polls, sources = one_cycle()
                own = BENCH_QUERIES - own + 4  # + the cycle's end: failed, by kind, sum, the counters' own
                time.sleep(1.5)  # the relays write their counts every 0.2 s; PostgreSQL its statistics every 1 s
                db1, k1, r1 = database_counters(), kafka_requests(brokers), redis_commands(rclient)
                connection.close()
                requests = {api: k1.get(api, 0) - k0.get(api, 0) for api in k1 if k1.get(api, 0) - k0.get(api, 0)}
                row = dict(workers=count, wall=wall, bare=bare, polls=polls, requests=requests,
                           db={k: db1[k] - db0[k] - (own if k == "transactions" else 0) for k in db0},
                           redis=r1 - r0 - 2)
                rows.append(row)
                print(f"  cycle {wall:.2f} s wall; bare calls {bare:.2f} s; polls' own time {polls:.2f} s "
                      f"(ratio {polls / bare:.2f}x); Kafka requests {sum(requests.values())} {requests}; "
                      f"db {row['db']}; Redis commands {row['redis']}", flush=True)
            rss = [peak_rss_mb(w) for w in workers]
            for row in rows:
                if row["workers"] == count:
                    row["rss"] = rss
            print(f"  peak RSS per worker process: {', '.join(f'{r:.0f}' for r in rss)} MB", flush=True)
        finally:
            celery_workers_stop(workers, 120)
    hb.close()
    print(f"\n{positions:,} positions, {args.topics * args.groups:,} pipelines, {len(sources)} sources; "
          f"{os.cpu_count()} cores (shared)")
    print("| processes | cycle wall (median) | speed-up | bare calls (sum) | polls' own time | polls / bare "
          "| wall / (bare / processes) | Kafka requests | DB transactions | rows written | MB added | Redis commands "
          "| peak RSS per process |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    first = min(r["workers"] for r in rows)
    base = statistics.median(r["wall"] for r in rows if r["workers"] == first)
    for count in sorted({r["workers"] for r in rows}):
        mine = [r for r in rows if r["workers"] == count]
        wall = statistics.median(r["wall"] for r in mine)
        bare = statistics.median(r["bare"] for r in mine)
        polls = statistics.median(r["polls"] for r in mine)
        last = mine[-1]
        written = last["db"]["inserted"] + last["db"]["updated"] + last["db"]["deleted"]
        walls = ", ".join(f"{r['wall']:.2f}" for r in mine)
        print(f"| {count} | {wall:.2f} s ({walls}) | "
              f"{base / wall:.2f}x | "
              f"{bare:.2f} s | {polls:.2f} s | {polls / bare:.2f}x | {wall / (bare / count):.2f}x | "
              f"{sum(last['requests'].values())} | {last['db']['transactions']} | {written:,} | "
              f"{last['db']['bytes'] / 1e6:.1f} | {last['redis']} | {max(last['rss']):.0f} MB |")
    print("\nKafka requests of the last cycle by API: " + json.dumps(rows[-1]["requests"]))


if __name__ == "__main__":
    main()
