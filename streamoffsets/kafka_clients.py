"""Kafka admin clients kept across reads, one per configuration per process.

A new AdminClient connects to the bootstrap brokers, asks ApiVersions and Metadata and starts
librdkafka's threads before its first request is sent: on the 10,000-partition collection cycle
that was about 150-190 ms of a 0.77 s cycle (the ping's first Metadata on a new client took
87 ms, against a few on a kept one). The collectors read the same clusters every few seconds, so
`read_watermarks` and `read_store` ask here instead of building one per poll.

- A client whose read failed is dropped (`clients_drop`, by the collectors' reads on any
  exception): the next read meets the brokers on a fresh connection, as before, so a broker
  that went away, froze or came back elsewhere costs no more than one failed poll.
- A forked process never uses its parent's clients (librdkafka's threads do not survive a
  fork: a Celery pool process starts empty).
- At most MAX_CLIENTS are kept (the oldest dropped first): a key holds the whole configuration
  (brokers, timeouts, security settings), so clusters times their timeouts, a handful per process.
"""
from __future__ import annotations

import os
import threading

from confluent_kafka.admin import AdminClient

MAX_CLIENTS = 32

_lock = threading.Lock()
_clients: dict[tuple, AdminClient] = {}
_pid = os.getpid()


def _key(conf: dict) -> tuple:
    return tuple(sorted((str(k), repr(v)) for k, v in conf.items()))


def admin_client(conf: dict) -> AdminClient:
    """The process's AdminClient for exactly this configuration, made on first use."""
    global _pid
    key = _key(conf)
    with _lock:
        if os.getpid() != _pid:  # forked: the parent's clients are not ours to use (nor to destroy)
            _clients.clear()
            _pid = os.getpid()
        client = _clients.get(key)
        if client is None:
            while len(_clients) >= MAX_CLIENTS:
                _clients.pop(next(iter(_clients)))
            client = _clients[key] = AdminClient(conf)
        return client


def clients_drop(bootstrap: str) -> int:
    """Forget every kept client of these bootstrap servers (a read of them failed). Returns how many."""
    with _lock:
        gone = [k for k in _clients if ("bootstrap.servers", repr(bootstrap)) in k]
        for k in gone:
            del _clients[k]
        return len(gone)


def clients_kept() -> int:
    with _lock:
        return len(_clients)
