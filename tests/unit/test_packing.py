"""Packed sample arrays: exact round trips, compact for the usual contiguous partitions."""
from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from offsetwatch.lib.packing import pack_map, pack_partitions, unpack_map, unpack_partitions

offsets = st.one_of(st.none(), st.integers(0, 2**63 - 1))


@given(st.dictionaries(st.integers(0, 2**31 - 1), offsets, max_size=50))
def test_any_map_round_trips(values):
    assert unpack_map(*pack_map(values)) == values


def test_contiguous_partitions_cost_nothing_and_others_are_kept():
    assert pack_partitions([0, 1, 2]) == b"" and unpack_partitions(b"", 3) == [0, 1, 2]
    assert unpack_partitions(pack_partitions([0, 2, 5]), 3) == [0, 2, 5]
    ids, values = pack_map({0: 5, 1: None})
    assert ids == b"" and len(values) == 16
