"""Downsampling of (x, y) series for charts and the API: pure functions, no Django.

Both keep the first and the last point and return at most `max_points` points, in x order, as
the same (x, y) tuples they were given. Points must be sorted by x. A series already short
enough is returned unchanged (as a new list).

- `minmax_buckets`: the interior is cut into equal-count buckets; each bucket gives its minimum
  and its maximum. Every spike and every dip survives by construction, which is what an on-call
  engineer looks for in a lag series.
- `lttb`: Largest-Triangle-Three-Buckets (Steinarsson, 2013): one point per bucket, the one
  forming the largest triangle with the previous kept point and the next bucket's average.
  Visually closer to the original shape at the same budget; keeps isolated spikes in practice
  (a spike makes by far the largest triangle in its bucket), not by construction.
"""
from __future__ import annotations

from collections.abc import Sequence

Point = tuple[float, float]


def minmax_buckets(points: Sequence[Point], max_points: int) -> list[Point]:
    """At most `max_points` points: first, last, and each interior bucket's min and max."""
    if max_points < 2:
        raise ValueError(f"max_points must be at least 2 (first and last), not {max_points}")
    n = len(points)
    if n <= max_points:
        return list(points)
    buckets = (max_points - 2) // 2
    out: list[Point] = [points[0]]
    interior = n - 2
    for b in range(buckets):
        # Equal-count buckets over points[1:n-1]; integer bounds so every point is in exactly one.
        start = 1 + b * interior // buckets
        end = 1 + (b + 1) * interior // buckets
        if start >= end:
            continue
        lo_i = hi_i = start
        lo_y = hi_y = points[start][1]
        for i in range(start + 1, end):
            y = points[i][1]
            if y < lo_y:
                lo_i, lo_y = i, y
            elif y > hi_y:
                hi_i, hi_y = i, y
        if lo_i == hi_i:
            out.append(points[lo_i])
        else:
            first, second = sorted((lo_i, hi_i))
            out.append(points[first])
            out.append(points[second])
    out.append(points[-1])
    return out


def lttb(points: Sequence[Point], max_points: int) -> list[Point]:
    """Largest-Triangle-Three-Buckets: exactly `max_points` points when the series is longer."""
    if max_points < 3:
        raise ValueError(f"max_points must be at least 3 for LTTB, not {max_points}")
    n = len(points)
    if n <= max_points:
        return list(points)
    out: list[Point] = [points[0]]
    every = (n - 2) / (max_points - 2)
    a = 0  # index of the last kept point
    for i in range(max_points - 2):
        start = int(i * every) + 1
        end = min(int((i + 1) * every) + 1, n - 1)
        # The next bucket's average (the last point for the last bucket).
        next_start = end
        next_end = min(int((i + 2) * every) + 1, n - 1) if i < max_points - 3 else n
        if next_start >= next_end:
            next_start, next_end = n - 1, n
        count = next_end - next_start
        avg_x = sum(points[j][0] for j in range(next_start, next_end)) / count
        avg_y = sum(points[j][1] for j in range(next_start, next_end)) / count
        ax, ay = points[a]
        best, best_area = start, -1.0
        for j in range(start, end):
            x, y = points[j]
            # Twice the triangle's area; the factor does not change which point wins.
            area = abs((ax - avg_x) * (y - ay) - (ax - x) * (avg_y - ay))
            if area > best_area:
                best, best_area = j, area
        out.append(points[best])
        a = best
    out.append(points[-1])
    return out
