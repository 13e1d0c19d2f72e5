"""dashboard.downsample: pure, bounded, spikes kept, first and last kept, x order kept."""
from __future__ import annotations

import random

import pytest

from dashboard.downsample import lttb, minmax_buckets

METHODS = [minmax_buckets, lttb]


def noisy_series_with_spike(n: int = 100_000, spike_at: int = 50_000, spike: float = 1e6):
    rng = random.Random(7)
    points = [(float(i * 10_000), 100.0 + rng.uniform(-5, 5)) for i in range(n)]
    points[spike_at] = (points[spike_at][0], spike)
    return points


@pytest.mark.parametrize("reduce", METHODS)
def test_1_a_spike_in_the_middle_of_100k_points_survives_200_points(reduce):
    points = noisy_series_with_spike()
    kept = reduce(points, 200)
    assert len(kept) <= 200
    assert points[50_000] in kept  # the very point, with its x: the chart shows it where it happened
    assert max(y for _, y in kept) == 1e6


def test_2_a_dip_survives_minmax_too():
    points = noisy_series_with_spike(spike=-1e6)
    assert points[50_000] in minmax_buckets(points, 200)


@pytest.mark.parametrize("reduce", METHODS)
@pytest.mark.parametrize("n,budget", [(1000, 3), (1000, 4), (1000, 5), (1000, 200), (1001, 1000), (5, 4), (10_007, 333)])
def test_3_bounded_ordered_subset_with_both_ends(reduce, n, budget):
    points = [(float(i), float((i * 7919) % 101)) for i in range(n)]
    kept = reduce(points, budget)
    assert len(kept) <= budget
    assert kept[0] == points[0] and kept[-1] == points[-1]
    xs = [x for x, _ in kept]
    assert xs == sorted(xs) and len(set(xs)) == len(xs)  # x order, no point twice
    assert set(kept) <= set(points)  # real samples, never invented averages


def test_4_lttb_uses_its_whole_budget_and_minmax_nearly():
    points = [(float(i), float(i % 13)) for i in range(10_000)]
    assert len(lttb(points, 500)) == 500
    assert len(minmax_buckets(points, 500)) == 500  # 2 ends + 249 buckets × (min, max)


@pytest.mark.parametrize("reduce", METHODS)
def test_5_short_series_come_back_unchanged_as_a_new_list(reduce):
    points = [(1.0, 2.0), (2.0, 3.0), (3.0, 1.0)]
    kept = reduce(points, 10)
    assert kept == points and kept is not points
    assert reduce([], 10) == []


def test_6_budgets_too_small_to_mean_anything_are_refused():
    with pytest.raises(ValueError, match="at least 2"):
        minmax_buckets([(0, 0)] * 10, 1)
    with pytest.raises(ValueError, match="at least 3"):
        lttb([(0, 0)] * 10, 2)


def test_7_minmax_keeps_each_buckets_extremes_in_time_order():
    # Interior of 8 points in 2 buckets of 4: the max comes before the min in the second bucket.
    points = [(0, 0), (1, 5), (2, 9), (3, 1), (4, 5), (5, 8), (6, 2), (7, 3), (8, 0), (9, 4)]
    assert minmax_buckets(points, 6) == [(0, 0), (2, 9), (3, 1), (5, 8), (8, 0), (9, 4)]


def test_8_a_flat_bucket_gives_one_point_not_two():
    points = [(i, 7) for i in range(10)]
    assert minmax_buckets(points, 6) == [(0, 7), (1, 7), (5, 7), (9, 7)]
