"""A batch's numbers that the database cannot hold are named (dashboard.monitoring.storable): the
fast check of plain in-range ints gives the same answer as the per-value check, case by case."""
from __future__ import annotations

import pytest

from dashboard.monitoring import storable
from streamoffsets.types import BatchOffsets

BIG, PART = storable.BIGINT_MAX, storable.PARTITION_MAX


def _per_value(offsets: dict) -> str | None:
    """The per-value check alone (what batch_problem did before the fast path)."""
    for partition, offset in offsets.items():
        if not storable._in(partition, 0, PART):
            return f"partition {storable._number(partition)} is outside 0..2^31-1: not collected"
        if not storable._in(offset, 0, BIG):
            return f"partition {partition}: offset {storable._number(offset)} is outside 0..2^63-1: not collected"
    return None


CASES = [
    # (number, offsets, fast path taken, problem)
    (1, {0: 5, 1: 0, 2: BIG}, True, None),  # plain ints, the bounds included
    (2, {PART: 1}, True, None),  # the largest partition id
    (3, {}, False, None),  # no offsets: nothing to object to
    (4, {0: -1}, False, "partition 0: offset -1 is outside 0..2^63-1: not collected"),
    (5, {0: BIG + 1}, False, f"partition 0: offset {BIG + 1} is outside 0..2^63-1: not collected"),
    (6, {PART + 1: 0}, False, f"partition {PART + 1} is outside 0..2^31-1: not collected"),
    (7, {-1: 0}, False, "partition -1 is outside 0..2^31-1: not collected"),
    (8, {0: True}, False, "partition 0: offset True is outside 0..2^63-1: not collected"),  # a bool is no offset
    (9, {"3": "7", 4: 8}, False, None),  # digits as text (JSON's partition ids) pass the slow way
    (10, {0: 1.0}, False, "partition 0: offset 1.0 is outside 0..2^63-1: not collected"),  # a float is not an int
]


@pytest.mark.parametrize("number, offsets, fast, problem", CASES, ids=[str(c[0]) for c in CASES])
def test_the_fast_check_answers_as_the_per_value_check(number, offsets, fast, problem):
    assert storable._plain_offsets(offsets) is fast
    assert _per_value(offsets) == problem
    assert storable.batch_problem(BatchOffsets("t", "g", 1000, offsets)) == problem
