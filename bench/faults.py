"""The fault matrix (issue #11): every component of a deployed Offset Watch (separate gunicorn,
Celery worker and beat processes; private PostgreSQL and Redis; Tansu, ZooKeeper and the HBase
stand-in) killed and frozen in turn while a job whose every batch is known writes to HBase,
ZooKeeper, Kafka-group and file stores. Prints, per row: time to show the fault, time to healthy
after the restore, batches lost or duplicated, the other sources' cadence, 5xx answers.

Run: .venv/bin/python bench/faults.py [--hold 30] [--interval 2] [--only broker,redis] [--faults kill,freeze]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from devstack.fault_matrix import COMPONENTS, FAULTS, FaultRun, format_table, run_row, sources_start  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hold", type=float, default=30.0, help="seconds each fault lasts")
    parser.add_argument("--interval", type=float, default=2.0, help="poll interval (s)")
    parser.add_argument("--io-timeout", type=float, default=5.0, help="I/O timeout (s): the product's default")
    parser.add_argument("--only", default=",".join(COMPONENTS))
    parser.add_argument("--faults", default=",".join(FAULTS))
    args = parser.parse_args()
    t0 = time.monotonic()
    dep = FaultRun.start(Path(tempfile.mkdtemp(prefix="offsetwatch-faults-")), poll_interval_s=args.interval,
                         io_timeout_s=args.io_timeout)
    sources = sources_start(dep)
    print(f"deployment up in {time.monotonic() - t0:.1f} s (logs: {dep.dep.log_dir})", flush=True)
    rows = []
    try:
        for component in args.only.split(","):
            for fault in args.faults.split(","):
                row = run_row(dep, sources, component, fault, hold_s=args.hold)
                rows.append(row)
                print(format_table([row], args.interval).splitlines()[-1], flush=True)
    finally:
        sources.writer.terminate()
        dep.stop()
    print()
    print(format_table(rows, args.interval))


if __name__ == "__main__":
    main()
