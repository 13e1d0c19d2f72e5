"""Packed sample arrays: exact round trips in both formats, compact for offsets that are close
together, the old raw int64 rows still read."""
from __future__ import annotations

from array import array

import pytest
from hypothesis import given
from hypothesis import strategies as st

from offsetwatch.lib.packing import (
    pack,
    pack_map,
    pack_partitions,
    unpack,
    unpack_map,
    unpack_partitions,
    unpack_watermarks,
)

offsets = st.one_of(st.none(), st.integers(0, 2**63 - 1))
signed = st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1))


def expected(values):
    return [None if v is None or v == -1 else v for v in values]


def old_pack(values):
    """The format before #16: little-endian int64s, -1 for no value."""
    return array("q", (-1 if v is None else v for v in values)).tobytes()


@given(st.dictionaries(st.integers(0, 2**31 - 1), offsets, max_size=50))
def test_any_map_round_trips(values):
    assert unpack_map(*pack_map(values)) == values


@given(st.lists(signed, max_size=60))
def test_any_signed_values_round_trip_and_no_longer_than_raw(values):
    packed = pack(values)
    assert unpack(packed) == expected(values)
    assert len(packed) <= 8 * len(values)


@given(st.integers(0, 2**63 - 1 - 2**33), st.sampled_from([0, 1, 200, 60_000, 2**32 - 2, 2**33]),
       st.lists(st.one_of(st.none(), st.floats(0, 1)), min_size=3, max_size=40))
def test_close_offsets_round_trip_in_each_width(base, spread, fractions):
    values = [None if f is None else base + int(f * spread) for f in fractions]
    assert unpack(pack(values)) == values


@given(st.lists(signed, max_size=40))
def test_old_rows_read_as_before(values):
    assert unpack(old_pack(values)) == expected(values)


def test_extremes_empty_and_missing():
    assert pack([]) == b"" and unpack(b"") == [] and unpack(None) == []
    for values in ([0, 0, 0], [2**63 - 1] * 5, [0, 2**63 - 1, 5], [None, None, None], [None, 7, 7, 7],
                   [-(2**63), 2**63 - 1, None], [-5, -2, None, 3], [2**63 - 1, 2**63 - 2, None]):
        assert unpack(pack(values)) == values, values
        assert unpack(memoryview(pack(values))) == values
    with pytest.raises(OverflowError):
        pack([2**63, 0, 0])


def test_realistic_offsets_take_the_bytes_their_spread_needs_and_lengths_never_look_raw():
    highs = [1_000_000_000 + 31_000 * p for p in range(20)]  # within 0.6 %: 3 bytes
    packed = pack(highs)
    assert len(packed) == 1 + 4 + 3 * 20 and unpack(packed) == highs  # base 10^9: 4 bytes
    highs = [10_000_000_000 + 15_000_000 * p for p in range(20)]  # within 3 %: 4 bytes
    assert len(pack(highs)) == 1 + 5 + 4 * 20 and unpack(pack(highs)) == highs
    assert len(pack([5, 6, 7, 8, 9, 10])) == 1 + 1 + 6 + 1  # padded off a multiple of 8
    assert len(pack([0] * 1000)) == 6  # all equal: base and count
    for n in range(3, 70):
        assert len(pack(list(range(n)))) % 8 != 0


def test_a_corrupt_value_is_said():
    with pytest.raises(ValueError, match="not a packed array"):
        unpack(b"\x02\x00\x00")  # 2 bytes a value, a 1-byte base, then 1 byte


def test_contiguous_partitions_cost_nothing_and_others_are_kept():
    assert pack_partitions([0, 1, 2]) == b"" and unpack_partitions(b"", 3) == [0, 1, 2]
    assert unpack_partitions(pack_partitions([0, 2, 5]), 3) == [0, 2, 5]
    ids, values = pack_map({0: 5, 1: None})
    assert ids == b"" and len(values) == 16
    assert unpack_watermarks(b"", pack([0, 0, 0]), pack([10, 20, 30])) == {0: (0, 10), 1: (0, 20), 2: (0, 30)}
    assert unpack_watermarks(b"", old_pack([0, 0, 0]), old_pack([10, 20, 30])) == {0: (0, 10), 1: (0, 20), 2: (0, 30)}


@given(st.integers(1, 7), st.integers(-(2**62), 2**62), st.lists(st.one_of(st.none(), st.floats(0, 1)), min_size=3, max_size=30))
def test_every_width_round_trips(width, base, fractions):
    span = (1 << (8 * width)) - 2  # the largest span this width holds with a value missing
    values = [None if f is None else min(base + int(f * span), 2**63 - 1) for f in fractions] + [base, base + span // 2]
    if base + span <= 2**63 - 1:
        values.append(base + span)
    assert unpack(pack(values)) == values
