"""The Kafka streaming source (reference_job/kafka_source.py) without a broker: option parsing and
limit splitting. Against a real Tansu broker and in streaming queries:
tests/integration/test_kafka_source.py."""
from __future__ import annotations

import json

import pytest
from pyspark.sql.datasource import CaseInsensitiveDict
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from reference_job.kafka_source import (
    KafkaDataSource,
    _as_offset,
    _partition_offsets,
    parse_starting_offsets,
    split_limit,
)


def options(bootstrap: str, topic: str, **extra: str) -> dict[str, str]:
    return {"kafka.bootstrap.servers": bootstrap, "subscribe": topic, **extra}


def reader(opts: dict[str, str]):
    return KafkaDataSource(CaseInsensitiveDict(opts)).streamReader(None)


def test_starting_offsets_keywords():
    assert parse_starting_offsets("earliest", "t") == "earliest"
    assert parse_starting_offsets(" LATEST ", "t") == "latest"
    assert parse_starting_offsets(None, "t") == "latest"  # Spark's default for streams


def test_starting_offsets_json_keeps_spark_sentinels():
    got = parse_starting_offsets('{"t": {"0": 23, "1": -2, "2": -1}}', "t")
    assert got == {0: 23, 1: -2, 2: -1}


@pytest.mark.parametrize(
    "value",
    [
        '{"t": {"0": 5}',  # not JSON
        "[1, 2]",
        '{"other": {"0": 1}}',
        '{"t": {"0": 1}, "other": {"0": 1}}',
        '{"t": {"zero": 1}}',
        '{"t": {"0": -3}}',
        '{"t": {"0": "5"}}',
    ],
)
def test_starting_offsets_invalid_names_the_option(value):
    with pytest.raises(ValueError, match="startingOffsets"):
        parse_starting_offsets(value, "t")


def test_required_and_numeric_options():
    with pytest.raises(ValueError, match="kafka.bootstrap.servers"):
        reader({"subscribe": "t"})
    with pytest.raises(ValueError, match="subscribe"):
        reader({"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "a,b"})
    with pytest.raises(ValueError, match="maxOffsetsPerTrigger"):
        reader(options("127.0.0.1:1", "t", maxOffsetsPerTrigger="0"))


def test_split_limit_is_fair_and_never_exceeds_the_limit():
    assert split_limit({0: 10, 1: 10, 2: 10}, 9) == {0: 3, 1: 3, 2: 3}
    assert split_limit({0: 10, 1: 1, 2: 10}, 9) == {0: 4, 1: 1, 2: 4}  # unused share moves on
    assert split_limit({0: 2, 1: 2}, 100) == {0: 2, 1: 2}
    assert split_limit({0: 1, 1: 5, 2: 3}, 2) == {0: 0, 1: 1, 2: 1}  # largest backlogs first
    assert split_limit({0: 0}, 5) == {0: 0}


def test_offsets_are_topic_keyed_with_partitions_in_numeric_order():
    # The engine compares offsets by their JSON text: the serialisation must be deterministic.
    offset = _as_offset("t", {10: 5, 2: 7, 0: 1})
    assert json.dumps(offset) == '{"t": {"0": 1, "2": 7, "10": 5}}'
    assert _partition_offsets("t", json.loads(json.dumps(offset))) == {0: 1, 2: 7, 10: 5}
    assert _partition_offsets("t", {"0": 1, "10": 5}) == {0: 1, 10: 5}  # flat form of earlier versions
    assert _partition_offsets("t", {}) == {}
    with pytest.raises(ValueError, match=r"names topics \['other'\]"):
        _partition_offsets("t", {"other": {"0": 1}})
    with pytest.raises(ValueError, match="non-numeric"):
        _partition_offsets("t", {"t": {"zero": 1}})


def test_default_read_limit_follows_options():
    assert reader(options("b:1", "t")).getDefaultReadLimit() == ReadAllAvailable()
    assert reader(options("b:1", "t", maxOffsetsPerTrigger="7")).getDefaultReadLimit() == ReadMaxRows(7)
    assert isinstance(reader(options("b:1", "t", maxOffsetsPerPartition="3")).getDefaultReadLimit(), ReadMaxRows)
