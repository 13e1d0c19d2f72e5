"""The reference streaming job: Kafka -> idempotent output, offsets saved to a store after each batch.

Two modes:
- `--store URL` (the default way): the offset store is the job's source of truth, not a Spark
  checkpoint (checkpoints do not survive application upgrades). Each run uses a fresh,
  temporary checkpoint and starts from what `streamoffsets.restart` resolves from the newest
  stored batch. The store is any writable one `streamoffsets.stores.registry.open_store` knows: hbase://,
  zk://, kafka:// or file://.
- `--checkpoint DIR`: Spark's own checkpoint in DIR is kept across runs and is the position
  (the dashboard reads it as a `checkpoint://` store; the pipeline's group is DIR's name). A
  checkpoint's offsets win over `startingOffsets`, so applying a rewind moves DIR aside
  (`DIR.before-rewind-<id>-<UTC time>`, kept) and starts a fresh DIR from the target, with the
  marker `DIR/offsetwatch-start.json` written before the query starts (streamoffsets.stores.checkpoint).
  A stored position out of range cannot be clamped there (Spark would resume from the
  checkpoint anyway): such a start is refused.

With `--dashboard-url/--dashboard-token` the job reports where it started and applies a rewind
approved in the dashboard (streamoffsets.restart; `--rewind-policy proceed|wait` says what to
do when the dashboard cannot be asked). Run:
    python -m reference_job.job --bootstrap 127.0.0.1:19092 --topic demo --group demo-job \
        --store hbase://127.0.0.1:19090/stream_kafka_offsets --output .run/job-output.sqlite3
"""
from __future__ import annotations

import argparse
import logging
import os
import shutil
import signal
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from reference_job.output import OutputSink
from reference_job.sources import SOURCES, kafka_stream_reader
from streamoffsets.dashboard_client import (
    DashboardClient,
    instance_id,
    report_start_quietly,
)
from streamoffsets.kafka import KafkaWatermarkReader
from streamoffsets.restart import (
    OnMissing,
    OutOfRange,
    RewindPolicy,
    StartPlan,
    restart,
)
from streamoffsets.stores.checkpoint import CheckpointStore, start_fresh_checkpoint
from streamoffsets.stores.registry import open_store
from streamoffsets.types import BatchOffsets

log = logging.getLogger("offsetwatch.job")


@dataclass
class JobConfig:
    bootstrap: str
    topic: str
    group: str
    store_url: str | None
    output_path: Path
    trigger_seconds: float = 2.0
    max_offsets_per_partition: int | None = None
    idempotent_output: bool = True
    on_missing: OnMissing = "earliest"
    # None: the mode's default, "clamp" with a store, "fail" with a kept checkpoint.
    out_of_range: OutOfRange | None = None
    # Fault injection for the delivery-semantics experiment: die after the Nth batch's output
    # is written and before its offsets are saved, by exiting the process (like a kill -9 at
    # that instant) or by raising (in-process tests).
    crash_after_output_at_batch: int | None = None
    crash_by_exit: bool = False
    # The dashboard records where the job started (clamps included) when given its URL and token.
    dashboard_url: str | None = None
    dashboard_token: str | None = None
    # What to do when the dashboard cannot be asked for an approved rewind (streamoffsets.restart).
    rewind_policy: RewindPolicy = "proceed"
    # Who this run is when it claims a rewind: host:pid:run.
    instance: str = field(default_factory=instance_id)
    # Keep Spark's checkpoint here across runs instead of an offset store (group = its name).
    checkpoint_dir: Path | None = None
    # "python": the project's Python data source (no jar); "official": Spark's Kafka source (reference_job/sources.py).
    source: str = "python"


class SimulatedCrash(RuntimeError):
    """Raised by the fault-injection hook: output written, offsets not saved."""


@dataclass
class JobRun:
    plan: StartPlan
    batches_saved: list[BatchOffsets] = field(default_factory=list)
    records_written: int = 0


class ReferenceJob:
    """One run of the job; `stop()` finishes the batch in flight, then stops the query."""

    def __init__(self, spark, config: JobConfig, on_batch: Callable[[BatchOffsets], None] | None = None):
        self.spark = spark
        self.config = config
        self.on_batch = on_batch
        self._stopping = threading.Event()
        # Held while a batch writes output and offsets, so a stop never cuts one in half.
        self._batch_lock = threading.Lock()
        if (config.store_url is None) == (config.checkpoint_dir is None):
            raise ValueError("give the job either an offset store URL or a checkpoint directory (exactly one)")
        if config.checkpoint_dir is not None:
            self._checkpoint_dir = Path(config.checkpoint_dir).absolute()
            if config.group != self._checkpoint_dir.name:
                raise ValueError(f"a checkpoint job's group is its checkpoint directory's name "
                                 f"({self._checkpoint_dir.name!r}), as the dashboard's checkpoint store names it; "
                                 f"got group {config.group!r}")
            if config.out_of_range == "clamp":
                raise ValueError("a checkpoint's offsets win over startingOffsets, so a checkpoint job cannot clamp an "
                                 "out-of-range position: use out_of_range='fail'")
            self._store = CheckpointStore(self._checkpoint_dir)
        else:
            self._checkpoint_dir = None
            self._store = open_store(config.store_url)
            if not self._store.writable:
                raise ValueError(f"{config.store_url} is read-only: the job needs a writable offset store "
                                 "(a Spark checkpoint: use the checkpoint mode)")
        self._sink = OutputSink(config.output_path, idempotent=config.idempotent_output)
        self._current: dict[int, int] = {}
        self.run_state: JobRun | None = None
        self.query = None

    def plan_start(self) -> StartPlan:
        cfg = self.config
        if hasattr(self._store, "ensure_table"):
            self._store.ensure_table()
        watermarks = KafkaWatermarkReader(cfg.bootstrap).topic_watermarks
        client = DashboardClient(cfg.dashboard_url, cfg.dashboard_token) if cfg.dashboard_url and cfg.dashboard_token else None
        out_of_range = cfg.out_of_range or ("fail" if self._checkpoint_dir else "clamp")
        plan = restart(
            self._store, cfg.topic, cfg.group, watermarks, cfg.on_missing, out_of_range,
            dashboard=client, instance=cfg.instance, rewind_policy=cfg.rewind_policy,
            save_target=self._start_fresh_checkpoint if self._checkpoint_dir else None,
        )
        report_start_quietly(client, plan)
        return plan

    def _start_fresh_checkpoint(self, target: BatchOffsets, rewind_id: int) -> None:
        """A checkpoint job's way to save a rewind's target: Spark would resume from the old
        checkpoint whatever startingOffsets says, so it is moved aside (kept) and a fresh one
        starts with the marker the collectors verify the rewind from."""
        suffix = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
        moved = start_fresh_checkpoint(self._checkpoint_dir, target, rewind_id=rewind_id, aside_suffix=suffix)
        log.warning("rewind #%s: checkpoint %s %s; a fresh one starts from the target %s", rewind_id,
                    self._checkpoint_dir, f"moved aside to {moved} (kept)" if moved else "did not exist", target.offsets)

    def start(self):
        cfg = self.config
        plan = self.plan_start()
        self.run_state = JobRun(plan)
        self._current = dict(plan.offsets)
        reader = kafka_stream_reader(
            self.spark, source=cfg.source, bootstrap=cfg.bootstrap, topic=cfg.topic,
            starting_offsets=plan.spark_starting_offsets(), partitions=len(plan.offsets),
            max_offsets_per_partition=cfg.max_offsets_per_partition,
        )
        if self._checkpoint_dir is not None:
            self._checkpoint = self._checkpoint_dir  # kept across runs: it is the position
            self._checkpoint.mkdir(parents=True, exist_ok=True)
        else:
            self._checkpoint = Path(tempfile.mkdtemp(prefix="offsetwatch-ckpt-"))
        self.query = (
            reader.load()
            .writeStream.foreachBatch(self._process_batch)
            .option("checkpointLocation", str(self._checkpoint))
            .trigger(processingTime=f"{cfg.trigger_seconds} seconds")
            .queryName(f"offsetwatch-{cfg.topic}-{cfg.group}")
            .start()
        )
        return self.query

    def _process_batch(self, df, batch_id: int) -> None:
        with self._batch_lock:
            if self._stopping.is_set() and self._checkpoint_dir is None:
                # Nothing written and no offsets saved: the next run re-reads this range. (Not in
                # checkpoint mode: Spark commits a batch whose function returned, so skipping its
                # output there would lose it; the batch is processed, the stop waits for it.)
                return
            batch_time_ms = int(time.time() * 1000)
            rows = df.select("topic", "partition", "offset", "value").collect()
            if not rows:
                return
            written = self._sink.write(batch_id, [(r.topic, r.partition, r.offset, r.value) for r in rows])
            until = dict(self._current)
            for r in rows:
                until[r.partition] = max(until.get(r.partition, 0), r.offset + 1)
            batch = BatchOffsets(self.config.topic, self.config.group, batch_time_ms, until)
            self._maybe_crash(batch_id)
            # After the output, never before: a crash in between re-processes one batch (at-least-once).
            # A checkpoint job's position is Spark's commit of this batch, written when we return.
            if self._checkpoint_dir is None:
                self._store.save_batch(batch)
            self._current = until
            self.run_state.records_written += written
            self.run_state.batches_saved.append(batch)
            log.info("batch %s: %s records, offsets saved %s", batch_id, written, until)
        if self.on_batch:
            self.on_batch(batch)

    def _maybe_crash(self, batch_id: int) -> None:
        crash_at = self.config.crash_after_output_at_batch
        if crash_at is None or len(self.run_state.batches_saved) + 1 != crash_at:
            return
        log.error("fault injection: crashing after the output of batch %s, before saving its offsets", batch_id)
        if self.config.crash_by_exit:
            os._exit(137)
        raise SimulatedCrash(f"simulated crash after the output of batch {batch_id}")

    def stop(self, timeout_s: float = 120.0) -> None:
        """Graceful stop: let the batch in flight finish and save its offsets, then stop."""
        self._stopping.set()
        if self._batch_lock.acquire(timeout=timeout_s):
            self._batch_lock.release()
        if self.query is not None:
            self.query.stop()
        self._store.close()
        if self._checkpoint_dir is None:  # a temporary checkpoint; a kept one is the position
            shutil.rmtree(getattr(self, "_checkpoint", ""), ignore_errors=True)

    def run_until(self, stop: threading.Event) -> None:
        """Run until `stop` is set (signal handler) or the query fails; always stops cleanly."""
        self.start()
        try:
            while not stop.is_set() and self.query.isActive:
                self.query.awaitTermination(0.5)
            if not self.query.isActive and self.query.exception():
                raise RuntimeError(f"streaming query failed: {self.query.exception()}")
        finally:
            self.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description="Offset Watch reference streaming job (PySpark).")
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", help="the consumer group (with --checkpoint: the directory's name, the default)")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--store", help="hbase://..., zk://..., kafka://... or file:///...")
    mode.add_argument("--checkpoint", type=Path, metavar="DIR",
                      help="keep Spark's checkpoint in DIR across runs instead of an offset store")
    parser.add_argument("--on-missing", choices=["earliest", "latest", "fail"], default="earliest")
    parser.add_argument("--out-of-range", choices=["clamp", "fail"],
                        help="default: clamp with --store; a checkpoint job can only fail")
    parser.add_argument("--rewind-policy", choices=["proceed", "wait"], default="proceed",
                        help="when the dashboard cannot be asked for an approved rewind: start from the stored "
                             "offsets (proceed) or refuse to start (wait)")
    parser.add_argument("--output", required=True, type=Path)
    parser.add_argument("--trigger-seconds", type=float, default=2.0)
    parser.add_argument("--max-offsets-per-partition", type=int)
    parser.add_argument("--append-output", action="store_true", help="keep every write (count duplicates)")
    parser.add_argument("--crash-after-output-at-batch", type=int, help="fault injection: exit after that batch's output")
    parser.add_argument("--dashboard-url", default=os.environ.get("OFFSETWATCH_DASHBOARD_URL"))
    parser.add_argument("--dashboard-token", default=os.environ.get("OFFSETWATCH_DASHBOARD_TOKEN"),
                        help="the pipeline's token (better: the env var, kept out of process lists)")
    parser.add_argument("--source", choices=SOURCES, default="python",
                        help="python: the project's Kafka data source (no jar); official: Spark's Kafka source "
                             "(needs --packages org.apache.spark:spark-sql-kafka-0-10_2.13:<spark version>)")
    parser.add_argument("--work-dir", type=Path, default=Path(tempfile.gettempdir()) / "offsetwatch-spark")
    args = parser.parse_args()
    if args.checkpoint is not None:
        args.checkpoint = args.checkpoint.absolute()
    group = args.group or (args.checkpoint.name if args.checkpoint is not None else None)
    if group is None:
        parser.error("--group is required with --store")
    if args.checkpoint is not None and args.out_of_range == "clamp":
        parser.error("--out-of-range clamp is impossible with --checkpoint: Spark resumes from the checkpoint's offsets")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    from reference_job.spark_session import build_spark_session

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    spark = build_spark_session("offsetwatch-reference-job", args.work_dir)
    spark.sparkContext.setLogLevel("WARN")
    job = ReferenceJob(
        spark,
        JobConfig(
            bootstrap=args.bootstrap, topic=args.topic, group=group, store_url=args.store,
            checkpoint_dir=args.checkpoint, rewind_policy=args.rewind_policy,
            output_path=args.output, trigger_seconds=args.trigger_seconds,
            max_offsets_per_partition=args.max_offsets_per_partition,
            on_missing=args.on_missing, out_of_range=args.out_of_range,
            idempotent_output=not args.append_output,
            crash_after_output_at_batch=args.crash_after_output_at_batch, crash_by_exit=True,
            dashboard_url=args.dashboard_url, dashboard_token=args.dashboard_token, source=args.source,
        ),
    )
    try:
        job.run_until(stop)
        log.info("stopped gracefully")
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
