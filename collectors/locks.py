"""A Redis lock per source so two polls of one source never overlap."""
from __future__ import annotations

import logging
from contextlib import contextmanager

import redis
from django.conf import settings

log = logging.getLogger(__name__)


@contextmanager
def source_lock(source: str, ttl_s: float):
    """Yield True if this process may poll `source` now, False if another poll of it runs.

    When Redis cannot be reached the poll goes ahead without the lock (logged): an overlapping
    poll only repeats idempotent reads and writes, while skipping would blind the dashboard.
    """
    client = redis.Redis.from_url(
        settings.REDIS_URL, socket_timeout=settings.IO_TIMEOUT_S, socket_connect_timeout=settings.IO_TIMEOUT_S
    )
    lock = client.lock(f"offsetwatch:poll:{source}", timeout=ttl_s, blocking=False)
    try:
        acquired = lock.acquire()
    except redis.exceptions.RedisError as exc:
        log.warning("poll lock for %s unavailable (%s): polling without it", source, exc)
        yield True
        return
    try:
        yield acquired
    finally:
        if acquired:
            try:
                lock.release()
            except redis.exceptions.RedisError:
                pass  # expired meanwhile or Redis went away: the TTL bounds it, nothing to undo
