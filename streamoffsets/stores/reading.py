"""Store readers and the watermark reader: they read, they never evaluate or write the database."""
from __future__ import annotations

from contextlib import closing
from dataclasses import dataclass, field
from datetime import datetime, timezone

from streamoffsets.errors import OffsetStoreError, StoreUnreachable
from streamoffsets.kafka import KafkaWatermarkReader, RecordTimes, WatermarkResult
from streamoffsets.kafka_clients import clients_drop
from streamoffsets.stores.registry import open_store
from streamoffsets.types import BatchOffsets, PipelineKey, RowProblem


@dataclass
class ReadPlan:
    """What one poll of a store reads (dashboard.monitoring.read_plan.store_read_plan builds it)."""

    # Per known pipeline: the newest batch time imported (-1: none yet). New rows are read after it.
    positions: dict[PipelineKey, int] = field(default_factory=dict)
    # Per pipeline: the committed batch times already imported within `late_window_ms` of its
    # position. Rows in that window not among them arrived late and are read too.
    recent: dict[PipelineKey, set[int]] = field(default_factory=dict)
    # Batch times beyond the collector's clock (now_ms) + the tolerance are a named problem of
    # their row, never imported and never a position, until the clock comes near them.
    now_ms: int = 0
    future_tolerance_ms: int = 3_600_000
    late_window_ms: int = 0
    max_batches: int = 5000
    # List the store for new pipelines (else read only the positions' pipelines).
    discover: bool = True

    @property
    def horizon_ms(self) -> int:
        return self.now_ms + self.future_tolerance_ms


@dataclass
class StoreReading:
    pipelines: list[PipelineKey] = field(default_factory=list)
    # Batches per pipeline not imported yet: new ones after the position and late ones in the
    # window behind it, oldest first. Stores without history give their current state.
    batches: dict[PipelineKey, list[BatchOffsets]] = field(default_factory=dict)
    problems: list[RowProblem] = field(default_factory=list)
    # False for stores that keep only the current offsets: each reading is then a sample.
    keeps_history: bool = True
    # Pipelines whose read stopped at the per-cycle limit: their history import goes on next cycle.
    more: set[PipelineKey] = field(default_factory=set)
    # Whether the store was listed for new pipelines in this reading.
    discovered: bool = False


def future_problem(store, key: PipelineKey, batch: BatchOffsets, tolerance_ms: int) -> RowProblem:
    """The named problem of a row dated beyond the horizon (the text stays the same at every
    poll, so a recurring problem stays one row with a count)."""
    at = datetime.fromtimestamp(batch.batch_time_ms / 1000, tz=timezone.utc) if batch.batch_time_ms < 253402300800000 \
        else None
    when = at.isoformat(timespec="milliseconds") if at else f"{batch.batch_time_ms} ms"
    record = store.record_key(key.topic, key.group, batch.batch_time_ms) if hasattr(store, "record_key") \
        else f"{key.topic} / {key.group} @ {batch.batch_time_ms}"
    return RowProblem(store.name, record,
                      f"batch time {when} is more than {tolerance_ms // 1000} s ahead of the collector's clock: "
                      "not imported while it is in the future (check the writer's clock)")


def read_store(
    url: str, plan: ReadPlan, timeout_s: float, kafka_config: dict | None = None, ping_timeout_s: float | None = None,
) -> StoreReading:
    """Read a store's pipelines: new batches after each position, late ones in the window behind
    it; rows dated beyond the horizon reported, not read. Stores without history give their
    current state (the service decides what is new)."""
    with closing(open_store(url, timeout_s=timeout_s, kafka_config=kafka_config)) as store:
        if not hasattr(store, "shared_client"):
            return _read_store(store, plan, ping_timeout_s)
        store.shared_client = True  # read every cycle: the process's kept client (kafka_clients)
        try:
            return _read_store(store, plan, ping_timeout_s)
        except BaseException:  # a time limit too: the next read starts on a fresh connection
            clients_drop(store.bootstrap)
            raise


def _read_store(store, plan: ReadPlan, ping_timeout_s: float | None) -> StoreReading:
    if ping_timeout_s and hasattr(store, "ping"):
        # A server that does not answer holds this worker process for the ping's short
        # timeout only, so the other sources keep their cadence (issue #11).
        store.ping(ping_timeout_s)
    reading = StoreReading(keeps_history=store.keeps_history)
    if hasattr(store, "snapshot"):
        # Stores that only hold current offsets give every pipeline's in one pass.
        current, reading.problems = store.snapshot()
        reading.pipelines = sorted(current)
        reading.batches = {key: [batch] for key, batch in current.items()}
        reading.discovered = True
        return reading
    if plan.discover:
        found, reading.problems = store.list_pipelines()
        reading.pipelines = sorted(set(found) | set(plan.positions))
        reading.discovered = True
    else:
        reading.pipelines = sorted(plan.positions)
    if not store.keeps_history and hasattr(store, "histories"):
        # Stores that read many pipelines' current state in a few pipelined rounds (ZooKeeper).
        for key, page in store.histories(reading.pipelines).items():
            if isinstance(page, OffsetStoreError):  # one unreadable pipeline: its problem
                reading.problems.append(RowProblem(page.store, page.key, page.problem))
                continue
            reading.batches[key] = page.batches
            reading.problems.extend(page.problems)
        return reading
    for key in reading.pipelines:
        try:
            if store.keeps_history:
                _read_history(store, key, plan, reading)
            else:  # the current state, whatever its time: the service decides what is new
                page = store.history(key.topic, key.group)
                reading.batches[key] = page.batches
                reading.problems.extend(page.problems)
        except StoreUnreachable:
            raise  # the whole source is down: recorded as such by the caller
        except OffsetStoreError as exc:
            # One unreadable pipeline is shown as a problem; the others are still read.
            reading.problems.append(RowProblem(exc.store, exc.key, exc.problem))
    return reading


def _read_history(store, key: PipelineKey, plan: ReadPlan, reading: StoreReading) -> None:
    position = plan.positions.get(key, -1)
    cheap_keys = hasattr(store, "batch_times")
    # New rows: after the position, up to the horizon (stores that can scan keys cheaply bound
    # the read there; the others read on and the future rows are split off below).
    page = store.history(key.topic, key.group, start_ms=position + 1,
                         end_ms=plan.horizon_ms if cheap_keys else None, limit=plan.max_batches)
    batches = [b for b in page.batches if b.batch_time_ms <= plan.horizon_ms]
    future = [b for b in page.batches if b.batch_time_ms > plan.horizon_ms]
    reading.problems.extend(page.problems)
    if page.truncated:
        reading.more.add(key)
    if cheap_keys:  # one short scan past the horizon: is a future-dated row waiting there?
        beyond = store.history(key.topic, key.group, start_ms=plan.horizon_ms + 1, limit=1)
        future += [b for b in beyond.batches if b.batch_time_ms > plan.horizon_ms]
        reading.problems.extend(beyond.problems)  # e.g. a time of more digits than any epoch ms
    # One problem per pipeline names the first such row (a run of them would flood the list).
    reading.problems.extend(future_problem(store, key, b, plan.future_tolerance_ms) for b in future[:1])
    # Late rows: in the window behind the position, not imported yet.
    if position >= 0 and plan.late_window_ms > 0:
        known = plan.recent.get(key, set())
        start = max(0, position - plan.late_window_ms)
        if cheap_keys:
            missing = [t for t in store.batch_times(key.topic, key.group, start, position) if t not in known]
            late = store.batches_at(key.topic, key.group, missing[:plan.max_batches])
        else:
            late = store.history(key.topic, key.group, start_ms=start, end_ms=position)
            late.batches = [b for b in late.batches if b.batch_time_ms not in known]
        reading.problems.extend(late.problems)
        batches = sorted(late.batches + batches, key=lambda b: b.batch_time_ms)
    reading.batches[key] = batches


def read_watermarks(
    bootstrap: str, topics: list[str], timeout_s: float, chunk_size: int = 500, config: dict | None = None,
    ping_timeout_s: float | None = None,
) -> WatermarkResult:
    # Read every cycle: the process's kept admin client (kafka_clients), dropped when a read fails.
    reader = KafkaWatermarkReader(bootstrap, timeout_s=timeout_s, chunk_size=chunk_size, config=config,
                                  shared_client=True)
    try:
        if ping_timeout_s and topics:  # no topic tracked: nothing is asked of the brokers
            reader.ping(ping_timeout_s)
        result = reader.watermarks(sorted(set(topics)))
        result.compacted = compacted_topics(reader, bootstrap, list(result.by_topic))
    except BaseException:  # a time limit too: the next read starts on a fresh connection
        clients_drop(reader.bootstrap)
        raise
    return result


# A topic's cleanup.policy is read once per TOPIC_POLICY_MAX_AGE_S (the store discovery interval's
# default): it rarely changes, and one DescribeConfigs per cycle would cost a round trip for
# nothing. Per process, keyed by cluster and topic: (compacted, monotonic time read).
TOPIC_POLICY_MAX_AGE_S = 60.0
_topic_policies: dict[tuple[str, str], tuple[bool, float]] = {}


def compacted_topics(reader: KafkaWatermarkReader, bootstrap: str, topics: list[str],
                     max_age_s: float = TOPIC_POLICY_MAX_AGE_S) -> set[str]:
    import time

    now = time.monotonic()
    stale = [t for t in topics if now - _topic_policies.get((bootstrap, t), (False, -1e18))[1] > max_age_s]
    if stale:
        read = reader.compacted_topics(stale)
        for topic in stale:  # an unreadable one is asked again only after max_age_s too
            _topic_policies[(bootstrap, topic)] = (read.get(topic, False), now)
    return {t for t in topics if _topic_policies[(bootstrap, t)][0]}


def read_record_timestamps(
    bootstrap: str, positions: list[tuple[str, int, int]], timeout_s: float, budget_s: float, config: dict | None = None
) -> RecordTimes:
    return KafkaWatermarkReader(bootstrap, timeout_s=timeout_s, config=config).record_timestamps_at(positions, budget_s)
