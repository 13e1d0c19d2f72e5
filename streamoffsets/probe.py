"""Does the server behind a store URL answer as the kind the URL declares? (issue #12, obs. 8)

Asked once when an operator saves a store in the admin, so that `hbase://` pointed at a
ZooKeeper port is refused there, with a message saying what answered, rather than polled
forever with a Thrift error every viewer sees. A server that cannot be reached at all is not
judged (it may be started later; the collectors will say it is down); only a server that
accepts connections and then fails the kind's own ping is a problem.
"""
from __future__ import annotations

import socket
from urllib.parse import urlsplit

from streamoffsets.stores.registry import open_store
from streamoffsets.urls import DEFAULT_PORTS, mask_secrets

KIND_NAMES = {"hbase": "an HBase Thrift server", "zk": "ZooKeeper", "kafka": "a Kafka broker"}


def _first_host(netloc: str, scheme: str) -> tuple[str, int] | None:
    entry = netloc.rpartition("@")[2].split(",")[0]
    if entry.startswith("["):
        host, _, rest = entry[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    else:
        host, _, port = entry.partition(":")
    if not host:
        return None
    try:
        return host, int(port) if port else DEFAULT_PORTS[scheme]
    except ValueError:
        return None


def _answers_as_zookeeper(host: str, port: int, timeout_s: float) -> bool:
    """ZooKeeper answers the four-letter word "ruok" with "imok", or names its whitelist when
    four-letter words are off; no other server says either."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as conn:
            conn.settimeout(timeout_s)
            conn.sendall(b"ruok")
            reply = conn.recv(200)
    except OSError:
        return False
    return reply.startswith(b"imok") or b"whitelist" in reply


def server_kind_problem(url: str, *, timeout_s: float, kafka_config: dict | None = None) -> str | None:
    """None when the server answers as the URL's kind, or cannot be reached now, or the URL is not
    a network store; otherwise what is wrong, with the URL's secrets masked."""

    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    if scheme not in KIND_NAMES:
        return None
    address = _first_host(parts.netloc, scheme)
    if address is None:
        return None
    host, port = address
    try:
        socket.create_connection((host, port), timeout=timeout_s).close()
    except OSError:
        return None  # nothing listens (yet): not judged here
    try:
        store = open_store(url, timeout_s=timeout_s, kafka_config=kafka_config)
    except ValueError:
        return None  # a malformed URL: validate_store_url says what is wrong with it
    try:
        with store:
            store.ping(timeout_s)
        return None
    except Exception as exc:  # any failure of the kind's own ping, whatever the client raises
        why = mask_secrets(f"{type(exc).__name__}: {exc}", [url])
    what = ""
    if scheme != "zk" and _answers_as_zookeeper(host, port, timeout_s):
        what = " (it answers as ZooKeeper: a zk:// URL?)"
    return (f"{host}:{port} accepts connections but does not answer as {KIND_NAMES[scheme]}{what}; "
            f"its ping said: {why[:300]}")
