"""What collect_all does each beat: note beat's tick, then enqueue each source that is due and
not already queued or running.

A source is skipped while it is queued or its poll runs (collectors.locks: a Redis mark set with
NX), and while it fails and its backoff (interval x 2^failures, at most POLL_BACKOFF_MAX_S)
has not elapsed, so one unreachable source neither fills the queue nor holds worker processes
every cycle: the others keep their cadence.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from collectors import locks
from dashboard import collector_health, services

log = logging.getLogger(__name__)


@dataclass
class FanOut:
    sent: list[str] = field(default_factory=list)
    busy: list[str] = field(default_factory=list)  # already queued or running
    backing_off: list[str] = field(default_factory=list)


def cycle_fan_out(*, now: datetime, enqueue: Callable[[str], None]) -> FanOut:
    """Record the tick (the "collector:beat" row) and send one poll per due, idle source."""
    services.source_health_record(source=collector_health.BEAT_SOURCE, label=collector_health.BEAT_LABEL,
                                  started_at=now, duration_ms=0)
    due, backing_off = collector_health.sources_due(now=now)
    result = FanOut(backing_off=backing_off)
    client = locks.redis_client()
    for source in due:
        if not locks.queued_mark(client, source):
            result.busy.append(source)
            continue
        try:
            enqueue(source)
        except Exception:
            locks.queued_clear(source, client)
            raise
        result.sent.append(source)
    if result.busy or result.backing_off:
        log.info("cycle: %d sent, %d still queued or running (%s), %d backing off",
                 len(result.sent), len(result.busy), ", ".join(result.busy), len(result.backing_off))
    return result

