"""Bytes per stored offset value in PostgreSQL, the dashboard's page queries on that history, the
prune's partition work, and the write cost of a cycle at 100,000 partitions.

1. History: 10 s samples for --pipelines x --partitions (one topic each) for --minutes, written
   with the collectors' packing and COPY, in two data sets: "realistic" (a topic's partitions
   balanced within 3 %, committed offsets a few hundred behind the high watermark, lows a week of
   traffic behind) and "random" (every offset random in 10^6..10^9: the adversarial case).
   Each cycle stores 3 values per partition (low, high, committed); bytes are heap + indexes +
   TOAST of every partition. Rows are independent, so bytes per value hold at any length and
   resolution: the retention policy keeps 8,640 + 6 x 1,440 + 23 x 24 = 17,832 rows per key
   (1 day raw, 6 more per minute, 23 more per hour), which the totals extrapolate to.
2. Prune: the same history copied to a day 1 day old (a finished raw day: its index rebuilt once),
   3 days old (thinned to per minute), 10 days old (to hourly) and 40 days old (dropped); one
   history_prune timed.
3. Write cost at 100,000 partitions: 5,000 pipelines x 20 partitions and 1,000 topics x 100
   partitions; per cycle, the packing of every array and the COPY of both tables, over --cycles.

Run: .venv/bin/python bench/storage.py [--minutes 60] (needs PostgreSQL on 127.0.0.1:5432)
"""
from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import sys
import time
import timeit
from array import array
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from benchdb import fresh_django_database  # noqa: E402

DB = "offsetwatch_bench_storage2_x"
KEPT_ROWS = 8640 + 6 * 1440 + 23 * 24  # rows per key with the retention policy


def topic_offsets(rng: random.Random, data: str, partitions: int) -> list[int]:
    if data == "random":
        return [rng.randint(10**6, 10**9) for _ in range(partitions)]
    base = rng.randint(10**7, 5 * 10**9)
    return [int(base * rng.uniform(0.97, 1.03)) for _ in range(partitions)]


def cycle_rows(rng, data, at, cluster, pipelines, highs, rates, ids):
    from dashboard.models import LagSample, WatermarkSample
    from offsetwatch.lib.packing import pack

    wm, lag = [], []
    for p in pipelines:
        if data == "random":
            h = highs[p.pk] = [rng.randint(10**6, 10**9) for _ in highs[p.pk]]
            committed, lows = [rng.randint(10**6, 10**9) for _ in h], [rng.randint(10**6, 10**9) for _ in h]
        else:
            h = highs[p.pk] = [x + int(r * rng.uniform(0.9, 1.1)) for x, r in zip(highs[p.pk], rates[p.pk])]
            committed = [x - rng.randint(0, 500) for x in h]
            lows = [x - r * 60480 for x, r in zip(h, rates[p.pk])]  # a week of traffic behind
        wm.append(WatermarkSample(cluster=cluster, topic=p.topic, sampled_at=at, partitions=ids,
                                  lows=pack(lows), highs=pack(h)))
        lag.append(LagSample(pipeline=p, sampled_at=at, total_lag=sum(h) - sum(committed), partitions=ids,
                             committed=pack(committed), last_batch_ms=int(at.timestamp() * 1000)))
    return wm, lag


def table_bytes(cur, table: str) -> tuple[int, int]:
    """(heap + TOAST, indexes) of every partition."""
    cur.execute("SELECT coalesce(sum(pg_table_size(relid)), 0), coalesce(sum(pg_indexes_size(relid)), 0) "
                "FROM pg_partition_tree(%s::regclass)", [table])
    heap, index = cur.fetchone()
    return int(heap), int(index)


def history(args, data: str) -> None:
    fresh_django_database(DB + data)
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from dashboard.models import Pipeline, Store, WatermarkSample
    from dashboard.monitoring import sample_partitions
    from dashboard.monitoring.overview import overview_rows
    from dashboard.monitoring.pruning import history_prune
    from dashboard.monitoring.selectors import pipeline_lag_series
    from dashboard.monitoring.services import cluster_get_or_create
    from offsetwatch.lib.packing import pack_partitions
    from offsetwatch.lib.pgcopy import copy_insert

    cluster = cluster_get_or_create(name="bench", bootstrap_servers="b:9092")
    store = Store.objects.create(name="bench", kind="hbase", url="hbase://h:9090/t", cluster=cluster)
    pipelines = Pipeline.objects.bulk_create(
        [Pipeline(store=store, topic=f"topic-{i:04d}", group="etl") for i in range(args.pipelines)])
    rng = random.Random(1)
    ids = pack_partitions(list(range(args.partitions)))
    highs = {p.pk: topic_offsets(rng, data, args.partitions) for p in pipelines}
    rates = {p.pk: [rng.randint(100, 10_000) for _ in range(args.partitions)] for p in pipelines}  # per 10 s
    cycles = args.minutes * 6
    now = datetime.now(timezone.utc)
    start = now - timedelta(minutes=args.minutes)
    sample_partitions.partitions_ensure({sample_partitions.day_of(start), sample_partitions.day_of(now)})
    t0 = time.perf_counter()
    for c in range(cycles):
        wm, lag = cycle_rows(rng, data, start + timedelta(seconds=10 * c), cluster, pipelines, highs, rates, ids)
        copy_insert(WatermarkSample, wm)
        copy_insert(type(lag[0]), lag)
    write_s = time.perf_counter() - t0
    tables = ("dashboard_watermarksample", "dashboard_lagsample")
    with connection.cursor() as cur:
        for t in tables:
            cur.execute(f"VACUUM ANALYZE {t}")
        parts = {t: table_bytes(cur, t) for t in tables}
        sizes = {t: sum(parts[t]) for t in tables}
    rows = cycles * args.pipelines
    wm_values, lag_values = rows * args.partitions * 2, rows * args.partitions
    total = sum(sizes.values())
    print(f"[{data}] {args.pipelines} pipelines x {args.partitions} partitions, {cycles} cycles of 10 s "
          f"({args.minutes} min): {2 * rows:,} rows written in {write_s:.1f} s (pack + COPY)")
    print(f"[{data}] bytes per offset value: watermarks {sizes[tables[0]] / wm_values:.2f}, "
          f"lag {sizes[tables[1]] / lag_values:.2f}, both {total / (wm_values + lag_values):.2f} (heap + indexes + TOAST; "
          f"of which indexes {parts[tables[0]][1] / wm_values:.2f} and {parts[tables[1]][1] / lag_values:.2f})")
    per_key_row = total / rows
    print(f"[{data}] with the retention policy ({KEPT_ROWS:,} rows per key): "
          f"{per_key_row * KEPT_ROWS * 10_000 / args.partitions / 1e9:.2f} GB per 10,000 partitions; "
          f"a raw day {per_key_row * 8640 * 10_000 / args.partitions / 1e9:.2f} GB per 10,000 partitions")
    pipeline = pipelines[0]
    for label, fn in [
        ("lag series, 1 h", lambda: pipeline_lag_series(pipeline=pipeline, since=now - timedelta(hours=1))),
        (f"overview ({args.pipelines} pipelines)", lambda: overview_rows()),
        ("evaluation window + 1 h of watermarks", lambda: list(WatermarkSample.objects.filter(
            cluster=cluster, topic=pipeline.topic, sampled_at__gte=now - timedelta(hours=1)))),
    ]:
        times = []
        for _ in range(5):
            with CaptureQueriesContext(connection) as q:
                t = time.perf_counter()
                result = fn()
                times.append((time.perf_counter() - t) * 1000)
        print(f"[{data}] query {label}: median {statistics.median(times):.1f} ms (5 runs), {len(q)} queries, "
              f"{len(result)} rows")
    prune(connection, tables, sample_partitions, history_prune, now, start, data, args.partitions)
    connection.close()
    subprocess.run(["psql", "-q", "-h", "127.0.0.1", "-U", "postgres", "-c",
                    f"DROP DATABASE IF EXISTS {DB + data} WITH (FORCE)"], check=True)


def prune(connection, tables, sample_partitions, history_prune, now, since, data, args_partitions) -> None:
    """The written history copied to days 1, 3, 10 and 40 back, then one prune."""
    shifts = (1, 3, 10, 40)
    span_h = int((now - since).total_seconds() // 3600) + 1
    days = {sample_partitions.day_of(now - timedelta(days=d, hours=h)) for d in shifts for h in range(span_h + 1)}
    sample_partitions.partitions_ensure(days)
    with connection.cursor() as cur:
        for t in tables:
            cur.execute(f"SELECT string_agg(quote_ident(attname), ', ' ORDER BY attnum) FROM pg_attribute "
                        f"WHERE attrelid = '{t}'::regclass AND attnum > 0 AND NOT attisdropped")
            cols = cur.fetchone()[0]
            for d in shifts:
                select = cols.replace('"sampled_at"', f"sampled_at - interval '{d} days'").replace(
                    "sampled_at,", f"sampled_at - interval '{d} days',")
                cur.execute(f"INSERT INTO {t} ({cols}) SELECT {select} FROM {t} WHERE sampled_at >= %s",
                            [since])
            cur.execute(f"VACUUM ANALYZE {t}")
    t = time.perf_counter()
    counts = history_prune(now=now)
    elapsed = time.perf_counter() - t
    done = {k: v for k, v in counts.items() if "Sample" in k and v}
    print(f"[{data}] prune: {elapsed:.2f} s for {done}")
    # Bytes per value by resolution: the thinned days are rebuilt copies and the finished raw day
    # had its index rebuilt (built sorted, fuller than the one today's raw day grows by page splits).
    values_per_row = {"dashboard_watermarksample": 2 * args_partitions, "dashboard_lagsample": args_partitions}
    by_level: dict[str, list[int]] = {}
    with connection.cursor() as cur:
        for t in tables:
            cur.execute(f"VACUUM ANALYZE {t}")
            rebuilt = sample_partitions.partitions_rebuilt(t)
            for name, day, level in sample_partitions.partitions_list(t):
                level = "raw rebuilt" if name in rebuilt else level
                cur.execute(f'SELECT count(*), pg_total_relation_size(%s::regclass) FROM "{name}"', [name])
                rows, size = cur.fetchone()
                if rows:
                    acc = by_level.setdefault(level, [0, 0])
                    acc[0] += rows * values_per_row[t]
                    acc[1] += size
    bpv = {level: size / values for level, (values, size) in by_level.items()}
    def shape(rows: dict[str, int]) -> float:
        return sum(bpv[k] * n for k, n in rows.items()) / sum(rows.values())

    # Rows per key, as the policy keeps them: a raw day (finished, so its index is rebuilt),
    # 6 days per minute, 23 days hourly; and with today's raw day as well (a day is thinned once
    # all of it is past a day), half written on average, whole just before midnight.
    policy = {"raw rebuilt": 8640, "minute": 6 * 1440, "hour": 23 * 24}
    steady = shape(policy)
    unbuilt = shape({**policy, "raw rebuilt": 0, "raw": 8640})
    average = shape({**policy, "raw": 4320, "minute": 5 * 1440 + 720})
    late = shape({**policy, "raw": 8640, "minute": 5 * 1440})
    print(f"[{data}] bytes per value by resolution: " + ", ".join(f"{k} {v:.2f}" for k, v in bpv.items())
          + f"; with the retention policy's shape (8,640 raw rows rebuilt, 8,640 per-minute, 552 hourly rows "
          f"per key) {steady:.2f} (the raw day as written, not rebuilt: {unbuilt:.2f}); with today's raw day "
          f"as well, half written {average:.2f}, whole {late:.2f}")


def write_cost(args) -> None:
    """Pack + COPY of one cycle at 100,000 partitions, both formats' packing for comparison."""
    fresh_django_database(DB + "write")
    from django.db import connection, transaction

    from dashboard.models import LagSample, Pipeline, Store, WatermarkSample
    from dashboard.monitoring import sample_partitions
    from dashboard.monitoring.services import cluster_get_or_create
    from offsetwatch.lib.packing import pack, pack_partitions, unpack
    from offsetwatch.lib.pgcopy import copy_insert

    cluster = cluster_get_or_create(name="bench", bootstrap_servers="b:9092")
    store = Store.objects.create(name="bench", kind="hbase", url="hbase://h:9090/t", cluster=cluster)
    topics = [f"topic-{i:04d}" for i in range(1000)]
    pipelines = Pipeline.objects.bulk_create(
        [Pipeline(store=store, topic=topics[i % 1000], group=f"g{i // 1000}") for i in range(5000)])
    rng = random.Random(2)
    highs = {t: topic_offsets(rng, "realistic", 100) for t in topics}
    ids20 = pack_partitions(list(range(20)))
    per_cycle, pack_ms, old_pack_ms = [], [], []
    now = datetime.now(timezone.utc)
    for c in range(args.cycles):
        at = now + timedelta(seconds=10 * c)
        wm_lists = [([h - 10**6 for h in highs[t]], highs[t]) for t in topics]
        lag_lists = [[h - rng.randint(0, 500) for h in highs[p.topic][:20]] for p in pipelines]
        t0 = time.perf_counter()
        wm_packed = [(pack(lows), pack(hs)) for lows, hs in wm_lists]
        lag_packed = [pack(committed) for committed in lag_lists]
        t1 = time.perf_counter()
        for lows, hs in wm_lists:
            array("q", lows).tobytes(), array("q", hs).tobytes()
        for committed in lag_lists:
            array("q", committed).tobytes()
        old_pack_ms.append((time.perf_counter() - t1) * 1000)
        wm = [WatermarkSample(cluster=cluster, topic=t, sampled_at=at, partitions=b"", lows=lows, highs=hs)
              for t, (lows, hs) in zip(topics, wm_packed)]
        lag = [LagSample(pipeline=p, sampled_at=at, total_lag=0, partitions=ids20, committed=committed,
                         last_batch_ms=0) for p, committed in zip(pipelines, lag_packed)]
        with transaction.atomic():
            t2 = time.perf_counter()
            sample_partitions.partitions_ensure({sample_partitions.day_of(at)})
            copy_insert(WatermarkSample, wm)
            copy_insert(LagSample, lag)
            t3 = time.perf_counter()
        per_cycle.append((t3 - t2) * 1000)
        pack_ms.append((t1 - t0) * 1000)
        highs = {t: [h + rng.randint(100, 10_000) for h in hs] for t, hs in highs.items()}
    print(f"[write] 100,000 partitions (5,000 pipelines x 20, 1,000 topics x 100), {args.cycles} cycles: "
          f"COPY of both tables {min(per_cycle):.0f}-{max(per_cycle):.0f} ms (median {statistics.median(per_cycle):.0f}); "
          f"packing 7,000 arrays {min(pack_ms):.0f}-{max(pack_ms):.0f} ms (raw int64 as before: "
          f"{min(old_pack_ms):.0f}-{max(old_pack_ms):.0f} ms)")
    # The codec alone, against the raw int64 format of before #16.
    values = highs[topics[0]][:20]
    raw = array("q", values).tobytes()
    packed = pack(values)

    def old_unpack(data):
        arr = array("q")
        arr.frombytes(bytes(data))
        return [None if v == -1 else v for v in arr]

    n = 20000
    for label, fn in [("old unpack (raw)", lambda: old_unpack(memoryview(raw))),
                      ("unpack (raw, old rows)", lambda: unpack(memoryview(raw))),
                      ("unpack (compact)", lambda: unpack(memoryview(packed))),
                      ("old pack", lambda: array("q", values).tobytes()), ("pack", lambda: pack(values))]:
        us = min(timeit.repeat(fn, number=n, repeat=3)) / n * 1e6
        print(f"[codec] {label}, 20 values: {us:.2f} us")
    print(f"[codec] 20 realistic offsets: {len(raw)} bytes raw, {len(packed)} packed")
    connection.close()
    subprocess.run(["psql", "-q", "-h", "127.0.0.1", "-U", "postgres", "-c",
                    f"DROP DATABASE IF EXISTS {DB}write WITH (FORCE)"], check=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=int, default=60)
    parser.add_argument("--pipelines", type=int, default=500)
    parser.add_argument("--partitions", type=int, default=20)
    parser.add_argument("--cycles", type=int, default=5)
    parser.add_argument("--only", choices=["realistic", "random", "write"])
    args = parser.parse_args()
    # One database per step: Django is set up once per process, so each step is its own process.
    if args.only == "write":
        write_cost(args)
    elif args.only:
        history(args, args.only)
    else:
        for step in ("realistic", "random", "write"):
            subprocess.run([sys.executable, __file__, "--only", step, "--minutes", str(args.minutes),
                            "--pipelines", str(args.pipelines), "--partitions", str(args.partitions),
                            "--cycles", str(args.cycles)], check=True)


if __name__ == "__main__":
    main()
