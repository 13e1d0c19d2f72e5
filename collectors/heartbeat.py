"""beat's heartbeat: the process sending collect_all (beat) notes the time in Redis, so the
dashboard tells "beat is down" from "no worker runs what beat sends". Imports no model: it runs
in the beat process at publish time."""
from __future__ import annotations

import logging
import time

import redis
from django.conf import settings

from dashboard.monitoring.redis_keys import BEAT_SENT_KEY

log = logging.getLogger(__name__)


def beat_sent_record() -> None:
    """Never raises: a publish must not fail over a heartbeat."""
    try:
        client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2)
        try:
            client.set(BEAT_SENT_KEY, repr(time.time()), ex=7 * 86400)
        finally:
            client.close()
    except Exception as exc:
        log.warning("beat heartbeat not written (%s)", exc)
