"""Lag in seconds from each group's own record (issue #13, item 3): several groups at different
positions of one partition of an idle topic, on the real Tansu, known from the first cycle."""
from __future__ import annotations

import time

import pytest
from confluent_kafka import Producer

from collectors.cycle import collect_once
from dashboard.models import PipelineEvaluation
from tests.factories import hbase_store_setup, save

pytestmark = pytest.mark.django_db

MINUTE_MS = 60_000


def now_ms() -> int:
    return int(time.time() * 1000)


def idle_topic(stack, unique_name, records: int = 10):
    """One partition of `records` records written a minute apart, the last an hour ago; then
    nothing (the high watermark stays flat). Returns the setup and each offset's timestamp."""
    s = hbase_store_setup(stack, unique_name, partitions=1)
    first = now_ms() - 3_600_000 - (records - 1) * MINUTE_MS
    # One record per request: Tansu miscounts the high watermark of multi-record batches.
    producer = Producer({"bootstrap.servers": stack.kafka_bootstrap, "linger.ms": 0, "batch.num.messages": 1})
    for i in range(records):
        producer.produce(s.topic, value=b"r%d" % i, partition=0, timestamp=first + i * MINUTE_MS)
        producer.flush(5)
    return s, {i: first + i * MINUTE_MS for i in range(records)}


def partition_rows(s) -> dict[str, dict]:
    """group -> its partition 0 row of the newest evaluation."""
    return {e.pipeline.group: e.partitions[0]
            for e in PipelineEvaluation.objects.filter(pipeline__store=s.store).select_related("pipeline")}


def test_every_group_on_a_partition_has_lag_in_seconds_from_its_own_record_after_one_cycle(stack, unique_name):
    """Before: only the most lagging group's position was read; "b" fell back to interpolation,
    "unknown: not enough watermark samples yet" on this idle topic."""
    s, written = idle_topic(stack, unique_name)
    for group, offset in (("a", 2), ("b", 6), ("c", 10)):  # c has read everything
        save(s, group, now_ms(), {0: offset})

    collect_once()

    rows = partition_rows(s)
    for group, offset in (("a", 2), ("b", 6)):
        assert rows[group]["lag_method"] == "record timestamp", rows[group]
        assert abs(rows[group]["lag_seconds"] - (time.time() - written[offset] / 1000)) < 15
    assert rows["c"]["lag_seconds"] == 0 and rows["c"]["lag_method"] == "caught up"
    # Each its own record: four minutes apart, as the records' timestamps are.
    assert abs(rows["a"]["lag_seconds"] - rows["b"]["lag_seconds"] - 240) < 2


def test_positions_over_the_budget_say_so_and_are_read_the_next_cycle(settings, stack, unique_name):
    s, written = idle_topic(stack, unique_name)
    for group, offset in (("a", 2), ("b", 6), ("c", 8)):
        save(s, group, now_ms(), {0: offset})
    settings.RECORD_TIMESTAMP_BUDGET_BASE_S = 0.0
    settings.RECORD_TIMESTAMP_BUDGET_PER_POSITION_MS = 0.0  # no time at all: nothing is read

    collect_once()

    rows = partition_rows(s)
    for group in "abc":
        assert rows[group]["lag_seconds"] is None  # one watermark sample: no estimate either
        assert "over this cycle's budget" in rows[group]["lag_method"], rows[group]

    settings.RECORD_TIMESTAMP_BUDGET_BASE_S = 2.0
    settings.RECORD_TIMESTAMP_BUDGET_PER_POSITION_MS = 0.5
    collect_once()

    rows = partition_rows(s)
    for group, offset in (("a", 2), ("b", 6), ("c", 8)):
        assert rows[group]["lag_method"] == "record timestamp", rows[group]
        assert abs(rows[group]["lag_seconds"] - (time.time() - written[offset] / 1000)) < 15


def test_positions_cut_by_the_cap_are_read_first_next_cycle_and_reads_are_remembered(settings, stack, unique_name):
    """One read per cycle: the most lagging first, then the one left over; the first stays
    known from memory (a record's timestamp never changes) without being read again."""
    s, written = idle_topic(stack, unique_name)
    for group, offset in (("a", 2), ("b", 6)):
        save(s, group, now_ms(), {0: offset})
    settings.RECORD_TIMESTAMP_PARTITIONS = 1

    collect_once()
    rows = partition_rows(s)
    assert rows["a"]["lag_method"] == "record timestamp"
    assert "over this cycle's budget" in rows["b"]["lag_method"]

    collect_once()
    rows = partition_rows(s)
    for group, offset in (("a", 2), ("b", 6)):
        assert rows[group]["lag_method"] == "record timestamp", rows[group]
        assert abs(rows[group]["lag_seconds"] - (time.time() - written[offset] / 1000)) < 15


def test_without_record_reads_an_idle_topic_gives_a_lower_bound_not_unknown(settings, stack, unique_name):
    """The flat high watermark rule: the unread record was written before the high watermark
    was first seen at its value, so the lag is at least the time since then."""
    settings.RECORD_TIMESTAMP_PARTITIONS = 0
    s, _ = idle_topic(stack, unique_name, records=4)
    save(s, "a", now_ms(), {0: 1})
    collect_once()
    assert partition_rows(s)["a"]["lag_seconds"] is None  # one sample: nothing known yet
    time.sleep(1.5)
    collect_once()
    row = partition_rows(s)["a"]
    assert row["lag_method"].startswith("at least: high watermark flat since first sampled")
    assert 1.0 <= row["lag_seconds"] < 60


def test_the_reader_reads_each_wanted_record_of_a_partition_adjacent_or_apart(stack, unique_name):
    """One consumer, several positions per partition: offsets next to each other are read on,
    offsets apart are sought; a zero budget reads nothing and says which were left unread."""
    from streamoffsets.kafka import KafkaWatermarkReader

    s, written = idle_topic(stack, unique_name)
    wanted = [(s.topic, 0, o) for o in (9, 3, 4, 5)]
    reader = KafkaWatermarkReader(stack.kafka_bootstrap)
    read = reader.record_timestamps_at(wanted, budget_s=5.0)
    assert read.found == {(s.topic, 0, o): written[o] for o in (3, 4, 5, 9)}
    assert not read.gone and not read.unread
    none = reader.record_timestamps_at(wanted, budget_s=0.0)
    assert not none.found and sorted(none.unread) == sorted(wanted)


def test_a_position_deleted_by_retention_has_no_lag_in_seconds_and_says_why(unique_name):
    """Tansu cannot move a low watermark: the watermarks enter at the service seam. The group's
    position (3) is below the low watermark (5): its record is gone and the position does not
    exist any more, so the state wins (docs/NUMBERS.md): no estimate, and the reason is given.
    (Records gone inside the range, compaction or transaction markers, are estimated and say so:
    tests/unit/test_lag_seconds_rules.py.)"""
    from datetime import timedelta

    from django.utils import timezone

    from dashboard.monitoring.services import watermarks_record
    from streamoffsets.kafka import WatermarkResult
    from streamoffsets.types import Watermarks
    from tests.factories import offline_pipeline

    now = timezone.now()
    p = offline_pipeline(unique_name, partitions={0: (5, 10)}, batches=[(now_ms() - 5_000, {0: 3})],
                         sampled_at=now - timedelta(seconds=30))
    watermarks_record(cluster=p.store.cluster, sampled_at=now,
                               result=WatermarkResult(by_topic={p.topic: {0: Watermarks(0, 5, 10)}}))
    row = PipelineEvaluation.objects.get(pipeline=p).partitions[0]
    assert row["state"] == "low out-of-range"
    assert row["lag_seconds"] is None and row["lag"] is None
    assert row["lag_absent"].startswith("out of range: committed 3 below the low watermark 5")
