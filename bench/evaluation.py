"""Evaluation throughput on one core: partition states plus the window status rules.

Run: .venv/bin/python bench/evaluation.py [--pipelines 5000 --partitions 20 --window 6]
"""
from __future__ import annotations

import argparse
import random
import sys
import time
from operator import itemgetter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from streamoffsets.evaluation import Sample, evaluate_partitions, evaluate_status, sample_lag, went_back
from streamoffsets.partition_rules import merge_into, partition_status

_partition_of, _lag_of = itemgetter(0), itemgetter(4)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pipelines", type=int, default=5000)
    parser.add_argument("--partitions", type=int, default=20)
    parser.add_argument("--window", type=int, default=6)
    parser.add_argument("--no-partition-rules", action="store_true", help="the window rules alone (as before #13)")
    args = parser.parse_args()
    rng = random.Random(7)
    cases = []
    for _ in range(args.pipelines):
        # A healthy job: the producer writes 0-50 records per partition per cycle, the job's
        # committed offsets follow a little behind and never go backwards.
        high = {p: rng.randint(1_000, 10**9) for p in range(args.partitions)}
        committed = {p: h - rng.randint(0, 500) for p, h in high.items()}
        window = []
        for i in range(args.window):
            window.append(Sample(1_000.0 + 10 * i, dict(committed), dict(high), 1_000.0 + 10 * i - 1))
            high = {p: h + rng.randint(0, 50) for p, h in high.items()}
            committed = {p: min(high[p], c + rng.randint(0, 60)) for p, c in committed.items()}
        # As in the collectors: older samples carry the total lag and whether they went back from
        # the sample before them, both stored when they were taken (then their highs are not read).
        window = [Sample(w.at_s, w.committed, None, w.last_batch_s, sum(w.high[p] - c for p, c in w.committed.items()),
                         went_back(window[i - 1].committed, w.committed) if i else None)
                  for i, w in enumerate(window[:-1])] + window[-1:]
        marks = {p: (0, h) for p, h in window[-1].high.items()}
        cases.append((window, marks))
    t0, cpu0 = time.perf_counter(), time.process_time()
    statuses = 0
    for window, marks in cases:
        # Per cycle, as the collectors do it: evaluate the newest sample's partitions, its total
        # lag and whether it went back (stored with the sample), then the window rules.
        newest = window[-1]
        parts = evaluate_partitions(newest.committed, marks)
        window[-1] = Sample(newest.at_s, newest.committed, newest.high, newest.last_batch_s,
                            sample_lag(newest.committed, newest.high),
                            went_back(window[-2].committed, newest.committed) if len(window) > 1 else None)
        status = evaluate_status(window, parts, 10.0, newest.at_s + 1)
        if not args.no_partition_rules:  # a partition stuck while the others move (issue #13)
            # As dashboard/monitoring/evaluation.py: the lags are built only if some partition may be stuck.
            merge_into(status, partition_status(
                window, lambda parts=parts: dict(zip(map(_partition_of, parts), map(_lag_of, parts))), 10.0, None))
        statuses += 1
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    n = args.pipelines * args.partitions
    print(f"{args.pipelines} pipelines x {args.partitions} partitions, window {args.window} samples"
          f"{'' if args.no_partition_rules else ', partition rules included'}")
    print(f"partition evaluations: {n:,} in {wall:.2f} s wall, {cpu:.2f} s CPU -> {n / cpu:,.0f} per CPU second")
    print(f"pipeline statuses: {statuses:,} -> {statuses / cpu:,.0f} per CPU second")


if __name__ == "__main__":
    main()
