"""Kafka side of the library: topic partitions and their low/high watermarks.

Watermarks come from ListOffsets requests (earliest and latest) covering every partition of
the asked topics at once, so a cycle costs two round trips per broker, not two per partition.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, OffsetSpec, ResourceType

from streamoffsets.errors import OffsetStoreError, StoreUnreachable
from streamoffsets.kafka_clients import admin_client
from streamoffsets.types import Watermarks
from streamoffsets.urls import hosts_without_userinfo, mask_url


class MissingTopic(OffsetStoreError):
    """The topic does not exist on the cluster."""


@dataclass
class WatermarkResult:
    by_topic: dict[str, dict[int, Watermarks]] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)
    # Topics whose cleanup.policy includes "compact": the log cleaner leaves offset gaps, so
    # high - committed counts offsets, an upper bound on the messages left (issue #13).
    compacted: set[str] = field(default_factory=set)


Position = tuple[str, int, int]  # (topic, partition, offset)


@dataclass
class RecordTimes:
    """What a read of the records at committed positions found."""

    found: dict[Position, int] = field(default_factory=dict)  # position -> record timestamp (epoch ms)
    gone: dict[Position, str] = field(default_factory=dict)  # position -> why there is no record to read
    unread: list[Position] = field(default_factory=list)  # not reached within the budget


class KafkaWatermarkReader:
    def __init__(
        self, bootstrap_servers: str, timeout_s: float = 5.0, config: dict | None = None, chunk_size: int = 500,
        shared_client: bool = False,
    ):
        # `shared_client`: the process's kept admin client for this configuration
        # (streamoffsets.kafka_clients), for a caller that reads the same cluster again and again.
        # No user part: librdkafka takes none there and would print it in its own log lines.
        self.bootstrap = hosts_without_userinfo(bootstrap_servers)
        self.timeout_s = timeout_s
        self.chunk_size = chunk_size
        self.name = mask_url(f"kafka://{bootstrap_servers}")  # in every error: never a credential
        # The cluster's client configuration (security.protocol, sasl.*, ssl.*): every client this
        # reader builds uses it, the record-timestamp consumer as well as the admin client.
        self.config = dict(config or {})
        conf = {
            "bootstrap.servers": self.bootstrap,
            "socket.timeout.ms": int(timeout_s * 1000),
            "request.timeout.ms": int(timeout_s * 1000),
            # Fail fast instead of reconnecting forever when the cluster is down.
            "reconnect.backoff.max.ms": 1000,
        }
        conf.update(config or {})
        self._config = dict(config or {})  # the cluster's client properties, for the record consumer too
        self._admin = admin_client(conf) if shared_client else AdminClient(conf)

    def ping(self, timeout_s: float) -> None:
        """Read the cluster's topic metadata, waiting at most `timeout_s`: a broker that is down
        or does not answer fails here in that time. The metadata is kept for the next call."""
        self._metadata = self._topic_metadata(timeout_s)

    def _topic_metadata(self, timeout_s: float | None = None) -> dict:
        # Metadata of all topics in one request. Asking for one named topic can auto-create it
        # on brokers that allow auto-creation (Tansu does), turning a typo into a new topic.
        if timeout_s is None and getattr(self, "_metadata", None) is not None:
            metadata, self._metadata = self._metadata, None  # the ping's, read just before
            return metadata
        try:
            return self._admin.list_topics(timeout=timeout_s or self.timeout_s).topics
        except KafkaException as exc:
            raise StoreUnreachable(self.name, "metadata", f"cannot read topic metadata within "
                                   f"{timeout_s or self.timeout_s:g} s: {exc}") from exc

    @staticmethod
    def _partitions_from(metadata: dict, name: str, topic: str) -> list[int]:
        info = metadata.get(topic)
        if info is None or info.error is not None:
            reason = info.error.str() if info is not None and info.error else "not found"
            raise MissingTopic(name, topic, f"topic does not exist ({reason})")
        return sorted(info.partitions)

    def partitions(self, topic: str) -> list[int]:
        return self._partitions_from(self._topic_metadata(), self.name, topic)

    def watermarks(self, topics: list[str]) -> "WatermarkResult":
        """Low and high watermarks of every partition of each topic.

        A topic that does not exist is reported in `missing` (topic -> reason) so the other
        topics are still read; an unreachable cluster raises StoreUnreachable.
        """
        result = WatermarkResult()
        tps: list[TopicPartition] = []
        metadata = self._topic_metadata() if topics else {}
        for topic in topics:
            try:
                tps.extend(TopicPartition(topic, p) for p in self._partitions_from(metadata, self.name, topic))
                result.by_topic[topic] = {}
            except MissingTopic as exc:
                result.missing[topic] = exc.problem
        if not tps:
            return result
        low = self._list_offsets(tps, OffsetSpec.earliest())
        high = self._list_offsets(tps, OffsetSpec.latest())
        for tp in tps:
            key = (tp.topic, tp.partition)
            result.by_topic[tp.topic][tp.partition] = Watermarks(tp.partition, low[key], high[key])
        return result

    def record_timestamps(self, positions: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        """The timestamp (epoch ms) of the record at each (topic, partition) offset, where the
        broker returns one: the write time of the next unprocessed message, for lag in seconds.

        One consumer assigned to every position (no group membership, nothing committed) reads
        the first record of each; fetches are capped small because only one record per
        partition is wanted. Positions without a record in time (compacted away, no timestamp,
        slow broker) are left out: the caller falls back to interpolation.
        """
        if not positions:
            return {}
        errors: list[KafkaError] = []  # the client's connection errors (a wrong protocol, auth)

        def on_error(err: KafkaError) -> None:
            errors.append(err)

        consumer = Consumer({
            "bootstrap.servers": self.bootstrap,
            "group.id": "offset-watch-record-timestamps",  # required by the client; never joined
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "socket.timeout.ms": int(self.timeout_s * 1000),
            "max.partition.fetch.bytes": 4096,  # a batch larger than this still comes whole
            "fetch.wait.max.ms": 50,
            "reconnect.backoff.max.ms": 1000,
            **self.config,
            "error_cb": on_error,
        })
        found: dict[tuple[str, int], int] = {}
        try:
            consumer.assign([TopicPartition(t, p, o) for (t, p), o in positions.items()])
            deadline = time.monotonic() + self.timeout_s
            while len(found) < len(positions) and time.monotonic() < deadline:
                # consume() waits until it has num_messages or its timeout: ask for what is still
                # missing, in short slices, so the call returns as soon as the records are in.
                wanted = len(positions) - len(found)
                for msg in consumer.consume(num_messages=wanted, timeout=max(0.01, min(0.05, deadline - time.monotonic()))):
                    key = (msg.topic(), msg.partition())
                    if msg.error() or key in found or key not in positions:
                        continue
                    kind, ts = msg.timestamp()
                    if msg.offset() == positions[key] and kind != TIMESTAMP_NOT_AVAILABLE and ts > 0:
                        found[key] = ts
                    elif msg.offset() >= positions[key]:
                        found[key] = -1  # not the record asked for (compacted) or no timestamp: give up on it
                    # One record per partition is all we need: stop fetching it.
                    consumer.pause([TopicPartition(*key)])
            if not found:
                # Nothing read at all: can this client reach the brokers? A wrong protocol or
                # failed authentication fails here as the watermark read does, instead of
                # passing for "no records" (a TLS handshake with a plaintext listener may take
                # longer than the read to fail: the metadata request's timeout bounds it).
                if errors:
                    raise KafkaException(errors[-1])
                consumer.list_topics(timeout=min(self.timeout_s, 2.0))  # all topics: never creates one
        except KafkaException as exc:
            raise StoreUnreachable(self.name, "Fetch", f"cannot read records for their timestamps: {exc}") from exc
        finally:
            consumer.close()
        return {key: ts for key, ts in found.items() if ts > 0}

    def record_timestamps_at(
        self, positions: list[Position], budget_s: float, partitions_per_consumer: int = 1000
    ) -> RecordTimes:
        """The timestamp (epoch ms) of the record at each (topic, partition, offset): the write
        time of a group's next unprocessed message, for lag in seconds. Several positions may
        share a partition (one per group reading it).

        Consumers without group membership (nothing committed, the cluster's client properties),
        one after the other, each assigned up to `partitions_per_consumer` partitions (one
        consumer with 10,000 partitions spent seconds of CPU in the client on some runs, 1,000 a
        consumer never did), in the order of `positions` (the most wanted first). Each partition
        starts at its lowest wanted offset; after each wanted record the consumer moves on to the
        partition's next one (reading on when it is the next record, seeking otherwise), and
        pauses the partition after its last. A record that is not there (offsets skipped by
        compaction or transaction markers, deleted by retention) or has no timestamp is in
        `gone` with the reason; positions not reached within `budget_s` in all are in `unread`.
        """
        out = RecordTimes()
        wanted: dict[tuple[str, int], list[int]] = {}
        for topic, partition, offset in positions:
            wanted.setdefault((topic, partition), []).append(offset)
        for offsets in wanted.values():
            offsets[:] = sorted(set(offsets))
        keys = list(wanted)
        deadline = time.monotonic() + budget_s
        for start in range(0, len(keys), partitions_per_consumer):
            chunk = {key: wanted[key] for key in keys[start:start + partitions_per_consumer]}
            if time.monotonic() < deadline:
                self._read_records(chunk, deadline, out)
            else:
                out.unread.extend((t, p, o) for (t, p), offsets in chunk.items() for o in offsets)
        return out

    def _read_records(self, wanted: dict[tuple[str, int], list[int]], deadline: float, out: RecordTimes) -> None:
        """One consumer's share of record_timestamps_at: `wanted` partition -> sorted offsets."""
        conf = {
            "bootstrap.servers": self.bootstrap,
            "group.id": "offset-watch-record-timestamps",  # required by the client; never joined
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "error",  # a deleted position is reported, not silently skipped
            "socket.timeout.ms": int(self.timeout_s * 1000),
            "max.partition.fetch.bytes": 4096,  # a batch larger than this still comes whole
            "fetch.wait.max.ms": 50,
            "reconnect.backoff.max.ms": 1000,
        }
        conf.update(self._config)
        consumer = Consumer(conf)
        at = {key: 0 for key in wanted}  # index of the partition's next wanted offset
        remaining = sum(len(offsets) for offsets in wanted.values())

        def settle(key: tuple[str, int], offset: int, ms: int | None, why: str | None) -> None:
            nonlocal remaining
            position = (key[0], key[1], offset)
            if ms is not None:
                out.found[position] = ms
            else:
                out.gone[position] = why
            at[key] += 1
            remaining -= 1

        try:
            consumer.assign([TopicPartition(t, p, offsets[0]) for (t, p), offsets in wanted.items()])
            while remaining and time.monotonic() < deadline:
                # consume() waits until it has num_messages or its timeout: ask for what is still
                # missing, in short slices, so the call returns as soon as the records are in.
                slice_s = max(0.01, min(0.05, deadline - time.monotonic()))
                done: list[TopicPartition] = []  # paused together: one call, not one per partition
                for msg in consumer.consume(num_messages=min(remaining, 100_000), timeout=slice_s):
                    key = (msg.topic(), msg.partition())
                    offsets = wanted.get(key)
                    if offsets is None or at[key] >= len(offsets):
                        continue  # not ours, or done with (a record fetched before the pause)
                    err = msg.error()
                    if err is not None:
                        if err.code() in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
                            # auto.offset.reset=error: the offset is no longer in the log.
                            settle(key, offsets[at[key]], None, "record deleted by retention")
                        else:
                            continue  # transient: the partition is retried until the budget ends
                    else:
                        m = msg.offset()
                        if m < offsets[at[key]]:
                            continue  # fetched before the last seek
                        while at[key] < len(offsets) and offsets[at[key]] < m:
                            settle(key, offsets[at[key]], None,
                                   f"no record at offset {offsets[at[key]]:,} (compacted or a transaction marker)")
                        if at[key] < len(offsets) and offsets[at[key]] == m:
                            kind, ts = msg.timestamp()
                            if kind != TIMESTAMP_NOT_AVAILABLE and ts > 0:
                                settle(key, m, ts, None)
                            else:
                                settle(key, m, None, "the record has no timestamp")
                    if at[key] >= len(offsets):
                        done.append(TopicPartition(*key))  # all its positions read: fetch it no more
                    elif err is not None or offsets[at[key]] != msg.offset() + 1:
                        consumer.seek(TopicPartition(key[0], key[1], offsets[at[key]]))
                if done:
                    consumer.pause(done)
        except KafkaException as exc:
            raise StoreUnreachable(self.name, "Fetch", f"cannot read records for their timestamps: {exc}") from exc
        finally:
            consumer.close()
        out.unread.extend((t, p, o) for (t, p), offsets in wanted.items() for o in offsets[at[(t, p)]:])

    def offsets_for_time(self, topic: str, timestamp_ms: int) -> dict[int, int]:
        """Per partition, the first offset whose record timestamp is at or after `timestamp_ms`
        (the broker's time index, ListOffsets by timestamp); a partition with no such record
        gives its high watermark (nothing written since). Needs Kafka 0.10.1+ timestamps; Tansu
        ignores the timestamp (answers 0), so tests of the rule run on a full Kafka."""
        partitions = self._partitions_from(self._topic_metadata(), self.name, topic)
        by_time = self._list_offsets([TopicPartition(topic, p) for p in partitions], OffsetSpec.for_timestamp(timestamp_ms))
        missing = [TopicPartition(topic, p) for p in partitions if by_time[(topic, p)] < 0]
        ends = self._list_offsets(missing, OffsetSpec.latest()) if missing else {}
        return {p: by_time[(topic, p)] if by_time[(topic, p)] >= 0 else ends[(topic, p)] for p in partitions}

    def compacted_topics(self, topics: list[str]) -> dict[str, bool]:
        """Per topic, whether its cleanup.policy includes "compact" (DescribeConfigs, one request
        for all). A topic whose configuration cannot be read (no DescribeConfigs permission, gone)
        is left out: nothing is claimed about it, and the watermarks are read all the same."""
        if not topics:
            return {}
        try:
            futures = self._admin.describe_configs(
                [ConfigResource(ResourceType.TOPIC, t) for t in topics], request_timeout=self.timeout_s)
        except KafkaException:
            return {}
        out = {}
        for resource, fut in futures.items():
            try:
                entry = fut.result(timeout=self.timeout_s * 2).get("cleanup.policy")
            except Exception:
                continue
            policies = (entry.value or "") if entry is not None else ""
            out[resource.name] = "compact" in [p.strip() for p in policies.split(",")]
        return out

    def topic_watermarks(self, topic: str) -> dict[int, Watermarks]:
        """One topic's watermarks; MissingTopic if it does not exist."""
        result = self.watermarks([topic])
        if topic in result.missing:
            raise MissingTopic(self.name, topic, result.missing[topic])
        return result.by_topic[topic]

    def _list_offsets(self, tps: list[TopicPartition], spec: OffsetSpec) -> dict[tuple[str, int], int]:
        """ListOffsets in chunks of `chunk_size` partitions, all sent before any is awaited.

        One call for all partitions grows superlinearly with their number (10k: 0.62 s, 20k: 2.2 s
        on Tansu); 500-partition chunks in flight together take 0.12 s for 10k.
        """
        futures = {}
        try:
            for i in range(0, len(tps), self.chunk_size):
                request = {tp: spec for tp in tps[i:i + self.chunk_size]}
                futures.update(self._admin.list_offsets(request, request_timeout=self.timeout_s))
        except KafkaException as exc:
            raise StoreUnreachable(self.name, "ListOffsets", str(exc)) from exc
        out: dict[tuple[str, int], int] = {}
        for tp, fut in futures.items():
            try:
                out[(tp.topic, tp.partition)] = fut.result(timeout=self.timeout_s * 2).offset
            except Exception as exc:
                raise StoreUnreachable(
                    self.name, f"{tp.topic}[{tp.partition}]", f"ListOffsets failed: {exc}"
                ) from exc
        return out
