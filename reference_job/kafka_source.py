"""A Kafka streaming source for Spark, built on PySpark's Python data source API.
Over 400 lines because PySpark's data source API wants the source, its reader and its offsets
in one importable module (its workers unpickle them).

Why this exists: Spark's own Kafka source is a Maven jar we cannot fetch here, so this module
reads Kafka with confluent-kafka instead. Options follow Spark's Kafka source where they
overlap (`kafka.bootstrap.servers`, `subscribe`, `startingOffsets`, `maxOffsetsPerTrigger`,
`kafkaConsumer.pollTimeoutMs`, pass-through `kafka.*` settings), so a job's options read the
same as with the official source. Unlike it, one query reads exactly one topic.

Offsets are topic-keyed JSON like Spark's Kafka source, `{"<topic>": {"<partition>": <next
offset to read>}}` with partitions in numeric order, so a checkpoint's `offsets/<batchId>` files
read the same whichever of the two sources wrote them (`streamoffsets.stores.checkpoint` reads them).
Offsets of the flat form `{"<partition>": offset}` that earlier versions of this module wrote
are still accepted when a query restarts from such a checkpoint (the checkpoint reader cannot
tell their topic and reports them).

    spark.dataSource.register(KafkaDataSource)
    spark.readStream.format("offsetwatch_kafka")
         .option("kafka.bootstrap.servers", "127.0.0.1:9092").option("subscribe", "events")
         .load()
"""
from __future__ import annotations

import json
import time
from datetime import datetime, timedelta, timezone
from typing import Iterator

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

SCHEMA = "topic string, partition int, offset long, timestamp timestamp, key binary, value binary"

EARLIEST, LATEST = -2, -1  # Spark's startingOffsets JSON sentinels
DEFAULT_REQUEST_TIMEOUT_MS = 30_000
DEFAULT_POLL_TIMEOUT_MS = 30_000
# The engine only has built-in limit types (no per-partition one), so when only
# maxOffsetsPerPartition is set we still hand it a ReadMaxRows, with no real total cap,
# to get a limit back in latestOffset: ReadAllAvailable means "ignore option limits".
_NO_TOTAL_CAP = 2**63 - 1  # Long.MaxValue on the JVM side

# Options this module interprets itself rather than passing to librdkafka
# (request.timeout.ms is a producer-only property there and would only log a warning).
_OWN_KAFKA_OPTIONS = {"kafka.request.timeout.ms"}
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


# --- option parsing (plain functions, testable without Spark or a broker) -----------------


def parse_starting_offsets(value: str | None, topic: str) -> dict[int, int] | str:
    """`startingOffsets` -> "earliest", "latest" or {partition: offset | -2 | -1} for `topic`."""
    text = (value or "latest").strip()
    if text.lower() in ("earliest", "latest"):
        return text.lower()
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"option startingOffsets: not 'earliest', 'latest' or JSON like "
            f'{{"{topic}":{{"0":23,"1":-2}}}}: {exc}: {text!r}'
        ) from None
    if not isinstance(parsed, dict) or not all(isinstance(v, dict) for v in parsed.values()):
        raise ValueError(f'option startingOffsets: expected {{"topic":{{"partition":offset}}}}, got {text!r}')
    others = sorted(set(parsed) - {topic})
    if others:
        raise ValueError(f"option startingOffsets names topics other than subscribed {topic!r}: {others}")
    if topic not in parsed:
        # An empty JSON would silently mean "all earliest"; far more likely a typo.
        raise ValueError(f"option startingOffsets does not name the subscribed topic {topic!r}: {text!r}")
    offsets: dict[int, int] = {}
    for part, off in parsed[topic].items():
        try:
            p = int(part)
        except ValueError:
            raise ValueError(f"option startingOffsets: partition {part!r} of {topic!r} is not an integer") from None
        if p < 0 or type(off) is not int or off < EARLIEST:
            raise ValueError(
                f"option startingOffsets: {topic!r} partition {part!r} has offset {off!r}; "
                "expected an offset >= 0, -2 (earliest) or -1 (latest)"
            )
        offsets[p] = off
    return offsets


def _positive_int(options, name: str) -> int | None:
    raw = options.get(name)
    if raw is None or str(raw).strip() == "":
        return None
    try:
        value = int(str(raw).strip())
    except ValueError:
        value = 0
    if value <= 0:
        raise ValueError(f"option {name} must be a positive integer, got {raw!r}")
    return value


def split_limit(pending: dict[int, int], max_rows: int) -> dict[int, int]:
    """Share `max_rows` among partitions fairly: equal shares, and what a partition with a
    small backlog cannot use goes to the others (so the total is min(max_rows, backlog))."""
    alloc = {p: 0 for p in pending}
    remaining = max_rows
    active = [p for p in sorted(pending) if pending[p] > 0]
    while active and remaining > 0:
        share = remaining // len(active)
        if share == 0:
            # Fewer rows than partitions: the largest backlogs go first, so no partition starves.
            for p in sorted(active, key=lambda q: (alloc[q] - pending[q], q))[:remaining]:
                alloc[p] += 1
            break
        still_active = []
        for p in active:
            take = min(share, pending[p] - alloc[p])
            alloc[p] += take
            remaining -= take
            if alloc[p] < pending[p]:
                still_active.append(p)
        active = still_active
    return alloc


def _as_offset(topic: str, offsets: dict[int, int]) -> dict[str, dict[str, int]]:
    """{partition: offset} -> `{"<topic>": {"<partition>": offset}}`, partitions in numeric order.

    Always the same key order: the engine compares offsets by their JSON text.
    """
    return {topic: {str(p): int(offsets[p]) for p in sorted(offsets)}}


def _partition_offsets(topic: str, offset: dict) -> dict[int, int]:
    """An offset the engine hands back (from `_as_offset`, possibly via a checkpoint) -> {partition: offset}.

    The flat `{"<partition>": offset}` form of earlier versions is accepted too (its values are
    numbers, never objects). An offset for another topic means the query's `subscribe` option
    changed under an existing checkpoint: refused rather than silently read as this topic's.
    """
    if not isinstance(offset, dict):
        raise ValueError(f"Kafka topic {topic!r}: offset {offset!r} is not a JSON object")
    if offset and all(type(v) is int for v in offset.values()):
        parts = offset  # the flat form of earlier versions
    else:
        others = sorted(set(offset) - {topic})
        if others:
            raise ValueError(
                f"Kafka topic {topic!r}: the checkpointed offset names topics {others}; "
                "the query subscribes to another topic than the checkpoint was written for"
            )
        parts = offset.get(topic, {})
        if not isinstance(parts, dict):
            raise ValueError(f"Kafka topic {topic!r}: offset {offset!r} is not {{topic: {{partition: offset}}}}")
    try:
        return {int(p): int(o) for p, o in parts.items()}
    except (TypeError, ValueError):
        raise ValueError(f"Kafka topic {topic!r}: offset {offset!r} has a non-numeric partition or offset") from None


# --- the data source ------------------------------------------------------------------------


class KafkaInputPartition(InputPartition):
    """Records [start, end) of one Kafka partition; start == -2 means "from the earliest"."""

    def __init__(self, topic: str, partition: int, start: int, end: int):
        super().__init__((topic, partition, start, end))
        self.topic, self.partition, self.start, self.end = topic, partition, start, end


class KafkaDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "offsetwatch_kafka"

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema) -> "KafkaStreamReader":
        return KafkaStreamReader(self.options)


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options):
        self.broker = (options.get("kafka.bootstrap.servers") or "").strip()
        if not self.broker:
            raise ValueError("option kafka.bootstrap.servers is required (host:port[,host:port])")
        self.topic = (options.get("subscribe") or "").strip()
        if not self.topic or "," in self.topic:
            raise ValueError(f"option subscribe must name exactly one topic, got {options.get('subscribe')!r}")
        self.starting = parse_starting_offsets(options.get("startingOffsets"), self.topic)
        self.max_per_trigger = _positive_int(options, "maxOffsetsPerTrigger")
        self.max_per_partition = _positive_int(options, "maxOffsetsPerPartition")
        self.request_timeout_s = (_positive_int(options, "kafka.request.timeout.ms") or DEFAULT_REQUEST_TIMEOUT_MS) / 1000
        self.poll_timeout_s = (_positive_int(options, "kafkaConsumer.pollTimeoutMs") or DEFAULT_POLL_TIMEOUT_MS) / 1000
        self.passthrough = {
            k[len("kafka."):]: v for k, v in options.items()
            if k.lower().startswith("kafka.") and k.lower() not in _OWN_KAFKA_OPTIONS
        }
        self._consumer = None  # driver-side metadata consumer, made on first use
        self._target: dict[int, int] | None = None  # set by Trigger.AvailableNow
        self._latest: dict[int, int] | None = None  # last high watermarks seen, for progress

    def __getstate__(self):
        # Spark pickles the reader to ship read() to executors; a live consumer cannot travel.
        state = dict(self.__dict__)
        state["_consumer"] = None
        return state

    # --- broker access ----------------------------------------------------------------------

    def _where(self, partition: int | None = None) -> str:
        part = "" if partition is None else f" partition {partition}"
        return f"Kafka topic {self.topic!r}{part} on broker {self.broker}"

    def _consumer_config(self, role: str) -> dict:
        conf = dict(self.passthrough)
        conf.setdefault("group.id", "offsetwatch-kafka-source")  # never joined: we only assign()
        conf.setdefault("client.id", f"offsetwatch-kafka-source-{role}")
        conf.update({
            "bootstrap.servers": self.broker,
            "enable.auto.commit": False,  # Spark's checkpoint, not Kafka, owns the position
            "enable.auto.offset.store": False,
            "enable.partition.eof": True,
            "allow.auto.create.topics": False,  # Tansu would happily create a typo'd topic
            "auto.offset.reset": "error",  # records gone before we read them = data loss, fail
        })
        return conf

    def _new_consumer(self, role: str, where: str):
        from confluent_kafka import Consumer, KafkaException

        try:
            return Consumer(self._consumer_config(role))
        except KafkaException as exc:  # e.g. a bad pass-through kafka.* option
            raise RuntimeError(f"{where}: cannot create a Kafka consumer: {exc}") from exc

    def _metadata_consumer(self):
        if self._consumer is None:
            self._consumer = self._new_consumer("driver", self._where())
        return self._consumer

    def _watermarks(self) -> dict[int, tuple[int, int]]:
        """{partition: (low, high)} for every current partition of the topic."""
        from confluent_kafka import KafkaException, TopicPartition

        consumer = self._metadata_consumer()
        try:
            meta = consumer.list_topics(self.topic, timeout=self.request_timeout_s).topics.get(self.topic)
        except KafkaException as exc:
            raise RuntimeError(f"{self._where()}: cannot fetch metadata: {exc}") from exc
        if meta is None or meta.error is not None or not meta.partitions:
            raise RuntimeError(f"{self._where()}: topic not found ({meta.error if meta else 'no metadata'})")
        marks = {}
        for p in sorted(meta.partitions):
            try:
                marks[p] = consumer.get_watermark_offsets(
                    TopicPartition(self.topic, p), timeout=self.request_timeout_s, cached=False
                )
            except KafkaException as exc:
                raise RuntimeError(f"{self._where(p)}: cannot fetch watermarks: {exc}") from exc
        self._latest = {p: high for p, (_, high) in marks.items()}
        return marks

    # --- offsets (driver) -------------------------------------------------------------------

    def initialOffset(self) -> dict:
        marks = self._watermarks()
        if isinstance(self.starting, str):
            pick = 0 if self.starting == "earliest" else 1
            return _as_offset(self.topic, {p: m[pick] for p, m in marks.items()})
        unknown = sorted(set(self.starting) - set(marks))
        if unknown:
            raise ValueError(f"option startingOffsets names partitions {unknown} that {self._where()} does not have")
        offsets = {}
        for p, (low, high) in marks.items():
            wanted = self.starting.get(p, EARLIEST)  # partitions not named start at earliest
            if wanted == EARLIEST:
                wanted = low
            elif wanted == LATEST:
                wanted = high
            elif not low <= wanted <= high:
                raise ValueError(
                    f"option startingOffsets: offset {wanted} is outside the available range "
                    f"[{low}, {high}] of {self._where(p)}"
                )
            offsets[p] = wanted
        return _as_offset(self.topic, offsets)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.max_per_trigger:
            return ReadMaxRows(self.max_per_trigger)
        if self.max_per_partition:
            return ReadMaxRows(_NO_TOTAL_CAP)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        # "Available now" = the high watermarks at this moment; later records wait for the next run.
        self._target = {p: high for p, (_, high) in self._watermarks().items()}

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        marks = self._watermarks()
        begin = _partition_offsets(self.topic, start)
        gone = sorted(set(begin) - set(marks))
        if gone:
            raise RuntimeError(f"{self._where()}: partitions {gone} disappeared (topic deleted and recreated?)")
        pending, first = {}, {}
        for p, (low, high) in marks.items():
            if self._target is not None:
                if p not in self._target:
                    continue  # created after the AvailableNow run began
                high = min(high, self._target[p])
            first[p] = begin.get(p, low)  # partitions added since the last batch: from earliest
            if begin.get(p, 0) > marks[p][1]:
                raise RuntimeError(
                    f"{self._where(p)}: high watermark {marks[p][1]} is below the already "
                    f"processed offset {begin[p]} (topic recreated or broker lost data)"
                )
            pending[p] = max(0, high - first[p])
        # The engine passes ReadAllAvailable when the trigger demands everything (Trigger.Once):
        # then the option-based limits must be ignored.
        if isinstance(limit, ReadMaxRows):
            if self.max_per_partition:
                pending = {p: min(n, self.max_per_partition) for p, n in pending.items()}
            pending = split_limit(pending, limit.max_rows)
        end = dict(begin)
        for p, n in pending.items():
            # A new partition stays absent (i.e. "from earliest") until it has a record to read.
            if n or p in begin:
                end[p] = first[p] + n
        return _as_offset(self.topic, end)

    def reportLatestOffset(self) -> dict | None:
        # Only what latestOffset just fetched: no extra broker round trip per batch.
        return _as_offset(self.topic, self._latest) if self._latest is not None else None

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        begin_at = _partition_offsets(self.topic, start)
        parts = []
        for p, stop in _partition_offsets(self.topic, end).items():
            begin = begin_at.get(p, EARLIEST)  # a partition new since `start`: from its earliest
            if begin == EARLIEST or begin < stop:
                parts.append(KafkaInputPartition(self.topic, p, begin, stop))
        return parts

    def commit(self, end: dict) -> None:
        # Nothing to do: the job itself saves each batch's offsets after writing its output,
        # and Spark's checkpoint is what restarts resume from; Kafka's group offsets are unused.
        pass

    def stop(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    # --- records (executors) ----------------------------------------------------------------

    def read(self, partition: KafkaInputPartition) -> Iterator[tuple]:
        from confluent_kafka import OFFSET_BEGINNING, TIMESTAMP_NOT_AVAILABLE, KafkaError, TopicPartition

        topic, p, start, end = partition.topic, partition.partition, partition.start, partition.end
        if end <= 0 or (start != EARLIEST and start >= end):
            return
        fatal_codes = {
            KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE, KafkaError.UNKNOWN_TOPIC_OR_PART,
            KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC, KafkaError.TOPIC_AUTHORIZATION_FAILED,
        }
        where = f"{self._where(p)} reading offsets [{'earliest' if start == EARLIEST else start}, {end})"
        consumer = self._new_consumer("executor", where)
        try:
            consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING if start == EARLIEST else start)])
            position = start
            last_error = None
            last_progress = time.monotonic()
            while True:
                msg = consumer.poll(0.5)
                if msg is None or (msg.error() and msg.error().code() == KafkaError._PARTITION_EOF):
                    if msg is not None and msg.offset() >= end:
                        return  # the offsets left before `end` were gaps (compaction, txn markers)
                    if time.monotonic() - last_progress > self.poll_timeout_s:
                        raise RuntimeError(
                            f"{where}: no progress for {self.poll_timeout_s:g} s, stuck at offset "
                            f"{'earliest' if position == EARLIEST else position}" + (f"; last error: {last_error}" if last_error else "")
                        )
                    continue
                if msg.error():
                    err = msg.error()
                    if err.fatal() or err.code() in fatal_codes:
                        raise RuntimeError(f"{where}: {err}")
                    last_error = err  # transient (e.g. a reconnect): librdkafka retries itself
                    continue
                offset = msg.offset()
                if offset >= end:
                    return
                ts_type, ts_ms = msg.timestamp()
                ts = None if ts_type == TIMESTAMP_NOT_AVAILABLE else _EPOCH + timedelta(milliseconds=ts_ms)
                yield (topic, p, offset, ts, msg.key(), msg.value())
                position, last_progress = offset + 1, time.monotonic()
                if offset >= end - 1:
                    return
        finally:
            consumer.close()
