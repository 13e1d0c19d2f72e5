"""offsetwatch.lib.json_rows: a list of same-keyed rows stored with its keys once, read back equal."""
from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from offsetwatch.lib.json_rows import rows_pack, rows_unpack

pytestmark = pytest.mark.unit

ROW = {"partition": 0, "committed": 5, "low": 0, "high": 9, "lag": 4, "state": "lagging", "lag_seconds": 1.5,
       "lag_method": "record timestamp", "retention_margin": None, "status": "OK", "status_reason": ""}


def test_same_keyed_rows_keep_their_keys_once_and_read_back_equal():
    rows = [dict(ROW, partition=p, committed=5 + p) for p in range(200)]
    packed = rows_pack(rows)
    assert packed["columns"] == list(ROW) and list(packed["rows"][3][:2]) == [3, 8]
    assert rows_unpack(json.loads(json.dumps(packed))) == rows
    # The point of it: the names are written once, not once per partition.
    assert len(json.dumps(packed)) < len(json.dumps(rows)) / 2


def test_rows_in_another_key_order_are_packed_by_name():
    rows = [ROW, dict(reversed(list(ROW.items())), partition=1)]
    assert rows_unpack(rows_pack(rows)) == rows


@pytest.mark.parametrize("value", [
    [],  # no row
    [ROW, dict(ROW, lag_is_upper_bound=True)],  # keys differ: kept as it was
    [ROW, None],
    [{}, {}],  # no key
    ["a", "b"],
    {"columns": 1},  # a dict not in the columns form
    None,
    "text",
])
def test_anything_else_is_stored_as_it_is_and_read_back_unchanged(value):
    assert rows_pack(value) is value
    assert rows_unpack(json.loads(json.dumps(value))) == value


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                           lambda inner: st.lists(inner, max_size=3), max_leaves=5)


@given(st.lists(st.dictionaries(st.sampled_from(["a", "b", "columns", "rows"]), json_values, max_size=4), max_size=5))
def test_any_list_of_rows_reads_back_equal(rows):
    assert rows_unpack(json.loads(json.dumps(rows_pack(rows)))) == rows
