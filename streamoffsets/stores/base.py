"""The one small interface every offset store implements (`OffsetStore`), with what stores share;
streamoffsets.stores.registry opens the store a URL names:

| URL                                   | store                                  | writable | history |
|---------------------------------------|----------------------------------------|----------|---------|
| hbase://host:9090/table               | HBase, Cloudera layout (one row/batch) | yes      | yes     |
| zk://host:2181[,host2:2181]/chroot    | ZooKeeper /consumers/<g>/offsets/<t>/<p> | yes    | no      |
| kafka://bootstrap1:9092,bootstrap2    | Kafka consumer-group committed offsets | yes      | no      |
| file:///root                          | offset file <root>/<g>/<t>/gtoffset    | yes      | no      |
| checkpoint:///path                    | Structured Streaming checkpoint dir(s) | no       | yes     |

Stores without history return their current state as (at most) one batch; the collectors'
samples are then the history. Options: `hbase://...?transport=framed&protocol=compact` (the
Thrift server's; default buffered, binary), `zk://user:password@hosts/chroot` (digest ACLs).
"""
from __future__ import annotations

import os
from typing import Protocol, runtime_checkable
from urllib.parse import unquote, urlparse

from streamoffsets.errors import StoreUnreachable
from streamoffsets.types import BatchOffsets, HistoryPage, PipelineKey, RowProblem


@runtime_checkable
class OffsetStore(Protocol):
    kind: str
    name: str  # the store's URL, used in every error and problem it reports
    writable: bool
    keeps_history: bool

    def save_batch(self, batch: BatchOffsets) -> None:
        """Save a finished batch's offsets (after its output). ReadOnlyStore if not writable."""

    def load_latest(self, topic: str, group: str) -> BatchOffsets | None:
        """The newest saved offsets for (topic, group), None if none; MalformedRecord if unreadable."""

    def history(
        self, topic: str, group: str, start_ms: int = 0, end_ms: int | None = None, limit: int | None = None
    ) -> HistoryPage:
        """Batches in [start_ms, end_ms], oldest first; malformed records are reported, not raised."""

    def list_pipelines(self) -> tuple[list[PipelineKey], list[RowProblem]]:
        """The (topic, group) pairs the store holds, and records that could not be read."""

    def close(self) -> None: ...


class StoreBase:
    """What every store shares: `with store:` closes it. Stores holding no connection keep the
    no-op `close`."""

    def close(self) -> None:
        pass  # nothing held open between calls

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def require_listable(store_name: str, path, what: str) -> None:
    """A local directory a store reads must be listable: an unmounted share or a typo fails the
    read (StoreUnreachable) instead of reading as a healthy store holding no pipelines."""
    try:
        with os.scandir(path):
            pass
    except FileNotFoundError as exc:
        raise StoreUnreachable(store_name, str(path), f"{what} does not exist") from exc
    except OSError as exc:
        raise StoreUnreachable(store_name, str(path), f"cannot list the {what}: {exc}") from exc


def local_path_from_url(url: str, scheme: str, what: str) -> str:
    """The absolute local path of `scheme:///path` (percent-escapes decoded); ValueError otherwise."""
    parsed = urlparse(url.strip())
    if parsed.scheme != scheme or parsed.netloc or not parsed.path.startswith("/"):
        raise ValueError(f"not {what} URL ({scheme}:///absolute/path): {url!r}")
    return unquote(parsed.path)
