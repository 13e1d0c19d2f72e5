"""A topic's watermark history built lazily (dashboard.monitoring.history.TopicSeries, #16) equals
the plain definitions over every sample fully unpacked, whatever partitions come and go: each
partition's high and low series, whether its low watermark moved (the shortcut through the first
and last samples included), and each sample's highs."""
from __future__ import annotations

from datetime import datetime, timedelta
from datetime import timezone as dt_timezone

from hypothesis import given, settings
from hypothesis import strategies as st

from dashboard.monitoring.history import PackedMarks, TopicSeries
from offsetwatch.lib.packing import pack, pack_partitions

T0 = datetime(2026, 3, 1, tzinfo=dt_timezone.utc)

samples = st.lists(
    st.dictionaries(st.integers(0, 4), st.tuples(st.integers(0, 3), st.integers(0, 9)), max_size=5),
    max_size=6,
)


def _packed(marks: dict[int, tuple[int, int]]) -> PackedMarks:
    ids = sorted(marks)
    return PackedMarks(pack_partitions(ids), pack([marks[p][0] for p in ids]), pack([marks[p][1] for p in ids]))


@settings(max_examples=300, deadline=None)
@given(samples, st.booleans())
def test_the_lazy_series_equal_the_plain_definitions(history_list, shuffled):
    history = {T0 + timedelta(seconds=10 * i): marks for i, marks in enumerate(history_list)}
    order = list(reversed(history)) if shuffled else list(history)  # any order in: oldest first out
    series = TopicSeries({at: _packed(history[at]) for at in order})
    items = [(at.timestamp(), history[at]) for at in sorted(history)]
    for p in range(6):
        lows = [(t, m[p][0]) for t, m in items if p in m]
        highs = [(t, m[p][1]) for t, m in items if p in m]
        assert series.lows(p) == lows
        assert series.highs(p) == highs
        assert series.low_moved(p) == (bool(lows) and lows[0][1] != lows[-1][1])
    for at, marks in history.items():
        assert series.highs_at(at) == {p: hi for p, (_, hi) in marks.items()}
    assert series.highs_at(T0 - timedelta(seconds=1)) == {}


def test_a_low_watermark_that_moved_is_found_by_the_shortcut_and_by_the_walk():
    # Partition 0 is in every sample (first and last compared); 1 joins late and 2 leaves early (walked).
    history = {T0: {0: (0, 5), 2: (1, 5)}, T0 + timedelta(seconds=10): {0: (3, 9), 1: (2, 9), 2: (4, 9)},
               T0 + timedelta(seconds=20): {0: (3, 9), 1: (6, 9)}}
    series = TopicSeries({at: _packed(marks) for at, marks in history.items()})
    assert [series.low_moved(p) for p in range(4)] == [True, True, True, False]
    flat = TopicSeries({at: _packed({0: (7, 9)}) for at in history})
    assert not flat.low_moved(0)
