"""A Redis lock per source so two polls of one source never overlap."""
from __future__ import annotations

from contextlib import contextmanager

import redis
from django.conf import settings


@contextmanager
def source_lock(source: str, ttl_s: float):
    """Yield True if this process holds the lock for `source`, False if another poll runs."""
    client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=settings.IO_TIMEOUT_S)
    lock = client.lock(f"offsetwatch:poll:{source}", timeout=ttl_s, blocking=False)
    acquired = lock.acquire()
    try:
        yield acquired
    finally:
        if acquired:
            try:
                lock.release()
            except redis.exceptions.LockError:
                pass  # expired meanwhile: the TTL bounds a crashed poll, nothing to undo
