"""When each partition of a pipeline was last written, as its store says (ZooKeeper znode
mtimes, a Kafka group commit's batch-time metadata): the store poll records it, the cluster
poll's evaluation reads it so the partition rules can tell a partition that stopped committing
from one re-written unchanged (streamoffsets.partition_rules, rule 1).

Kept in Redis, one hash per store (`offsetwatch:partition-written:store:<store id>`, pipeline id
-> JSON {partition: epoch ms}), not in the database: it is the newest reading only, replaced at
every store poll. One hash per store, not per pipeline: a cluster poll reads its pipelines'
times in one command per store (it was one per pipeline: 500 for a 500-group store). Losing it
(Redis flushed or away) costs only that distinction until the next store poll: the rules then
fall back to "offset unchanged" (STALLED) and say that the store's write times are not known.
Redis failures are logged, never raised: a poll must not fail for a refinement of its evaluation.
"""
from __future__ import annotations

import json
import logging

import redis

from dashboard.heavy import redis_client

log = logging.getLogger(__name__)

KEY_PREFIX = "offsetwatch:partition-written:store:"
TTL_S = 86400  # a store no poll reads any more loses its times after a day


def record(store_id: int, written: dict[int, dict[int, int] | None]) -> None:
    """Replace the write times of the store's pipelines in `written` (None: the store did not
    say; the old times are dropped so they cannot outlive the reading that gave them); its other
    pipelines keep theirs. One round trip."""
    if not written:
        return
    key = f"{KEY_PREFIX}{store_id}"
    times = {str(pk): json.dumps({str(p): int(t) for p, t in ts.items()}) for pk, ts in written.items() if ts}
    unsaid = [str(pk) for pk, ts in written.items() if not ts]
    try:
        pipe = redis_client().pipeline(transaction=True)
        if unsaid:
            pipe.hdel(key, *unsaid)
        if times:
            pipe.hset(key, mapping=times)
            pipe.expire(key, TTL_S)
        pipe.execute()
    except redis.RedisError as exc:
        log.warning("partition write times not recorded (%s): partition rules fall back to offsets", exc)


def read(pipelines: list[tuple[int, int]]) -> dict[int, dict[int, int]]:
    """Each pipeline's per-partition write times (`pipelines`: (pipeline id, store id)); pipelines
    without any are left out. One round trip, one command per store."""
    by_store: dict[int, list[int]] = {}
    for pk, store_id in pipelines:
        by_store.setdefault(store_id, []).append(pk)
    if not by_store:
        return {}
    try:
        pipe = redis_client().pipeline(transaction=False)
        for store_id, pks in by_store.items():
            pipe.hmget(f"{KEY_PREFIX}{store_id}", [str(pk) for pk in pks])
        answers = pipe.execute()
    except redis.RedisError as exc:
        log.warning("partition write times not read (%s): partition rules fall back to offsets", exc)
        return {}
    out = {}
    for pks, raws in zip(by_store.values(), answers):
        for pk, raw in zip(pks, raws):
            if raw:
                out[pk] = {int(p): int(t) for p, t in json.loads(raw).items()}
    return out
