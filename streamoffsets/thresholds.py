"""When silence is a stop and a frozen stretch a stall: the thresholds every status rule shares.

One place for them because three callers must agree: the plain rules (streamoffsets.rules),
the tuned hot path that the collectors run (streamoffsets.evaluation.evaluate_status), and the
rewinds, which write a rewind only to a job the dashboard sees STOPPED. Pure, no I/O.
"""
from __future__ import annotations

from typing import NamedTuple

# Defaults of the settings OFFSETWATCH_STOP_AFTER_INTERVALS and OFFSETWATCH_STALE_AFTER (docs/configuration.md).
STOP_AFTER_INTERVALS = 3.0  # no batch for this many batch intervals: stopped
MIN_STALE_S = 30.0  # ... and never sooner than this (a job batching every second is not stopped after 3 s)
STALL_AFTER_INTERVALS = 2.0  # batches come but no offset moved for this many intervals (with lag): stalled
LAG_GROWING_MIN_SAMPLES = 3  # lag growing over fewer samples is noise


def stop_threshold_s(interval_s: float | None, stop_after_intervals: float = STOP_AFTER_INTERVALS,
                     min_stale_s: float = MIN_STALE_S) -> float:
    """Seconds without a batch after which a job is stopped: `stop_after_intervals` of its own
    cadence, at least `min_stale_s`; `min_stale_s` alone while the cadence is unknown."""
    return max(min_stale_s, stop_after_intervals * interval_s) if interval_s else min_stale_s


class BatchSilence(NamedTuple):
    silent_s: float  # since the newest batch
    threshold_s: float  # stop_threshold_s for this cadence
    stopped: bool  # silent_s > threshold_s


def batch_silence(last_batch_s: float, now_s: float, interval_s: float | None,
                  stop_after_intervals: float = STOP_AFTER_INTERVALS, min_stale_s: float = MIN_STALE_S) -> BatchSilence:
    """How long the job has been silent and whether that is a stop (rule 3 of streamoffsets.rules)."""
    threshold = stop_threshold_s(interval_s, stop_after_intervals, min_stale_s)
    silent = now_s - last_batch_s
    return BatchSilence(silent, threshold, silent > threshold)
