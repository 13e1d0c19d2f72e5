"""The shared cache of chart answers: the page's figure (lag-chart.json), chart.json documents and
PNG/SVG images. In Redis, so the gunicorn workers (and every web host) compute a chart once, not
once each; bounded in entries and bytes, so a viewer walking through ranges cannot fill Redis
(the Celery broker too).

A custom range is widened to whole steps of about a pixel of the chart (quantized): two requests
a few milliseconds (or seconds) apart are the same chart, so they share one entry, where a key
with the exact instants would miss every time.

Keys: `offsetwatch:chart-cache:<what>:...` hold the bodies (with their TTL); the sorted set
`...:index` scores each by its expiry and the hash `...:sizes` holds its bytes, so the bounds are
kept by evicting the entries that expire soonest.
"""
from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, replace
from datetime import datetime
from datetime import timezone as dt_timezone

import redis
from django.conf import settings

from dashboard.heavy import redis_client
from dashboard.params import ChartParams, TimeRange

log = logging.getLogger(__name__)

PREFIX = "offsetwatch:chart-cache:"
INDEX = PREFIX + "index"
SIZES = PREFIX + "sizes"
# A chart is ~1,000 px wide: a range moves by a pixel every span/1000.
PIXELS = 1000
# Quantization steps (seconds): a fixed ladder, so the step itself does not vary with the span's
# milliseconds. The smallest at least span/PIXELS is used.
STEPS_S = (1, 5, 15, 60, 300, 900, 3600, 3 * 3600, 6 * 3600, 86400)
# An answer is kept span/PIXELS (a pixel's worth of time), at most MAX_TTL_S; one that would be
# kept less than MIN_TTL_S (the page polls every 5 s) is not cached at all.
MAX_TTL_S = 300.0
MIN_TTL_S = 5.0

# Atomic: drop index entries whose bodies expired, store the body, then evict the entries that
# expire soonest while the cache holds more than ARGV[3] entries or ARGV[4] bytes. (Bodies are
# deleted by name from the index: a single Redis, as the project runs, not a cluster.)
_PUT = """
local now, ttl_ms = tonumber(ARGV[1]), tonumber(ARGV[2])
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
for _, k in ipairs(expired) do
  redis.call('ZREM', KEYS[1], k)
  redis.call('HDEL', KEYS[2], k)
end
redis.call('SET', KEYS[3], ARGV[5], 'PX', ttl_ms)
redis.call('ZADD', KEYS[1], now + ttl_ms / 1000, KEYS[3])
redis.call('HSET', KEYS[2], KEYS[3], string.len(ARGV[5]))
local total = 0
for _, v in ipairs(redis.call('HVALS', KEYS[2])) do total = total + tonumber(v) end
while redis.call('ZCARD', KEYS[1]) > tonumber(ARGV[3]) or total > tonumber(ARGV[4]) do
  local victim = redis.call('ZPOPMIN', KEYS[1])
  if #victim == 0 then break end
  total = total - tonumber(redis.call('HGET', KEYS[2], victim[1]) or '0')
  redis.call('HDEL', KEYS[2], victim[1])
  redis.call('DEL', victim[1])
end
return 0
"""


def step_s(span_s: float) -> int:
    for step in STEPS_S:
        if step >= span_s / PIXELS:
            return step
    return STEPS_S[-1]


def quantized(params: ChartParams) -> ChartParams:
    """The chart's parameters with a custom range widened outward to whole steps (a preset range
    is left alone: its key is its name). The chart drawn covers at least what was asked."""
    r = params.range
    if r.preset is not None or r.since is None:
        return params
    since_s, until_s = r.since.timestamp(), r.until.timestamp()
    step = step_s(until_s - since_s)
    try:
        since = datetime.fromtimestamp(math.floor(since_s / step) * step, tz=dt_timezone.utc)
        until = datetime.fromtimestamp(math.ceil(until_s / step) * step, tz=dt_timezone.utc)
    except (ValueError, OverflowError, OSError):
        return params  # widened past year 1 or 9999: drawn as asked (there is no data there to share)
    return replace(params, range=TimeRange(since, until, None))


@dataclass(frozen=True)
class Entry:
    key: str
    ttl_s: float  # 0: not cached


def entry(what: str, *, pipeline_id: int, tz_name: str, params: ChartParams, extra: tuple = ()) -> Entry:
    """The cache entry of one chart answer; `params` as quantized() returned them."""
    r = params.range
    span_s = (r.until - r.since).total_seconds()
    ttl = min(MAX_TTL_S, span_s / PIXELS)
    where = r.preset or f"{int(r.since.timestamp())}-{int(r.until.timestamp())}"
    key = ":".join(str(part) for part in (PREFIX + what, pipeline_id, tz_name, params.kind, params.unit, where, *extra))
    return Entry(key, ttl if ttl >= MIN_TTL_S else 0.0)


_down_logged = False


def _redis_failed(exc: Exception) -> None:
    # Said once per outage: the chart is computed instead, and the page polls every 5 s.
    global _down_logged
    if not _down_logged:
        log.warning("chart cache unavailable (%s): charts are computed on every request", exc)
        _down_logged = True


def get(item: Entry) -> bytes | None:
    global _down_logged
    if not item.ttl_s:
        return None
    try:
        body = redis_client().get(item.key)
    except redis.RedisError as exc:
        _redis_failed(exc)
        return None
    _down_logged = False
    return body


def entry_max_bytes() -> int:
    """The largest answer kept: an eighth of the cache, so one answer cannot empty it."""
    return settings.CHART_CACHE_MAX_BYTES // 8


def put(item: Entry, body: bytes) -> bool:
    """Keep `body` (True), unless the entry is not cached, the body is too large or Redis is away."""
    if not item.ttl_s or len(body) > entry_max_bytes():
        return False
    try:
        redis_client().eval(_PUT, 3, INDEX, SIZES, item.key, time.time(), max(1, int(item.ttl_s * 1000)),
                            settings.CHART_CACHE_MAX_ENTRIES, settings.CHART_CACHE_MAX_BYTES, body)
    except redis.RedisError as exc:
        _redis_failed(exc)
        return False
    return True


def stats() -> tuple[int, int]:
    """(entries, bytes) the cache holds (tests, the bench)."""
    client = redis_client()
    return client.zcard(INDEX), sum(int(v) for v in client.hvals(SIZES))


def reset() -> None:
    """Drop every entry (tests; after a change that makes cached charts wrong)."""
    client = redis_client()
    keys = list(client.scan_iter(match=PREFIX + "*", count=1000))
    if keys:
        client.delete(*keys)
