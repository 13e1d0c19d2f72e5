"""When each partition of a pipeline was last written, as its store says (ZooKeeper znode
mtimes, a Kafka group commit's batch-time metadata): the store poll records it, the cluster
poll's evaluation reads it so the partition rules can tell a partition that stopped committing
from one re-written unchanged (streamoffsets.partition_rules, rule 1).

Kept in Redis, one hash per pipeline (`offsetwatch:partition-written:<pipeline id>`, partition
-> epoch ms), not in the database: it is the newest reading only, replaced at every store poll,
and no schema change was wanted for it in this round. Losing it (Redis flushed or away) costs
only that distinction until the next store poll: the rules then fall back to "offset unchanged"
(STALLED) and say that the store's write times are not known. Redis failures are logged, never
raised: a poll must not fail for a refinement of its evaluation.
"""
from __future__ import annotations

import logging

import redis

from dashboard.heavy import redis_client

log = logging.getLogger(__name__)

KEY_PREFIX = "offsetwatch:partition-written:"
TTL_S = 86400  # a pipeline no store poll reads any more loses its times after a day


def record(written: dict[int, dict[int, int] | None]) -> None:
    """Replace each pipeline's per-partition write times (None: the store did not say; the old
    times are dropped so they cannot outlive the reading that gave them). One round trip."""
    if not written:
        return
    try:
        pipe = redis_client().pipeline(transaction=True)
        pipe.delete(*(f"{KEY_PREFIX}{pk}" for pk in written))  # one command for all (a store of 500 pipelines)
        for pk, times in written.items():
            key = f"{KEY_PREFIX}{pk}"
            if times:
                pipe.hset(key, mapping={str(p): int(t) for p, t in times.items()})
                pipe.expire(key, TTL_S)
        pipe.execute()
    except redis.RedisError as exc:
        log.warning("partition write times not recorded (%s): partition rules fall back to offsets", exc)


def read(pipeline_ids: list[int]) -> dict[int, dict[int, int]]:
    """Each pipeline's per-partition write times; pipelines without any are left out. One round trip."""
    if not pipeline_ids:
        return {}
    try:
        pipe = redis_client().pipeline(transaction=False)
        for pk in pipeline_ids:
            pipe.hgetall(f"{KEY_PREFIX}{pk}")
        answers = pipe.execute()
    except redis.RedisError as exc:
        log.warning("partition write times not read (%s): partition rules fall back to offsets", exc)
        return {}
    out = {}
    for pk, raw in zip(pipeline_ids, answers):
        if raw:
            out[pk] = {int(p): int(t) for p, t in raw.items()}
    return out
