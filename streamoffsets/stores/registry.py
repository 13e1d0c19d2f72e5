"""Which store a URL names, and opening it: the one place that knows every store module (each
store imports only streamoffsets.stores.base, so there is no cycle)."""
from __future__ import annotations

from urllib.parse import urlparse

from streamoffsets.stores.base import OffsetStore

STORE_KINDS = {"hbase", "zk", "kafka", "file", "checkpoint"}
# The URL scheme names the store; the dashboard calls ZooKeeper stores "zookeeper".
KIND_BY_SCHEME = {"hbase": "hbase", "zk": "zookeeper", "kafka": "kafka", "file": "file", "checkpoint": "checkpoint"}


def store_kind_of_url(url: str) -> str:
    """The store kind a URL names, checking it has what that kind needs; ValueError says what is wrong."""
    parsed = urlparse(url.strip())
    kind = KIND_BY_SCHEME.get(parsed.scheme)
    if kind is None:
        raise ValueError(f"unknown offset store URL {url!r}: use one of {', '.join(sorted(STORE_KINDS))}://...")
    if kind in {"hbase", "zookeeper", "kafka"} and not parsed.netloc:
        raise ValueError(f"{url!r} names no server: {parsed.scheme}://host:port/...")
    if kind in {"file", "checkpoint"} and (parsed.netloc or not parsed.path.startswith("/")):
        raise ValueError(f"{url!r} must be an absolute local path: {parsed.scheme}:///path/to/dir")
    return kind


def open_store(url: str, timeout_s: float = 5.0, kafka_config: dict | None = None) -> OffsetStore:
    """Open the store a URL names (see the table above). ValueError names a bad URL.
    `kafka_config`: librdkafka properties (security.protocol, sasl.*, ssl.*) for kafka:// stores."""
    scheme = urlparse(url).scheme
    if scheme == "hbase":
        from streamoffsets.stores.hbase import HBaseOffsetStore

        return HBaseOffsetStore.from_url(url, timeout_ms=int(timeout_s * 1000))
    if scheme == "zk":
        from streamoffsets.stores.zookeeper import ZooKeeperOffsetStore

        return ZooKeeperOffsetStore.from_url(url, timeout_s=timeout_s)
    if scheme == "kafka":
        from streamoffsets.stores.kafka_groups import KafkaGroupOffsetStore

        return KafkaGroupOffsetStore.from_url(url, timeout_s=timeout_s, config=kafka_config)
    if scheme == "file":
        from streamoffsets.stores.offsetfile import OffsetFileStore

        return OffsetFileStore.from_url(url)
    if scheme == "checkpoint":
        from streamoffsets.stores.checkpoint import CheckpointStore

        return CheckpointStore.from_url(url)
    raise ValueError(f"unknown offset store URL {url!r}: use one of {', '.join(sorted(STORE_KINDS))}://...")
