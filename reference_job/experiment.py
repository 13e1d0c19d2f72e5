"""The delivery-semantics experiment (the paper's table): stop the job mid-way, restart it
until everything is consumed, then count records lost and duplicated from the job's output.

Stop modes:
- graceful: the job finishes the batch in flight, saves its offsets, stops;
- kill: the job dies after a batch's output is written and before its offsets are saved
  (the worst moment for at-least-once).
Lost and duplicated records are counted from the rows the job's output holds: with append
output every re-processed record shows as a duplicate; with keyed (idempotent) output a re-write
of (topic, partition, offset) overwrites, so the same run leaves no duplicate rows.
"""
from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from reference_job.job import JobConfig, ReferenceJob
from reference_job.output import OutputSink
from reference_job.producer import ensure_topic, produce

StopMode = Literal["graceful", "kill"]


@dataclass
class ExperimentResult:
    store: str
    stop_mode: StopMode
    records: int
    idempotent_output: bool
    lost: int
    duplicated: int
    runs: int


def count_output(output: Path, topic: str, partitions: int, per_partition: int) -> tuple[int, int]:
    """(lost, duplicated) records among the rows the output holds."""
    written = Counter(OutputSink(output, idempotent=False).offsets(topic))  # reads rows, whatever the mode
    expected = {(p, o) for p in range(partitions) for o in range(per_partition)}
    return len(expected - set(written)), sum(n - 1 for n in written.values())


def run_in_process(
    spark, *, bootstrap: str, store_url: str, store_label: str, topic: str, group: str, work_dir: Path,
    records: int, partitions: int = 4, max_per_partition: int = 50, trigger_seconds: float = 0.5,
    stop_mode: StopMode, stop_after_batches: int = 2, idempotent_output: bool = False,
) -> ExperimentResult:
    """One experiment with the job in this process's SparkSession (the tests' variant)."""
    ensure_topic(bootstrap, topic, partitions)
    produce(bootstrap, topic, partitions, records)
    output = work_dir / f"{topic}.sqlite3"
    base = dict(bootstrap=bootstrap, topic=topic, group=group, store_url=store_url, output_path=output,
                trigger_seconds=trigger_seconds, max_offsets_per_partition=max_per_partition,
                idempotent_output=idempotent_output)
    runs = 1
    if stop_mode == "graceful":
        first = ReferenceJob(spark, JobConfig(**base))
        first.start()
        _wait(lambda: len(first.run_state.batches_saved) >= stop_after_batches, first)
        first.stop()
    else:
        first = ReferenceJob(spark, JobConfig(**base, crash_after_output_at_batch=stop_after_batches + 1))
        first.start()
        _wait(lambda: not first.query.isActive, first)
        first.stop()
    while not _caught_up(output, topic, partitions, records // partitions):
        runs += 1
        job = ReferenceJob(spark, JobConfig(**base))
        job.start()
        try:
            job.query.processAllAvailable()
        finally:
            job.stop()
    lost, duplicated = count_output(output, topic, partitions, records // partitions)
    return ExperimentResult(store_label, stop_mode, records, idempotent_output, lost, duplicated, runs)


def _caught_up(output: Path, topic: str, partitions: int, per_partition: int) -> bool:
    seen = set(OutputSink(output, idempotent=False).offsets(topic))
    return all((p, per_partition - 1) in seen for p in range(partitions))


def _wait(predicate, job: ReferenceJob, timeout_s: float = 180.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"experiment: job {job.config.topic} did not reach the stop point in {timeout_s:.0f} s")
        threading.Event().wait(0.1)
