"""Slots for heavy requests (chart image renders, cold charts, full exports), counted in Redis so
every gunicorn worker and every web host shares them: at most HEAVY_PER_USER at a time per user
and HEAVY_GLOBAL in all. One viewer looping over 30-day charts then slows only himself: his
extra requests are a 429 at once instead of filling every worker.

Keys: `offsetwatch:heavy:user:<id>` and `offsetwatch:heavy:all`, sorted sets of slot tokens
scored by their expiry (epoch seconds). A slot is released in `finally`; one whose holder was
killed (SIGKILL, OOM, gunicorn's worker timeout) expires HEAVY_SLOT_TTL_S after it was taken and
is swept by the next acquire, so nobody is locked out longer than that.
"""
from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from typing import Callable, TypeVar

import redis
from django.conf import settings
from django.db import connections
from django.http import HttpResponse, JsonResponse

T = TypeVar("T")

log = logging.getLogger(__name__)

PREFIX = "offsetwatch:heavy:"
GLOBAL_KEY = PREFIX + "all"
# What a client is told to wait: a heavy request takes seconds, not minutes.
RETRY_AFTER_S = 5
# A chart spanning more than this is heavy when it is not in the cache (the 1-hour chart the
# pipeline page polls every 5 s is not: it is cheap, and it must never be refused).
CHART_SPAN_S = 3600.0

# Atomic: sweep expired slots, check both limits, take a slot in both sets. Returns 0 (taken),
# 1 (the user's limit) or 2 (the global limit).
_ACQUIRE = """
local now, expiry = tonumber(ARGV[1]), tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then return 1 end
if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[4]) then return 2 end
redis.call('ZADD', KEYS[1], expiry, ARGV[5])
redis.call('ZADD', KEYS[2], expiry, ARGV[5])
redis.call('EXPIREAT', KEYS[1], math.ceil(expiry))
redis.call('EXPIREAT', KEYS[2], math.ceil(expiry))
return 0
"""

_clients: dict[str, redis.Redis] = {}


def redis_client() -> redis.Redis:
    """One client (and connection pool) per process and REDIS_URL. Short timeouts: a slot or a
    cache lookup that waits on a sick Redis would cost every request what it is meant to save."""
    url = settings.REDIS_URL
    client = _clients.get(url)
    if client is None:
        client = _clients[url] = redis.Redis.from_url(url, socket_timeout=1.0, socket_connect_timeout=1.0)
    return client


class Busy(Exception):
    """No slot: the user's own heavy requests, or everyone's, are at their limit."""

    def __init__(self, message: str, retry_after_s: int = RETRY_AFTER_S):
        super().__init__(message)
        self.message, self.retry_after_s = message, retry_after_s


class Slot:
    """A taken slot (token None: taken without Redis, see acquire). A context manager; release()
    may be called more than once (a streamed export releases at its end and at its close)."""

    def __init__(self, user_key: str, token: str | None):
        self.user_key, self.token = user_key, token

    def release(self) -> None:
        token, self.token = self.token, None
        if token is None:
            return
        try:
            client = redis_client()
            client.zrem(self.user_key, token)
            client.zrem(GLOBAL_KEY, token)
        except redis.RedisError as exc:
            log.warning("heavy slot %s not released (%s): it expires by itself", token, exc)

    def __enter__(self) -> Slot:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def user_key(user_id) -> str:
    return f"{PREFIX}user:{user_id}"


def acquire(*, user_id) -> Slot:
    """A slot for one heavy request of `user_id`, or Busy (nothing taken)."""
    key, token = user_key(user_id), uuid.uuid4().hex
    now = time.time()
    try:
        client = redis_client()
        verdict = client.eval(_ACQUIRE, 2, key, GLOBAL_KEY, now, now + settings.HEAVY_SLOT_TTL_S,
                              settings.HEAVY_PER_USER, settings.HEAVY_GLOBAL, token)
    except redis.RedisError as exc:
        # Fail open: Redis is the Celery broker, so when it is down collection has stopped and
        # /healthz and the collectors page say so; refusing every chart as well would turn a
        # broker outage into a dashboard outage. The web workers (3) still bound the cost.
        log.warning("heavy-request slots unavailable (%s): serving without a limit", exc)
        return Slot(key, None)
    if verdict == 1:
        raise Busy(f"another heavy request of yours (a chart image, a long chart or a full export) is still "
                   f"running: at most {settings.HEAVY_PER_USER} at a time per user (OFFSETWATCH_HEAVY_PER_USER); "
                   f"try again in {RETRY_AFTER_S} s")
    if verdict == 2:
        raise Busy(f"the server is already running {settings.HEAVY_GLOBAL} heavy requests (chart images, long "
                   f"charts, full exports) for other users (OFFSETWATCH_HEAVY_GLOBAL); try again in "
                   f"{RETRY_AFTER_S} s")
    return Slot(key, token)


def at_low_priority(compute: Callable[[], T]) -> T:
    """compute() run in a fresh thread at CPU niceness HEAVY_NICE (0: here, as is): on a busy
    machine a heavy chart gets what the other requests leave, instead of taking a core from them.

    Linux keeps niceness per thread and an unprivileged thread may raise it but never lower it
    again: hence a thread that ends with the computation, not the worker's own. The request's
    database connection is lent to it (the request waits meanwhile: one user at a time, as
    Django's live server does), so it sees the same transaction and opens no connection."""
    if settings.HEAVY_NICE <= 0:
        return compute()
    lent = {alias: connections[alias] for alias in connections}
    outcome: dict = {}

    def run() -> None:
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), settings.HEAVY_NICE)
        except OSError as exc:  # e.g. not Linux: computed at normal priority
            log.debug("heavy computation not reniced: %s", exc)
        for alias, conn in lent.items():
            connections[alias] = conn
        try:
            outcome["value"] = compute()
        except BaseException as exc:
            outcome["error"] = exc

    for conn in lent.values():
        conn.inc_thread_sharing()
    try:
        worker = threading.Thread(target=run, name="heavy-low-priority", daemon=True)
        worker.start()
        worker.join()
    finally:
        for conn in lent.values():
            conn.dec_thread_sharing()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def busy_response(request, exc: Busy) -> HttpResponse:
    """429 with Retry-After: JSON under /api/, plain text elsewhere (a download link or fetch)."""
    if request.path.startswith("/api/"):
        response = JsonResponse({"error": exc.message}, status=429)
    else:
        response = HttpResponse(exc.message, status=429, content_type="text/plain; charset=utf-8")
    response["Retry-After"] = str(exc.retry_after_s)
    return response


def reset() -> None:
    """Drop every slot (tests; an operator after a crash who will not wait for the expiry)."""
    client = redis_client()
    keys = list(client.scan_iter(match=PREFIX + "*", count=1000))
    if keys:
        client.delete(*keys)
