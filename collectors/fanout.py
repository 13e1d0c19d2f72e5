"""What collect_all does each beat: note beat's tick, then enqueue each source that is due and
not already queued or running.

A source is skipped while it is queued or its poll runs (collectors.locks: a Redis mark set with
NX). A failing source is sent every cycle, but between its backed-off full attempts
(collector_health.full_attempt_due) as a probe with the short POLL_PROBE_TIMEOUT_S, so one
unreachable source neither fills the queue nor holds worker processes for whole timeouts: the
others keep their cadence, and the source is seen back within one interval.

Order within a cycle (issue #13): the stores are sent before the clusters, and a cluster's poll
first waits, at most CLUSTER_WAIT_FOR_STORES_S, until none of its stores is queued or polling
(cluster_stores_wait), so it evaluates on the offsets this cycle's store polls wrote, not on the
previous cycle's. The wait reads the same Redis marks that keep one poll per source: nothing new
to keep consistent, and a store that fails or hangs holds the cluster's poll for the bound only.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from django.conf import settings

from collectors import locks
from dashboard.models import SourceHealth, Store
from dashboard.monitoring import health as collector_health
from dashboard.monitoring.services import source_health_record
from dashboard.monitoring.shards import cluster_shards_refresh

log = logging.getLogger(__name__)


@dataclass
class FanOut:
    sent: list[str] = field(default_factory=list)
    busy: list[str] = field(default_factory=list)  # already queued or running
    probed: list[str] = field(default_factory=list)  # failing: sent with the short probe timeout


def cycle_fan_out(*, now: datetime, enqueue: Callable[[str, bool], None]) -> FanOut:
    """Record the tick (the "collector:beat" row) and send one poll per due, idle source."""
    source_health_record(source=collector_health.BEAT_SOURCE, label=collector_health.BEAT_LABEL,
                                  started_at=now, duration_ms=0)
    # A large cluster's shard count first (from what its polls last read): the sources due are its shards.
    cluster_shards_refresh()
    full, probe = collector_health.sources_due(now=now)
    result = FanOut()
    client = locks.redis_client()
    # Stores first, probes included: a cluster's poll waits for its stores (cluster_stores_wait),
    # so on a single worker they must be ahead of it in the queue.
    for source in sorted(full + probe, key=lambda s: not s.startswith("store:")):
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


def cluster_stores_wait(cluster_id: int, bound_s: float | None = None, step_s: float = 0.05,
                        source: str | None = None) -> list[str]:
    """Wait until none of the cluster's enabled stores is queued or polling, at most `bound_s`
    (CLUSTER_WAIT_FOR_STORES_S). Stores whose last poll failed are not waited for (their poll is
    a probe or a backed-off attempt; the cadence of the others comes first). With `source` (the
    waiting poll's own source, still marked queued), a store queued after it is not waited for:
    that is a later cycle's poll, behind this one in the queue (with few worker processes, each
    shard of a cluster would otherwise hold its process for the whole bound). Returns the stores
    still busy when the bound passed (their previous offsets are evaluated; logged). The
    database or Redis away: no wait (the poll goes on and records its own failure)."""
    bound_s = settings.CLUSTER_WAIT_FOR_STORES_S if bound_s is None else bound_s
    if bound_s <= 0:
        return []
    deadline = time.monotonic() + bound_s
    try:
        stores = [f"store:{pk}" for pk in Store.objects.filter(cluster_id=cluster_id, enabled=True)
                  .order_by("pk").values_list("pk", flat=True)]
        failing = set(SourceHealth.objects.filter(source__in=stores, consecutive_failures__gt=0)
                      .values_list("source", flat=True))
        busy = [s for s in stores if s not in failing]
        client = locks.redis_client() if busy else None
        mine = locks.queued_order(client, source) if busy and source else None
        busy = locks.sources_busy(client, busy, mine) if busy else []
        while busy and time.monotonic() < deadline:
            time.sleep(step_s)
            busy = locks.sources_busy(client, busy, mine)
    except Exception as exc:  # DatabaseError, RedisError and their kin: the poll must not depend on them
        log.warning("cluster:%s: stores' polls not awaited (%s)", cluster_id, exc)
        return []
    if busy:
        log.info("cluster:%s: evaluated without waiting longer for %s (still polling after %.1f s)",
                 cluster_id, ", ".join(busy), bound_s)
    return busy
