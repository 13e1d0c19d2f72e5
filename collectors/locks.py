"""Redis keys that keep one poll per source: the poll lock and the "already queued" mark.

- `offsetwatch:poll:<source>`: held while a poll of the source runs. Its TTL is short
  (POLL_LOCK_TTL_S) and a thread renews it every third of that while the poll runs, so the
  sources of a killed worker (SIGKILL, OOM, the hard time limit) are free again within the TTL.
- `offsetwatch:queued:<source>`: set (NX, TTL POLL_QUEUED_TTL_S) by collect_all when it enqueues
  the source, cleared when the poll starts. collect_all enqueues no source that is marked or
  whose lock is held, so a slow or unreachable source never piles up polls in the queue.
  Celery has no built-in "enqueue once" (celery-once is a separate package); the message's own
  `expires` is the same TTL, so a poll still queued when its mark expires is dropped unrun.
"""
from __future__ import annotations

import logging
import threading
import time
from contextlib import contextmanager

import redis
from django.conf import settings

from dashboard.monitoring.redis_keys import POLL_LOCK_PREFIX, POLLING_KEY, QUEUED_ORDER_KEY, QUEUED_PREFIX

log = logging.getLogger(__name__)


def redis_client() -> redis.Redis:
    return redis.Redis.from_url(
        settings.REDIS_URL, socket_timeout=settings.IO_TIMEOUT_S, socket_connect_timeout=settings.IO_TIMEOUT_S
    )


class _Renewer(threading.Thread):
    """Renews a held lock's TTL every `every_s` until stopped; a lost lock is logged, once."""

    def __init__(self, lock, source: str, every_s: float):
        super().__init__(name=f"lock-renew {source}", daemon=True)
        self.lock, self.source, self.every_s = lock, source, every_s
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(self.every_s):
            try:
                self.lock.reacquire()
            except redis.exceptions.LockError:
                log.warning("poll lock for %s expired while its poll ran: another poll may overlap", self.source)
                return
            except redis.exceptions.RedisError as exc:
                log.warning("poll lock for %s not renewed (%s); retrying", self.source, exc)


@contextmanager
def source_lock(source: str, ttl_s: float | None = None):
    """Yield True if this process may poll `source` now, False if another poll of it runs.

    The lock expires `ttl_s` (default POLL_LOCK_TTL_S) after its holder stops renewing it.
    Redis is the broker too, so a task reaches here only through it; when Redis is lost in
    between, the poll goes ahead without the lock (logged): an overlapping poll only repeats
    idempotent reads and writes, and the collectors page shows the broker down meanwhile.
    """
    ttl_s = ttl_s or settings.POLL_LOCK_TTL_S
    # thread_local=False: the renewing thread must see the token the poll's thread acquired.
    lock = redis_client().lock(f"{POLL_LOCK_PREFIX}{source}", timeout=ttl_s, blocking=False, thread_local=False)
    try:
        acquired = lock.acquire()
    except redis.exceptions.RedisError as exc:
        log.warning("poll lock for %s unavailable (%s): polling without it", source, exc)
        yield True
        return
    renewer = None
    if acquired:
        renewer = _Renewer(lock, source, every_s=ttl_s / 3)
        renewer.start()
        _polling_mark(lock.redis, source, started=time.time())
    try:
        yield acquired
    finally:
        if renewer is not None:
            renewer.stopped.set()
            renewer.join(timeout=settings.IO_TIMEOUT_S)
            _polling_mark(lock.redis, source, started=None)
            try:
                lock.release()
            except redis.exceptions.RedisError:
                pass  # expired meanwhile or Redis went away: the TTL bounds it, nothing to undo


def _polling_mark(client: redis.Redis, source: str, started: float | None) -> None:
    """Note when the poll of `source` started (None: it ended), so the dashboard can say a poll
    waits for a server that does not answer before the I/O timeout ends it. Only read while the
    source's lock exists, so a killed worker's leftover entry means nothing."""
    try:
        if started is None:
            client.hdel(POLLING_KEY, source)
        else:
            client.hset(POLLING_KEY, source, repr(started))
    except redis.exceptions.RedisError as exc:
        log.warning("poll start of %s not noted (%s)", source, exc)


def queued_mark(client: redis.Redis, source: str) -> bool:
    """Mark `source` as queued; False (and nothing marked) if it is queued or its poll runs."""
    if client.exists(f"{POLL_LOCK_PREFIX}{source}"):
        return False
    # The mark holds its place in the order of every mark (a Redis counter, not a clock: beat's
    # fan-out runs on any worker host): a cluster's poll waits only for stores queued before it.
    order = client.incr(QUEUED_ORDER_KEY)
    return bool(client.set(f"{QUEUED_PREFIX}{source}", str(order), nx=True,
                           ex=max(1, round(settings.POLL_QUEUED_TTL_S))))


def queued_order(client: redis.Redis, source: str) -> int | None:
    """`source`'s place in the order polls were queued in, None when it is not queued."""
    value = client.get(f"{QUEUED_PREFIX}{source}")
    return None if value is None else _mark_order(value)


def _mark_order(value: bytes) -> int:
    try:
        return int(value)
    except ValueError:
        return 0  # a mark of another version: as early as can be


def sources_busy(client: redis.Redis, sources: list[str], queued_before: int | None = None) -> list[str]:
    """The sources among `sources` whose poll runs or that are queued (two keys each, one round
    trip); with `queued_before` (a queued_order), only those queued before it count as queued."""
    if not sources:
        return []
    pipe = client.pipeline(transaction=False)
    for source in sources:
        pipe.get(f"{QUEUED_PREFIX}{source}")
        pipe.exists(f"{POLL_LOCK_PREFIX}{source}")
    found = pipe.execute()
    busy = []
    for source, mark, running in zip(sources, found[::2], found[1::2]):
        queued = mark is not None and (queued_before is None or _mark_order(mark) < queued_before)
        if running or queued:
            busy.append(source)
    return busy


def queued_clear(source: str, client: redis.Redis | None = None) -> None:
    """The poll of `source` started (or was never sent): collect_all may enqueue it again."""
    try:
        (client or redis_client()).delete(f"{QUEUED_PREFIX}{source}")
    except redis.exceptions.RedisError as exc:
        log.warning("queued mark of %s not cleared (%s): it expires by itself", source, exc)

