"""What collect_all does each beat: note beat's tick, then enqueue each source that is due and
not already queued or running.

A source is skipped while it is queued or its poll runs (collectors.locks: a Redis mark set with
NX). A failing source is sent every cycle, but between its backed-off full attempts
(collector_health.full_attempt_due) as a probe with the short POLL_PROBE_TIMEOUT_S, so one
unreachable source neither fills the queue nor holds worker processes for whole timeouts: the
others keep their cadence, and the source is seen back within one interval.
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
    probed: list[str] = field(default_factory=list)  # failing: sent with the short probe timeout


def cycle_fan_out(*, now: datetime, enqueue: Callable[[str, bool], None]) -> FanOut:
    """Record the tick (the "collector:beat" row) and send one poll per due, idle source."""
    services.source_health_record(source=collector_health.BEAT_SOURCE, label=collector_health.BEAT_LABEL,
                                  started_at=now, duration_ms=0)
    full, probe = collector_health.sources_due(now=now)
    result = FanOut()
    client = locks.redis_client()
    for source in full + probe:
        if not locks.queued_mark(client, source):
            result.busy.append(source)
            continue
        try:
            enqueue(source, source in probe)
        except Exception:
            locks.queued_clear(source, client)
            raise
        (result.probed if source in probe else result.sent).append(source)
    if result.busy or result.probed:
        log.info("cycle: %d sent, %d still queued or running (%s), %d failing sent as probes (%s)",
                 len(result.sent), len(result.busy), ", ".join(result.busy), len(result.probed),
                 ", ".join(result.probed))
    return result

