"""One hostile viewer against everyone else (issue #12, observation 4), under gunicorn as deployed.

Builds, in its own PostgreSQL database, the history of bench/pages.py (one pipeline with 64
partitions and 30 days of batches, lag and watermark samples as retention keeps them), starts
gunicorn with 3 sync workers (as docker-compose does) on it, and then measures another user
("olivia") polling `GET /api/v1/pipelines/<id>` every 0.1 s:

1. idle: nobody else asks anything;
2. under load: "mallory", a viewer, runs six parallel loops of the heaviest requests there are,
   with no pause and ignoring Retry-After: the 30-day per-partition chart in seconds, chart.json
   and chart.csv of it (plain and with the largest max_points), the PNG of the issue (4000x3000)
   and the largest one allowed, the full per-batch export. Every request moves the 30-day range
   by a random number of minutes, so no two share a cache entry (a few milliseconds would);
3. floor: the same six loops of the lightest request (mallory's own `GET /api/v1/pipelines/<id>`):
   what six busy clients cost on this machine whatever they ask, so a ratio above target under
   load can be told apart from the machine's own limit.

Prints olivia's p50/p95 per phase, the ratio of each to idle (the issue's target: p95 under load
within 2x of idle) and what mallory's requests were answered. No timed assertions.

Run: .venv/bin/python bench/hostile_load.py [--idle 30 --load 60 --floor 60]
(needs PostgreSQL on 127.0.0.1:5432 and Redis at REDIS_URL; uses database offsetwatch_bench_hostile)
"""
from __future__ import annotations

import argparse
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from benchdb import fresh_django_database  # noqa: E402

DB = "offsetwatch_bench_hostile"
PASSWORD = "bench-password-not-secret"
POLL_EVERY_S = 0.1


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_gunicorn(port: int, workers: int, log_path: Path) -> subprocess.Popen:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "offsetwatch.settings", "OFFSETWATCH_ALLOWED_HOSTS": "127.0.0.1"}
    log = open(log_path, "w")
    proc = subprocess.Popen(
        [str(ROOT / ".venv" / "bin" / "gunicorn"), "offsetwatch.wsgi", f"--bind=127.0.0.1:{port}",
         f"--workers={workers}", "--timeout=120"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return proc
        except OSError:
            if proc.poll() is not None:
                raise SystemExit(f"gunicorn exited: see {log_path}") from None
            time.sleep(0.2)
    raise SystemExit(f"gunicorn did not listen within 60 s: see {log_path}")


def hostile_requests(pipeline_id: int) -> list[tuple[str, str, dict]]:
    """(label, path, parameters) of the heaviest requests; ranges are filled in per request."""
    p = f"/pipelines/{pipeline_id}"
    heavy_chart = {"kind": "partitions", "unit": "seconds"}
    return [
        ("lag-chart.json 30 d per partition, seconds", f"{p}/lag-chart.json", heavy_chart),
        ("chart.json 30 d per partition", f"{p}/chart.json", heavy_chart),
        ("chart.json 30 d per partition, max_points=500000", f"{p}/chart.json", {**heavy_chart, "max_points": "500000"}),
        ("chart.csv 30 d per partition", f"{p}/chart.csv", heavy_chart),
        ("chart.png 4000x3000 (the issue's)", f"{p}/chart.png", {**heavy_chart, "width": "4000", "height": "3000"}),
        ("chart.png 2400x1600 (largest allowed)", f"{p}/chart.png", {**heavy_chart, "width": "2400", "height": "1600"}),
        ("batches.csv, all history", f"{p}/batches.csv", {"range": "all"}),
    ]


def shifting_month(rng: random.Random) -> dict:
    """A 30-day (at most) custom range moved by a random number of minutes: a new cache key."""
    until = datetime.now(timezone.utc) - timedelta(minutes=rng.randint(0, 24 * 60), milliseconds=rng.randint(0, 999))
    return {"from": (until - timedelta(days=30) + timedelta(minutes=1)).isoformat(), "to": until.isoformat()}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run_phase(base_url: str, olivia, api_path: str, seconds: float, loops: int, requests) -> tuple[list[float], Counter, dict]:
    """Olivia's latencies (ms) and statuses over `seconds` while `loops` threads of mallory send
    `requests` (None: nobody else)."""
    from devstack.deployment import HttpSession

    stop = threading.Event()
    seen: dict[str, Counter] = defaultdict(Counter)
    took: dict[str, list[float]] = defaultdict(list)
    lock = threading.Lock()

    def hostile(n: int) -> None:
        rng = random.Random(n)
        session = HttpSession(base_url, timeout_s=180)
        session.login("mallory", PASSWORD)
        i = n
        while not stop.is_set():
            label, path, query = requests[i % len(requests)]
            i += 1
            if "range" not in query and path != api_path:
                query = {**query, **shifting_month(rng)}
            t = time.perf_counter()
            status, _, _ = session.get(path, query)
            with lock:
                seen[label][status] += 1
                took[label].append(time.perf_counter() - t)

    threads = [threading.Thread(target=hostile, args=(n,), daemon=True) for n in range(loops)] if requests else []
    for thread in threads:
        thread.start()
    time.sleep(3 if threads else 0)  # the loops logged in and running
    latencies, statuses = [], Counter()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t = time.perf_counter()
        status, _, _ = olivia.get(api_path)
        latencies.append((time.perf_counter() - t) * 1000)
        statuses[status] += 1
        time.sleep(POLL_EVERY_S)
    stop.set()
    for thread in threads:
        thread.join(timeout=200)
    return latencies, statuses, {label: (seen[label], took[label]) for label in seen}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--idle", type=float, default=30.0, help="seconds of the idle phase")
    parser.add_argument("--load", type=float, default=60.0, help="seconds under the hostile loops")
    parser.add_argument("--floor", type=float, default=60.0, help="seconds under loops of the lightest request (0: skip)")
    parser.add_argument("--loops", type=int, default=6)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=64)
    parser.add_argument("--days", type=int, default=30)
    args = parser.parse_args()

    fresh_django_database(DB)
    from pages import build

    from dashboard import heavy
    from dashboard.accounts.roles import VIEWER
    from dashboard.charts import cache as chart_cache
    from devstack.deployment import HttpSession
    from tests.factories import person

    pipeline_id = build(args.partitions, args.days, overview_pipelines=20)
    subprocess.run(["psql", "-q", "-h", "127.0.0.1", "-U", "postgres", "-d", DB, "-c", "VACUUM ANALYZE"], check=True)
    person("mallory", VIEWER, password=PASSWORD)
    person("olivia", VIEWER, password=PASSWORD)
    chart_cache.reset()
    heavy.reset()

    port = free_port()
    log_path = Path(tempfile.mkdtemp(prefix="hostile-load-")) / "gunicorn.log"
    web = start_gunicorn(port, args.workers, log_path)
    base_url = f"http://127.0.0.1:{port}"
    api_path = f"/api/v1/pipelines/{pipeline_id}"
    try:
        olivia = HttpSession(base_url)
        olivia.login("olivia", PASSWORD)
        olivia.get(api_path)  # warm: every worker's first request pays imports and connections
        phases = [("idle", args.idle, None), (f"{args.loops} hostile loops", args.load, hostile_requests(pipeline_id))]
        if args.floor:
            phases.append((f"{args.loops} loops of the lightest request (floor)", args.floor,
                           [("GET /api/v1/pipelines/<id>", api_path, {})]))
        results = []
        for label, seconds, requests in phases:
            print(f"... {label}: {seconds:.0f} s", flush=True)
            results.append((label, *run_phase(base_url, olivia, api_path, seconds, args.loops, requests)))
    finally:
        os.killpg(web.pid, signal.SIGTERM)
        web.wait(timeout=30)

    print(f"\ngunicorn: {args.workers} workers; HEAVY_PER_USER / HEAVY_GLOBAL from the environment (defaults 1 / 2); "
          f"log {log_path}")
    print(f"\nolivia, GET {api_path} every {POLL_EVERY_S} s:")
    print(f"{'phase':<48} {'n':>5} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8} {'p95 / idle':>10}  statuses")
    idle_p50 = idle_p95 = None
    for label, latencies, statuses, _ in results:
        p50, p95 = statistics.median(latencies), percentile(latencies, 0.95)
        if idle_p95 is None:
            idle_p50, idle_p95 = p50, p95
        print(f"{label:<48} {len(latencies):>5} {p50:>8.1f} {p95:>8.1f} {max(latencies):>8.1f} "
              f"{p95 / idle_p95:>9.2f}x  {dict(statuses)}")
    for label, latencies, _, _ in results[1:]:
        print(f"  {label}: p50 {statistics.median(latencies) / idle_p50:.2f}x idle, "
              f"p95 {percentile(latencies, 0.95) / idle_p95:.2f}x idle (target: p95 within 2x)")
    for label, _, _, hostile in results[1:]:
        print(f"\nmallory, {label}:")
        print(f"{'request':<52} {'n':>5} {'p50 s':>7} {'max s':>7}  statuses")
        for request, (statuses, took) in hostile.items():
            print(f"{request:<52} {len(took):>5} {statistics.median(took):>7.2f} {max(took):>7.2f}  {dict(statuses)}")


if __name__ == "__main__":
    main()
