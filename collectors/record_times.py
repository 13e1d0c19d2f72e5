"""Which records a cluster poll reads for lag in seconds, within its budget, and what it remembers.

Every distinct committed position (topic, partition, offset) of the cluster's pipelines with
unread records is a position: three groups at different offsets of one partition are three
positions, each its group's own next unread record. A record's timestamp never changes, so what
was read is kept (in Redis, per cluster) for as long as some group still sits at that offset:
an idle or stuck group costs one read, not one per cycle. The positions left unread by a cycle
(over its time budget or its cap) are read first the next cycle, so every position is reached
within a few cycles whatever the budget.
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field

import redis
from django.conf import settings

from collectors.locks import redis_client
from dashboard.monitoring.redis_keys import RECORD_TIMES_PREFIX
from dashboard.monitoring.selectors import kafka_client_config, record_positions
from streamoffsets.errors import OffsetStoreError
from streamoffsets.stores.reading import read_record_timestamps

log = logging.getLogger(__name__)

Position = tuple[str, int, int]
OVER_BUDGET = "record not read: over this cycle's budget"  # read first next cycle


@dataclass
class CycleRecordTimes:
    found: dict[Position, int] = field(default_factory=dict)  # position -> record timestamp (epoch ms)
    missing: dict[Position, str] = field(default_factory=dict)  # position -> why it has no record time
    warning: str | None = None  # for the cluster's health row


def budget_s(positions: int) -> float:
    """The time the record reads of one poll may take: a base plus a share per position,
    capped (OFFSETWATCH_RECORD_TIMESTAMP_BUDGET_*)."""
    return min(settings.RECORD_TIMESTAMP_BUDGET_MAX_S,
               settings.RECORD_TIMESTAMP_BUDGET_BASE_S + positions * settings.RECORD_TIMESTAMP_BUDGET_PER_POSITION_MS / 1000)


def cycle_record_times(
    cluster, marks: dict[str, dict[int, tuple[int, int]]], topics_of: dict[int, str], committed: dict[int, dict[int, int]],
    timeout_s: float, shard: int | None = None,
) -> CycleRecordTimes:
    """The record timestamps at this cycle's positions: remembered ones, then reads (the
    positions left unread last cycle first, then the most lagging), within the budget. A shard
    of a cluster's poll (`shard`) remembers its own positions under its own key: each poll keeps
    only its own cycle's positions."""
    memory = cluster.pk if shard is None else f"{cluster.pk}/{shard}"
    out = CycleRecordTimes()
    cap = settings.RECORD_TIMESTAMP_PARTITIONS
    if cap <= 0:
        return out  # record reads off: interpolation only
    positions, deleted = record_positions(topics=topics_of, committed=committed, marks=marks)
    out.missing.update((pos, "record deleted by retention") for pos in deleted)
    if not positions:
        _save(memory, {}, [])
        return out
    known, pending = _load(memory)
    to_read = []
    for pos in positions:
        if pos in known:
            value = known[pos]
            if isinstance(value, int):
                out.found[pos] = value
            else:
                out.missing[pos] = value
        else:
            to_read.append(pos)
    # Left unread last cycle: first (sorted is stable: the rest stay most lagging first).
    to_read.sort(key=lambda pos: pos not in pending)
    to_read, cut = to_read[:cap], to_read[cap:]
    unread = list(cut)
    if to_read:
        try:
            read = read_record_timestamps(cluster.bootstrap_servers, to_read, timeout_s=timeout_s, budget_s=budget_s(len(to_read)),
                                          config=kafka_client_config(cluster_name=cluster.name))
        except OffsetStoreError as exc:
            out.warning = f"record timestamps not read ({exc}); lag in seconds interpolated"
            for pos in to_read:
                out.missing[pos] = "record not read (the broker did not answer)"
        else:
            out.found.update(read.found)
            out.missing.update(read.gone)
            unread = read.unread + unread
            if read.unread:
                out.warning = (f"{len(read.unread):,} of {len(to_read):,} record timestamps not read within this cycle's "
                               f"budget ({budget_s(len(to_read)):.1f} s): read first next cycle")
    for pos in unread:
        out.missing[pos] = OVER_BUDGET
    remembered: dict[Position, int | str] = {pos: out.found[pos] for pos in positions if pos in out.found}
    # A record gone stays gone (compacted, no timestamp): remembered too; "not read" is not.
    remembered.update((pos, why) for pos, why in out.missing.items() if why.startswith(("no record", "the record has")))
    _save(memory, remembered, unread)
    return out


def _key(memory: int | str) -> str:
    return f"{RECORD_TIMES_PREFIX}{memory}"


def _load(memory: int | str) -> tuple[dict[Position, int | str], set[Position]]:
    try:
        raw = redis_client().get(_key(memory))
    except redis.exceptions.RedisError as exc:
        log.warning("record timestamps remembered in Redis not read (%s): all are read again", exc)
        return {}, set()
    if not raw:
        return {}, set()
    try:
        data = json.loads(raw)
        known = {(t, p, o): v for t, p, o, v in data["known"]}
        pending = {(t, p, o) for t, p, o in data["pending"]}
    except (ValueError, KeyError, TypeError):
        return {}, set()  # written by another version: start over
    return known, pending


def _save(memory: int | str, known: dict[Position, int | str], pending: list[Position]) -> None:
    """Only this cycle's positions are kept: the key holds at most one entry per position."""

    data = json.dumps({"known": [[t, p, o, v] for (t, p, o), v in known.items()],
                       "pending": [list(pos) for pos in pending]}, separators=(",", ":"))
    try:
        redis_client().set(_key(memory), data, ex=int(max(3600, 10 * settings.POLL_INTERVAL_S)))
    except redis.exceptions.RedisError as exc:
        log.warning("record timestamps not remembered in Redis (%s): they are read again next cycle", exc)
