"""A job stand-in whose every batch is known: for fault runs (tests/integration/test_fault_matrix.py,
bench/faults.py).

Every tick (--every seconds) it saves batch n as "offsets = n on every partition" to each store
given and produces one record per partition to the topic (best effort, in its own thread), one thread per store so a frozen
store holds up only its own writes. Each attempt is one JSON line in the ledger:
{"store": name, "batch_time_ms": t, "offsets": {"0": n, ...}, "ok": true|false, "error": "..."}.
A batch whose line says ok was saved by the store's client (and is what the collectors must
import, never twice, while the store still holds it).

Run: python -m devstack.known_writer --ledger L --topic T --partitions 2 --bootstrap B \
         --store hbase=hbase://... --store zookeeper=zk://... [--every 1] [--group etl]
Stops on SIGTERM/SIGINT.
"""
from __future__ import annotations

import argparse
import json
import signal
import threading
import time
from pathlib import Path

from streamoffsets.stores.registry import open_store
from streamoffsets.types import BatchOffsets


class Ledger:
    def __init__(self, path: Path):
        self._file = path.open("a", buffering=1)
        self._lock = threading.Lock()

    def write(self, **line) -> None:
        with self._lock:
            self._file.write(json.dumps(line, sort_keys=True) + "\n")


def store_writer(name: str, url: str, ticks: "list[tuple[int, dict]]", cond: threading.Condition,
                 stop: threading.Event, ledger: Ledger, timeout_s: float) -> None:
    """Save each new tick's batch to one store; a tick missed while a save hung is not written."""
    done = 0
    store = None
    while not stop.is_set():
        with cond:
            while len(ticks) <= done and not stop.is_set():
                cond.wait(0.5)
            if stop.is_set():
                break
            done = len(ticks)
            batch_time_ms, offsets = ticks[-1]
        batch = BatchOffsets(ARGS.topic, ARGS.group, batch_time_ms, offsets)
        try:
            if store is None:
                store = open_store(url, timeout_s=timeout_s)
                if hasattr(store, "ensure_table"):
                    store.ensure_table()
            store.save_batch(batch)
            ledger.write(store=name, batch_time_ms=batch_time_ms, offsets={str(p): o for p, o in offsets.items()},
                         ok=True)
        except Exception as exc:
            ledger.write(store=name, batch_time_ms=batch_time_ms, offsets={str(p): o for p, o in offsets.items()},
                         ok=False, error=f"{type(exc).__name__}: {exc}"[:300])
            try:
                if store is not None:
                    store.close()
            except Exception:
                pass
            store = None


def producer_loop(stop: threading.Event, due: list[int], cond: threading.Condition) -> None:
    """Best effort: one record per partition per tick, so the topic keeps up with the offsets
    saved (a broker outage leaves the saved offsets ahead of it for a while, as a real job's)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": ARGS.bootstrap, "linger.ms": 0, "batch.num.messages": 1,
                         "message.timeout.ms": int(ARGS.timeout * 1000)})
    sent = 0
    while not stop.is_set():
        with cond:
            cond.wait_for(lambda sent=sent: due[0] > sent or stop.is_set(), timeout=0.5)
            target = due[0]
        for _ in range(target - sent):
            for p in range(ARGS.partitions):
                try:
                    producer.produce(ARGS.topic, value=b"x", partition=p)
                except BufferError:
                    producer.poll(0.1)
        producer.flush(ARGS.timeout)
        sent = target


def ticker(ticks, cond, stop: threading.Event, due: list[int]) -> None:
    """A batch every --every seconds whatever the stores and the broker do."""
    n = 0
    next_at = time.time()
    while not stop.is_set():
        n += 1
        with cond:
            ticks.append((int(time.time() * 1000), {p: n for p in range(ARGS.partitions)}))
            due[0] = n
            cond.notify_all()
        next_at += ARGS.every
        stop.wait(max(0.0, next_at - time.time()))


def main() -> None:
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--ledger", type=Path, required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", default="etl")
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--store", action="append", default=[], help="name=url")
    parser.add_argument("--every", type=float, default=1.0)
    parser.add_argument("--timeout", type=float, default=2.0)
    ARGS = parser.parse_args()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    ledger = Ledger(ARGS.ledger)
    ticks: list[tuple[int, dict]] = []
    cond = threading.Condition()
    threads = [threading.Thread(target=store_writer, daemon=True,
                                args=(name, url, ticks, cond, stop, ledger, ARGS.timeout))
               for name, url in (s.split("=", 1) for s in ARGS.store)]
    due = [0]
    threads.append(threading.Thread(target=producer_loop, args=(stop, due, cond), daemon=True))
    for t in threads:
        t.start()
    ticker(ticks, cond, stop, due)


ARGS: argparse.Namespace


if __name__ == "__main__":
    main()
