"""Offsets as a Kafka consumer group's committed offsets (`__consumer_offsets`).

The job commits explicitly after each batch's output (never auto-commit: that commits on
read, so a stop loses data). A commit carries `{"batch_time_ms": ...}` as its metadata so a
reader can tell when the batch ran; brokers that drop commit metadata (Tansu does) and groups
committed by other tools have none, and the time the offsets were observed stands in for it.
The store keeps no history: the collectors' samples are the history.
"""
from __future__ import annotations

import json
import time
from concurrent.futures import TimeoutError as FutureTimeout
from urllib.parse import urlparse

from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from streamoffsets.errors import MalformedRecord, OffsetStoreError, StoreUnreachable
from streamoffsets.kafka_clients import admin_client
from streamoffsets.stores.base import StoreBase
from streamoffsets.types import BatchOffsets, HistoryPage, PipelineKey, RowProblem
from streamoffsets.urls import hosts_without_userinfo, mask_url

# librdkafka's "no committed offset" sentinel (OFFSET_INVALID).
NO_OFFSET = -1001

# Errors that say the brokers did not answer (not that they refused one group): the whole store
# is then unreachable, and a poll that met one must fail rather than report fewer groups.
UNREACHABLE_CODES = frozenset({
    KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError._ALL_BROKERS_DOWN, KafkaError._RESOLVE,
    KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.REQUEST_TIMED_OUT, KafkaError.NETWORK_EXCEPTION,
})


def _error_of(exc: BaseException) -> KafkaError | None:
    arg = exc.args[0] if exc.args else None
    return arg if isinstance(arg, KafkaError) else None


def _unreachable(exc: BaseException) -> bool:
    """A timeout of our own wait, or a Kafka error that says no broker answered."""
    if isinstance(exc, FutureTimeout):
        return True
    error = exc if isinstance(exc, KafkaError) else _error_of(exc)
    return error is not None and error.code() in UNREACHABLE_CODES


class KafkaGroupOffsetStore(StoreBase):
    kind = "kafka"
    writable = True
    keeps_history = False

    def __init__(self, bootstrap_servers: str, timeout_s: float = 5.0, config: dict | None = None):
        # No user part: librdkafka takes none there and would print it in its own log lines.
        self.bootstrap = hosts_without_userinfo(bootstrap_servers)
        self.timeout_s = timeout_s
        self.name = mask_url(f"kafka://{bootstrap_servers}")  # in every error: never a credential
        self._config = {
            "bootstrap.servers": self.bootstrap,
            "socket.timeout.ms": int(timeout_s * 1000),
            "reconnect.backoff.max.ms": 1000,
            **(config or {}),
        }
        self._admin: AdminClient | None = None
        # True: the process's kept admin client for this configuration (streamoffsets.kafka_clients),
        # for the collectors, which read the same groups every cycle.
        self.shared_client = False
        self._committers: dict[str, Consumer] = {}
        self._groups: list[str] | None = None  # the ping's listing, for the read that follows

    @classmethod
    def from_url(cls, url: str, timeout_s: float = 5.0, config: dict | None = None) -> "KafkaGroupOffsetStore":
        parsed = urlparse(url)
        if parsed.scheme != "kafka" or not parsed.netloc:
            raise ValueError(f"not a Kafka group-offsets store URL (kafka://host:port[,host:port]): {url!r}")
        return cls(parsed.netloc, timeout_s=timeout_s, config=config)

    def _admin_client(self) -> AdminClient:
        if self._admin is None:
            conf = {**self._config, "request.timeout.ms": int(self.timeout_s * 1000)}
            self._admin = admin_client(conf) if self.shared_client else AdminClient(conf)
        return self._admin

    def ping(self, timeout_s: float) -> None:
        """List the consumer groups, waiting at most `timeout_s`: a broker that is down or does not
        answer fails here in that time, not after the full timeout of each request. The listing
        is kept for the read that follows (every read starts with it): the cluster's metadata,
        asked before, cost more than the listing (every topic's partitions, 10,000 objects at
        10,000 partitions) and the read did not use it."""
        self._groups = self._list_groups(timeout_s, timeout_s, "ping", f"no answer from the brokers within {timeout_s:g} s")

    def close(self) -> None:
        for consumer in self._committers.values():
            consumer.close()
        self._committers.clear()
        self._admin = None

    # --- writes --------------------------------------------------------------------------------
    def save_batch(self, batch: BatchOffsets) -> None:
        """Commit the batch's offsets for its group, synchronously, after the batch's output."""
        if not batch.offsets:
            raise ValueError(f"batch of {batch.topic}/{batch.group} has no partition offsets to commit")
        consumer = self._committers.get(batch.group)
        if consumer is None:
            # A consumer that never subscribes: it commits as a standalone member, which the
            # broker accepts while no active member of the group owns the partitions.
            consumer = Consumer({**self._config, "group.id": batch.group, "enable.auto.commit": False})
            self._committers[batch.group] = consumer
        metadata = json.dumps({"batch_time_ms": batch.batch_time_ms})
        tps = [TopicPartition(batch.topic, int(p), int(o), metadata=metadata) for p, o in sorted(batch.offsets.items())]
        try:
            results = consumer.commit(offsets=tps, asynchronous=False)
        except KafkaException as exc:
            raise StoreUnreachable(self.name, f"{batch.group}/{batch.topic}", f"commit failed: {exc}") from exc
        failed = [tp for tp in results or [] if tp.error is not None]
        if failed:
            raise OffsetStoreError(
                self.name, f"{batch.group}/{batch.topic}",
                "commit refused for " + ", ".join(f"partition {tp.partition}: {tp.error.str()}" for tp in failed),
            )

    # --- reads ---------------------------------------------------------------------------------
    def _group_offsets(self, group: str) -> list[TopicPartition]:
        request = [ConsumerGroupTopicPartitions(group)]
        try:
            futures = self._admin_client().list_consumer_group_offsets(request, request_timeout=self.timeout_s)
            result = futures[group].result(timeout=self.timeout_s * 2)
        except (KafkaException, FutureTimeout) as exc:
            raise StoreUnreachable(
                self.name, group, f"cannot read committed offsets: {exc or type(exc).__name__}"
            ) from exc
        return [tp for tp in result.topic_partitions if tp.offset != NO_OFFSET]

    def _decode(self, group: str, topic: str, tps: list[TopicPartition], observed_ms: int) -> BatchOffsets:
        batch_times = {}
        offsets = {}
        for tp in tps:
            key = f"{group}/{topic}/{tp.partition}"
            if tp.error is not None:
                raise MalformedRecord(self.name, key, f"broker reported {tp.error.str()}")
            if tp.offset < 0:
                raise MalformedRecord(self.name, key, f"committed offset {tp.offset} is negative")
            offsets[tp.partition] = tp.offset
            if tp.metadata:
                try:
                    batch_times[tp.partition] = int(json.loads(tp.metadata)["batch_time_ms"])
                except (ValueError, KeyError, TypeError):
                    pass  # metadata written by another tool: not ours to interpret
        # Per-partition write times only when every partition carries our metadata (a commit's
        # time is not in what the broker returns; Tansu and other tools' commits have none).
        written = batch_times if batch_times and batch_times.keys() == offsets.keys() else None
        if batch_times:
            return BatchOffsets(topic, group, max(batch_times.values()), offsets, written_ms=written)
        return BatchOffsets(topic, group, observed_ms, offsets, time_observed=True)

    def load_latest(self, topic: str, group: str) -> BatchOffsets | None:
        observed_ms = int(time.time() * 1000)
        tps = [tp for tp in self._group_offsets(group) if tp.topic == topic]
        return self._decode(group, topic, tps, observed_ms) if tps else None

    def history(
        self, topic: str, group: str, start_ms: int = 0, end_ms: int | None = None, limit: int | None = None
    ) -> HistoryPage:
        """The current committed offsets as one batch (the group keeps no history)."""
        page = HistoryPage()
        observed_ms = int(time.time() * 1000)
        tps = [tp for tp in self._group_offsets(group) if tp.topic == topic]
        if not tps:
            return page
        try:
            batch = self._decode(group, topic, tps, observed_ms)
        except MalformedRecord as exc:
            page.problems.append(RowProblem(self.name, exc.key, exc.problem))
            return page
        if batch.batch_time_ms >= start_ms and (end_ms is None or batch.batch_time_ms <= end_ms) and limit != 0:
            page.batches.append(batch)
        return page

    def list_groups(self) -> list[str]:
        """Every consumer group of the cluster. StoreUnreachable when any broker's answer is
        missing: ListConsumerGroups asks every broker and reports those that did not answer in
        `errors`, not as an exception, so an unreachable cluster would otherwise read as one with
        no groups (and a partly answered listing as one whose groups went away)."""
        groups, self._groups = self._groups, None
        if groups is not None:  # the ping's, just listed
            return groups
        return self._list_groups(self.timeout_s, self.timeout_s * 2, "groups", "cannot list consumer groups")

    def _list_groups(self, request_timeout_s: float, wait_s: float, key: str, failed: str) -> list[str]:
        try:
            result = self._admin_client().list_consumer_groups(request_timeout=request_timeout_s).result(timeout=wait_s)
        except (KafkaException, FutureTimeout) as exc:
            raise StoreUnreachable(self.name, key, f"{failed}: {exc or type(exc).__name__}") from exc
        if result.errors:
            errors = "; ".join(e.str() if isinstance(e, KafkaError) else str(e) for e in result.errors)
            raise StoreUnreachable(self.name, key, f"{failed}: {errors}")
        return sorted(g.group_id for g in result.valid)

    def _all_group_offsets(self) -> tuple[dict[str, list[TopicPartition]], list[RowProblem]]:
        """Every group's committed offsets: one request per group, all sent before any is awaited."""
        groups = self.list_groups()
        admin = self._admin_client()
        futures = {}
        for group in groups:
            try:
                futures[group] = admin.list_consumer_group_offsets(
                    [ConsumerGroupTopicPartitions(group)], request_timeout=self.timeout_s
                )[group]
            except KafkaException as exc:
                raise StoreUnreachable(self.name, group, f"cannot read committed offsets: {exc}") from exc
        offsets: dict[str, list[TopicPartition]] = {}
        problems: list[RowProblem] = []
        for group, future in futures.items():
            try:
                result = future.result(timeout=self.timeout_s * 2)
            except (KafkaException, FutureTimeout) as exc:
                if _unreachable(exc):  # the broker went away: the poll fails, it does not shrink
                    raise StoreUnreachable(
                        self.name, group, f"cannot read committed offsets: {exc or type(exc).__name__}"
                    ) from exc
                problems.append(RowProblem(self.name, group, f"cannot read committed offsets: {exc}"))
                continue
            offsets[group] = [tp for tp in result.topic_partitions if tp.offset != NO_OFFSET]
        return offsets, problems

    def list_pipelines(self) -> tuple[list[PipelineKey], list[RowProblem]]:
        """Every (topic, group) with a committed offset."""
        offsets, problems = self._all_group_offsets()
        found = {PipelineKey(tp.topic, group) for group, tps in offsets.items() for tp in tps}
        return sorted(found), problems

    def snapshot(self) -> tuple[dict[PipelineKey, BatchOffsets], list[RowProblem]]:
        """The current offsets of every pipeline in one pass (what a collector cycle reads)."""
        observed_ms = int(time.time() * 1000)
        offsets, problems = self._all_group_offsets()
        result: dict[PipelineKey, BatchOffsets] = {}
        for group, tps in offsets.items():
            by_topic: dict[str, list[TopicPartition]] = {}
            for tp in tps:
                by_topic.setdefault(tp.topic, []).append(tp)
            for topic, topic_tps in by_topic.items():
                try:
                    result[PipelineKey(topic, group)] = self._decode(group, topic, topic_tps, observed_ms)
                except MalformedRecord as exc:
                    problems.append(RowProblem(self.name, exc.key, exc.problem))
        return result, problems
