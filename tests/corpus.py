"""The conformance corpus's writers and expectations (issue #13; the table is in
tests/integration/test_conformance.py).

Each store kind is written the way its real writers leave it, through the public clients only:
confluent-kafka consumer commits (a Kafka group), kazoo (an old consumer or a Storm spout in
ZooKeeper), happybase (the Cloudera HBase layout), plain files (the "SEO" gtoffset file) and
checkpoint directories as Spark's HDFSMetadataLog writes them. Nothing here calls the product's
own store classes: the product must read what the platforms write.
"""
from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from confluent_kafka import Consumer, TopicPartition

KINDS = ("kafka-group", "zookeeper", "hbase", "file", "checkpoint")
STORE_KIND = {"kafka-group": "kafka", "zookeeper": "zookeeper", "hbase": "hbase", "file": "file",
              "checkpoint": "checkpoint"}


@dataclass
class Part:
    """What the API must report for one partition. `method` is the lag-in-seconds method; the
    seconds follow from it: "caught up" 0.0, "record timestamp" the age of the record at the
    committed position (checked against the row's own clock), anything else None."""

    committed: int | None
    lag: int | None
    state: str
    method: str = ""
    lag_absent: str | None = None
    high: int | None = None  # the high watermark; when None, committed + lag (both must be known)
    upper_bound: bool = False  # the lag counts offsets with gaps (a compacted topic): at most that many
    status: str = "OK"  # the partition's own status (streamoffsets.partition_rules)
    status_reason: str | re.Pattern = ""  # a pattern where the reason holds measured durations


@dataclass
class Expect:
    """What the API must report for one pipeline (one group on one topic)."""

    partitions: dict[int, Part]
    total_lag: int | None
    status: str
    # Each reported reason, in order, as given (a pattern where it holds measured durations).
    reasons: list[str | re.Pattern] = field(default_factory=list)
    lag_seconds_method: str | None = None


@dataclass
class Row:
    """One named situation: the store kinds it runs on, how it is written, what must be read back.
    `write(world)` returns {group: Expect} (the names are the world's, made unique per row)."""

    name: str
    kinds: tuple[str, ...]
    write: Callable[["World"], dict[str, Expect]]
    seam: str = ""  # why part of it enters at the watermark seam (Tansu cannot produce it)


class World:
    """One row's stores, written through the public clients. Times are wall-clock ms."""

    def __init__(self, kind: str, stack, tmp_path: Path, unique_name):
        self.kind, self.stack, self.tmp_path, self.unique_name = kind, stack, tmp_path, unique_name
        self.bootstrap = stack.kafka_bootstrap
        self.started_s = time.time()
        self._checkpoint_batches: dict[str, int] = {}
        self._zk = None
        self._hbase = None
        if kind == "kafka-group":
            self.url = f"kafka://{self.bootstrap}"
        elif kind == "zookeeper":
            from kazoo.client import KazooClient

            self._zk = KazooClient(hosts=stack.zookeeper_hosts, timeout=5)
            self._zk.start(timeout=5)
            self.chroot = f"/{unique_name('corpus')}"
            self._zk.create(self.chroot)
            self.url = f"zk://{stack.zookeeper_hosts}{self.chroot}"
        elif kind == "hbase":
            import happybase

            self.table = unique_name("corpus").replace("-", "_")
            self._hbase = happybase.Connection(stack.hbase_host, stack.hbase_port, timeout=5000)
            self._hbase.create_table(self.table, {"offsets": dict(max_versions=1, time_to_live=30 * 24 * 3600)})
            self.url = f"hbase://{stack.hbase_host}:{stack.hbase_port}/{self.table}"
        elif kind == "file":
            self.root = tmp_path / "gtoffsets"
            self.root.mkdir()
            self.url = f"file://{self.root}"
        elif kind == "checkpoint":
            self.root = tmp_path / "checkpoints"
            self.root.mkdir()
            self.url = f"checkpoint://{self.root}"
        else:
            raise ValueError(kind)

    def close(self) -> None:
        if self._zk is not None:
            self._zk.delete(self.chroot, recursive=True)
            self._zk.stop()
            self._zk.close()
        if self._hbase is not None:
            self._hbase.close()

    def elapsed_s(self) -> float:
        return time.time() - self.started_s

    # --- the writers ------------------------------------------------------------------------

    def commit(self, topic: str, group: str, offsets: dict[int, int], batch_ms: int | None = None) -> None:
        """The group's position on the topic: `offsets` = {partition: next offset to read}."""
        batch_ms = int(time.time() * 1000) if batch_ms is None else batch_ms
        getattr(self, "_commit_" + self.kind.replace("-", "_"))(topic, group, offsets, batch_ms)

    def _commit_kafka_group(self, topic: str, group: str, offsets: dict[int, int], batch_ms: int) -> None:
        # What a consumer does after processing: commit the next offsets (no group join needed
        # for a manual commit; the broker stores them under the group id).
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": group, "enable.auto.commit": False})
        try:
            consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in sorted(offsets.items())],
                            asynchronous=False)
        finally:
            consumer.close()

    def _commit_zookeeper(self, topic: str, group: str, offsets: dict[int, int], batch_ms: int) -> None:
        # The old high-level consumer's layout (also Storm's and many in-house spouts'):
        # /consumers/<group>/offsets/<topic>/<partition> = the offset as decimal text.
        base = f"{self.chroot}/consumers/{group}/offsets/{topic}"
        for p, o in sorted(offsets.items()):
            path = f"{base}/{p}"
            if self._zk.exists(path):
                self._zk.set(path, str(o).encode())
            else:
                self._zk.create(path, str(o).encode(), makepath=True)

    def _commit_hbase(self, topic: str, group: str, offsets: dict[int, int], batch_ms: int) -> None:
        # Cloudera's layout: row <topic>:<group>:<batch ms, 13 digits>, one cell per partition.
        table = self._hbase.table(self.table)
        table.put(f"{topic}:{group}:{batch_ms:013d}".encode(),
                  {f"offsets:{p}".encode(): str(o).encode() for p, o in offsets.items()})

    def _commit_file(self, topic: str, group: str, offsets: dict[int, int], batch_ms: int) -> None:
        # The gtoffset file v1, replaced atomically as its writers do.
        directory = self.root / group / topic
        directory.mkdir(parents=True, exist_ok=True)
        lines = ["offsetwatch-gtoffset v1", f"batch_time_ms={batch_ms}",
                 *(f"{p} {o}" for p, o in sorted(offsets.items())), f"end partitions={len(offsets)}"]
        tmp = directory / ".gtoffset.corpus.tmp"
        tmp.write_text("\n".join(lines) + "\n")
        tmp.replace(directory / "gtoffset")

    def _commit_checkpoint(self, topic: str, group: str, offsets: dict[int, int], batch_ms: int) -> None:
        # One committed batch of a query whose checkpoint directory is named `group`.
        batch_id = self._checkpoint_batches.get(group, -1) + 1
        self._checkpoint_batches[group] = batch_id
        spark_batch(self.root / group, batch_id, topic, offsets, batch_ms, committed=True)


def spark_batch(ckpt: Path, batch_id: int, topic: str, offsets: dict[int, int], ts_ms: int, committed: bool) -> None:
    """offsets/N (and commits/N when the batch is done) as Spark's HDFSMetadataLog leaves them:
    compact JSON, no final newline, .crc files beside (see tests/unit/test_store_checkpoint.py)."""
    for sub in ("offsets", "commits"):
        (ckpt / sub).mkdir(parents=True, exist_ok=True)
    (ckpt / "metadata").write_text('{"id":"5f0e6b5e-7d0a-4f7c-9b9e-0c3b1d7c6a11"}')
    meta = json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": ts_ms, "conf": {}}, separators=(",", ":"))
    source = json.dumps({topic: {str(p): o for p, o in offsets.items()}}, separators=(",", ":"))
    (ckpt / "offsets" / str(batch_id)).write_text(f"v1\n{meta}\n{source}")
    (ckpt / "offsets" / f".{batch_id}.crc").write_bytes(b"crc\x00\x01")
    if committed:
        (ckpt / "commits" / str(batch_id)).write_text('v1\n{"nextBatchWatermarkMs":0}')
        (ckpt / "commits" / f".{batch_id}.crc").write_bytes(b"crc\x00\x02")


def check_pipeline(detail: dict, partitions_answer: dict, expect: Expect, elapsed_s: float) -> None:
    """Every number the API reports for the pipeline against the row's expectation."""
    parts = {r["partition"]: r for r in detail["partitions"]}
    assert sorted(parts) == sorted(expect.partitions), detail["partitions"]
    for p, want in expect.partitions.items():
        got = parts[p]
        assert (got["committed"], got["lag"], got["state"], got["lag_method"], got["lag_absent"]) == \
            (want.committed, want.lag, want.state, want.method, want.lag_absent), (p, got)
        high = want.high if want.high is not None else want.committed + want.lag
        in_range = want.state in ("ok", "lagging")
        # Tansu never moves the low watermark (delete_records is unsupported): low 0, nothing lost,
        # so the retention margin is the committed offset and no deadline exists.
        assert (got["low"], got["high"], got["messages_lost"]) == (0, high, 0), (p, got)
        assert got["lag_is_upper_bound"] is want.upper_bound, (p, got)
        assert (got["retention_margin"], got["retention_seconds_left"]) == \
            (want.committed if in_range else None, None), (p, got)
        if want.method == "caught up":
            assert got["lag_seconds"] == 0.0, (p, got)
        elif want.method == "record timestamp":
            # The record at the committed position was produced during this row.
            assert got["lag_seconds"] is not None and 0.0 <= got["lag_seconds"] <= elapsed_s + 1.0, (p, got)
        elif want.method.startswith("at least:"):  # a lower bound: the time the high watermark stood still
            assert got["lag_seconds"] is not None and 0.0 <= got["lag_seconds"] <= elapsed_s + 1.0, (p, got)
        else:
            assert got["lag_seconds"] is None, (p, got)
        assert got["status"] == want.status and _matches(want.status_reason, got["status_reason"]), (p, got)
    assert partitions_answer["partitions"] == detail["partitions"]
    assert detail["total_lag"] == expect.total_lag, detail["total_lag"]
    assert detail["status"] == expect.status and len(detail["reasons"]) == len(expect.reasons) and all(
        _matches(want, got) for want, got in zip(expect.reasons, detail["reasons"])), (detail["status"], detail["reasons"])
    assert detail["lag_seconds_method"] == expect.lag_seconds_method, detail["lag_seconds_method"]


def _matches(want: str | re.Pattern, got: str) -> bool:
    return bool(want.fullmatch(got)) if isinstance(want, re.Pattern) else want == got
