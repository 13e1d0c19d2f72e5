"""The delivery-semantics experiment at full size, with real processes and real kills.

For each writable store: a topic of 4 partitions and N records; the reference job (a separate
process, its own JVM) with a per-partition rate limit and a batch interval is stopped mid-way
(a) gracefully with SIGTERM and (b) by dying right after a batch's output and before its offset
save (the fault-injection flag exits the process there, like a kill -9 at that instant); it is
restarted until everything is consumed; lost and duplicated records are counted from its
append-mode output. Prints a table like the paper's.

Run:  .venv/bin/python bench/delivery_semantics.py [--records 100000] [--stores hbase,zookeeper,kafka,file]
"""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from devstack.components import Stack, StackPorts, free_port  # noqa: E402
from reference_job.experiment import count_output  # noqa: E402
from reference_job.output import OutputSink  # noqa: E402
from reference_job.producer import ensure_topic, produce  # noqa: E402

PARTITIONS = 4


def job_argv(stack_addr: dict, store_url: str, topic: str, output: Path, work: Path, rate: int, extra: list[str]):
    return [
        sys.executable, "-m", "reference_job.job", "--bootstrap", stack_addr["kafka"], "--topic", topic,
        "--group", f"{topic}-job", "--store", store_url, "--output", str(output), "--append-output",
        "--trigger-seconds", "1", "--max-offsets-per-partition", str(rate), "--work-dir", str(work), *extra,
    ]


def rows(output: Path, topic: str) -> int:
    try:
        return len(OutputSink(output, idempotent=False).offsets(topic))
    except Exception:
        return 0


def all_consumed(output: Path, topic: str, per_partition: int) -> bool:
    seen = set(OutputSink(output, idempotent=False).offsets(topic)) if output.exists() else set()
    return all((p, per_partition - 1) in seen for p in range(PARTITIONS))


def run_case(stack_addr, store_url, label, mode, records, rate, work: Path, log) -> tuple:
    topic = f"exp-{label}-{mode}-{int(time.time())}"
    ensure_topic(stack_addr["kafka"], topic, PARTITIONS)
    produce(stack_addr["kafka"], topic, PARTITIONS, records)
    output = work / f"{topic}.sqlite3"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    t0 = time.monotonic()
    runs = 1
    if mode == "graceful":
        proc = subprocess.Popen(job_argv(stack_addr, store_url, topic, output, work, rate, []), env=env,
                                stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        while rows(output, topic) < 2 * rate * PARTITIONS:  # two batches written: stop mid-way
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        proc.wait(180)
    else:
        proc = subprocess.Popen(job_argv(stack_addr, store_url, topic, output, work, rate,
                                         ["--crash-after-output-at-batch", "3"]),
                                env=env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        code = proc.wait(600)
        assert code == 137, f"expected the injected crash (137), got {code}"
    while not all_consumed(output, topic, records // PARTITIONS):
        runs += 1
        proc = subprocess.Popen(job_argv(stack_addr, store_url, topic, output, work, rate, []), env=env,
                                stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        while not all_consumed(output, topic, records // PARTITIONS) and proc.poll() is None:
            time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        proc.wait(180)
    lost, duplicated = count_output(output, topic, PARTITIONS, records // PARTITIONS)
    return label, mode, records, lost, duplicated, runs, time.monotonic() - t0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--rate", type=int, default=5_000, help="max records per partition per batch")
    parser.add_argument("--stores", default="hbase,zookeeper,kafka,file")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ow-bench-"))
    ports = StackPorts(kafka=free_port(), hbase=free_port(), zookeeper=free_port(), redis=0)
    stack = Stack(work / "stack", ports, with_redis=False)
    stack.log_dir.mkdir(parents=True)
    stack.pid_dir.mkdir(parents=True)
    started = []
    try:
        for comp in stack.components():
            stack.start_component(comp, progress=lambda line: None)
            started.append(comp.name)
        addr = {"kafka": f"127.0.0.1:{ports.kafka}"}
        urls = {
            "hbase": f"hbase://127.0.0.1:{ports.hbase}/stream_kafka_offsets",
            "zookeeper": f"zk://127.0.0.1:{ports.zookeeper}",
            "kafka": f"kafka://127.0.0.1:{ports.kafka}",
            "file": f"file://{work / 'offsets'}",
        }
        print(f"records={args.records} partitions={PARTITIONS} max per partition per batch={args.rate} "
              f"(one batch <= {PARTITIONS * args.rate} records) trigger=1 s; job logs in {work}/jobs.log", flush=True)
        print(f"{'store':<10} {'stop':<9} {'records':>8} {'lost':>5} {'duplicated':>10} {'runs':>4} {'seconds':>7}",
              flush=True)
        with open(work / "jobs.log", "ab") as log:
            for label in args.stores.split(","):
                for mode in ("graceful", "kill"):
                    r = run_case(addr, urls[label], label, mode, args.records, args.rate, work, log)
                    print(f"{r[0]:<10} {r[1]:<9} {r[2]:>8} {r[3]:>5} {r[4]:>10} {r[5]:>4} {r[6]:>7.0f}", flush=True)
    finally:
        for name in reversed(started):
            stack.stop_component(name)


if __name__ == "__main__":
    main()
