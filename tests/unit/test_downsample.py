"""Downsampling keeps spikes, ends and order, and never exceeds its budget."""
from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from offsetwatch.lib.downsample import lttb, minmax_buckets

BOTH = [minmax_buckets, lttb]


def flat_with_spike(n: int, at: int, height: float) -> list[tuple[int, float]]:
    rng = random.Random(n)
    return [(i, height if i == at else 100 + rng.random()) for i in range(n)]


@pytest.mark.parametrize("reduce", BOTH)
@pytest.mark.parametrize("at", [1, 50_000, 99_998])
@pytest.mark.parametrize("height", [1e6, -1e6])
def test_a_single_spike_among_100k_points_survives_reduction_to_200(reduce, at, height):
    points = flat_with_spike(100_000, at, height)
    out = reduce(points, 200)
    assert len(out) <= 200
    assert (at, height) in out


@pytest.mark.parametrize("reduce", BOTH)
def test_first_and_last_kept_and_x_order_preserved_with_datetimes(reduce):
    t0 = datetime(2026, 11, 1, tzinfo=timezone.utc)
    points = [(t0 + timedelta(minutes=i), (i * 7919) % 1000) for i in range(43_200)]
    out = reduce(points, 2000)
    assert len(out) <= 2000
    assert out[0] == points[0] and out[-1] == points[-1]
    assert [x for x, _ in out] == sorted({x for x, _ in out})  # increasing, no duplicates
    assert set(out) <= set(points)


@pytest.mark.parametrize("reduce", BOTH)
def test_short_input_is_returned_unchanged(reduce):
    points = [(1, 5), (2, 7), (3, 1)]
    assert reduce(points, 200) == points
    assert reduce(points, 4) == points
    assert reduce([], 10) == []


def test_minmax_keeps_every_bucket_extreme():
    # Two buckets of 4 inner points: each keeps its lowest and highest.
    points = [(0, 0), (1, 5), (2, 9), (3, 1), (4, 4), (5, 3), (6, 8), (7, 2), (8, 6), (9, 0)]
    assert minmax_buckets(points, 6) == [(0, 0), (2, 9), (3, 1), (6, 8), (7, 2), (9, 0)]


@pytest.mark.parametrize("reduce,too_small", [(minmax_buckets, 3), (lttb, 2)])
def test_a_budget_too_small_is_refused(reduce, too_small):
    with pytest.raises(ValueError, match="max_points"):
        reduce([(i, i) for i in range(10)], too_small)


@given(st.lists(st.integers(-10**9, 10**9), max_size=400), st.integers(4, 120))
def test_any_series_fits_its_budget_and_keeps_its_extremes_under_minmax(ys, budget):
    points = list(enumerate(ys))
    out = minmax_buckets(points, budget)
    assert len(out) <= budget
    if points:
        assert out[0] == points[0] and out[-1] == points[-1]
        assert max(y for _, y in out) == max(ys) and min(y for _, y in out) == min(ys)


@given(st.lists(st.floats(-1e9, 1e9), max_size=400), st.integers(3, 120))
def test_any_series_fits_its_budget_under_lttb(ys, budget):
    points = list(enumerate(ys))
    out = lttb(points, budget)
    assert len(out) <= budget
    if points:
        assert out[0] == points[0] and out[-1] == points[-1]
    assert [x for x, _ in out] == sorted(x for x, _ in out)


def _minmax_reference(points, max_points):
    """minmax_buckets as first written (one loop per bucket): the first lowest, the first highest."""
    n = len(points)
    if n <= max_points:
        return list(points)
    buckets, inner, out = (max_points - 2) // 2, n - 2, [points[0]]
    for b in range(buckets):
        start, end = 1 + b * inner // buckets, 1 + (b + 1) * inner // buckets
        lo = hi = start
        lo_y = hi_y = points[start][1]
        for i in range(start + 1, end):
            y = points[i][1]
            if y < lo_y:
                lo, lo_y = i, y
            elif y > hi_y:
                hi, hi_y = i, y
        out += [points[lo]] if lo == hi else [points[min(lo, hi)], points[max(lo, hi)]]
    out.append(points[-1])
    return out


@given(st.lists(st.integers(-5, 5), max_size=400), st.integers(4, 60))
def test_minmax_buckets_keeps_the_first_lowest_and_highest_of_each_bucket(ys, max_points):
    points = list(enumerate(ys))
    assert minmax_buckets(points, max_points) == _minmax_reference(points, max_points)
