"""The worker's broker consumer, reconnecting quickly after the broker comes back.

Celery's consumer retries a lost broker connection on kombu's default schedule (2 s, then 4, 6,
... up to 30 s apart), so after a Redis outage of half a minute the workers came back up to 12 s
late, and every source with them. Retrying every 0.5-1 s costs one TCP connect attempt a second
while Redis is away and brings collection back within a poll interval (bench/faults.py).
"""
from __future__ import annotations

import functools

from celery.worker.consumer import Consumer


class QuickReconnectConsumer(Consumer):
    RETRY = {"interval_start": 0.5, "interval_step": 0.5, "interval_max": 1.0}

    def ensure_connected(self, conn):
        conn.ensure_connection = functools.partial(conn.ensure_connection, **self.RETRY)
        return super().ensure_connected(conn)
