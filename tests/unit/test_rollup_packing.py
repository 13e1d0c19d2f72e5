"""The charts' roll-up columns: exact round trips, unknown kept as unknown, and the largest of two
buckets per partition (a partition known in one bucket only keeps its number)."""
from __future__ import annotations

from array import array

from hypothesis import given
from hypothesis import strategies as st

from dashboard.charts.rollups import Point, merged
from offsetwatch.lib.rollup_packing import (
    MISSING,
    SECONDS_MAX,
    SECONDS_MISSING,
    decode,
    decode_partitions,
    encode,
    encode_partitions,
    tenths,
    tenths_array,
)

lags = st.integers(-(2**63), 2**63 - 1)
seconds = st.integers(-(2**31), 2**31 - 1)


@given(st.lists(st.tuples(lags, seconds), max_size=300))
def test_any_columns_round_trip(rows):
    lag_col, sec_col = array("q", [r[0] for r in rows]), array("i", [r[1] for r in rows])
    assert decode(encode(lag_col, sec_col)) == (lag_col, sec_col)


def test_partitions_cost_nothing_when_contiguous_and_are_kept_otherwise():
    assert encode_partitions([0, 1, 2]) == b"" and decode_partitions(b"", 3) == [0, 1, 2]
    assert decode_partitions(encode_partitions([0, 3, 7]), 3) == [0, 3, 7]
    assert decode(b"") == (array("q"), array("i"))


def test_seconds_are_kept_in_tenths_with_unknown_below_every_number():
    assert tenths(None) == SECONDS_MISSING and tenths(float("nan")) == SECONDS_MISSING
    assert tenths(12.34) == 123 and tenths(0.0) == 0
    assert tenths(1e12) == SECONDS_MAX  # a lag of 31,000 years is kept as the largest, not wrapped
    values = [None, float("nan"), 12.34, 0.0, -3.0, 1e12, SECONDS_MAX / 10, 0.05]
    assert list(tenths_array(values)) == [tenths(v) for v in values]


def test_lags_that_fit_four_bytes_take_four_unknown_included():
    small = array("q", [5, MISSING, 2**31 - 1, 0])
    blob = encode(small, array("i", [1, 2, 3, SECONDS_MISSING]))
    assert len(blob) == 1 + 4 * 8 and decode(blob)[0] == small
    for large in ([2**31], [-(2**31)], [MISSING, -(2**31)], [-(2**63) + 1]):
        col = array("q", large)
        blob = encode(col, array("i", [0] * len(large)))
        assert len(blob) == 1 + 12 * len(large) and decode(blob)[0] == col


def test_the_largest_per_partition_wins_and_unknown_never_does():
    a = Point([0, 1, 2], array("q", [5, MISSING, 7]), array("i", [10, 20, SECONDS_MISSING]), 12, 2.0)
    b = Point([0, 1, 2], array("q", [9, 3, MISSING]), array("i", [5, SECONDS_MISSING, SECONDS_MISSING]), 12, None)
    m = merged(a, b)
    assert list(m.lags) == [9, 3, 7]
    assert list(m.seconds) == [10, 20, SECONDS_MISSING]
    assert (m.total_lag, m.lag_seconds, m.samples) == (12, 2.0, 2)


def test_partitions_of_either_bucket_are_kept_when_the_topic_grew():
    a = Point([0, 1], array("q", [5, 6]), array("i", [1, 2]), 11, 0.2)
    b = Point([0, 1, 2], array("q", [4, 8, 1]), array("i", [3, 1, 0]), 13, 0.3)
    m = merged(a, b)
    assert m.partitions == [0, 1, 2]
    assert list(m.lags) == [5, 8, 1] and list(m.seconds) == [3, 2, 0]
    assert (m.total_lag, m.lag_seconds) == (13, 0.3)
