"""Reduce a long series to a few points for a chart without losing what matters (pure, no I/O).

Points are (x, y) pairs sorted by x; x is a number or a datetime, y a number. Both functions
return the input unchanged (as a new list) when it already fits, always keep the first and the
last point, and never return more than `max_points` points.

- `minmax_buckets` keeps, for each of (max_points - 2) // 2 equal-count buckets, the lowest and
  the highest point, in x order. A spike (up or down) is always kept: what on-call needs from a
  lag chart.
- `lttb` (Largest-Triangle-Three-Buckets, Steinarsson 2013) keeps one point per bucket, the one
  forming the largest triangle with the previous kept point and the next bucket's average. Closer
  to the shape of the line per point kept; a lone spike forms the largest triangle, so it survives.
"""
from __future__ import annotations

from datetime import datetime
from typing import Sequence

Point = tuple  # (x, y)


def minmax_buckets(points: Sequence[Point], max_points: int) -> list[Point]:
    """At most `max_points` points: first, last, and each bucket's min and max (x order kept)."""
    if max_points < 4:
        raise ValueError(f"max_points must be at least 4 (first, last and one bucket's min and max), got {max_points}")
    n = len(points)
    if n <= max_points:
        return list(points)
    buckets = (max_points - 2) // 2
    inner = n - 2  # the first and the last point are kept as they are
    out = [points[0]]
    ys = [p[1] for p in points]
    for b in range(buckets):
        start = 1 + b * inner // buckets
        end = 1 + (b + 1) * inner // buckets
        # The first lowest and the first highest of the bucket, found by min/max in C (a chart
        # of 64 series reduces ~100,000 values per request).
        segment = ys[start:end]
        lo, hi = start + segment.index(min(segment)), start + segment.index(max(segment))
        if lo == hi:
            out.append(points[lo])
        else:
            out.append(points[min(lo, hi)])
            out.append(points[max(lo, hi)])
    out.append(points[-1])
    return out


def _num(x) -> float:
    return x.timestamp() if isinstance(x, datetime) else float(x)


def lttb(points: Sequence[Point], max_points: int) -> list[Point]:
    """At most `max_points` points by Largest-Triangle-Three-Buckets (first and last kept)."""
    if max_points < 3:
        raise ValueError(f"max_points must be at least 3 (first, last and one bucket), got {max_points}")
    n = len(points)
    if n <= max_points:
        return list(points)
    xs = [_num(x) for x, _ in points]  # datetimes become epoch seconds for the areas only
    ys = [float(y) for _, y in points]
    buckets = max_points - 2
    inner = n - 2
    out = [points[0]]
    a = 0  # index of the last point kept
    for b in range(buckets):
        start = 1 + b * inner // buckets
        end = 1 + (b + 1) * inner // buckets
        # The next bucket's average; for the last bucket, the last point itself.
        nstart, nend = (end, 1 + (b + 2) * inner // buckets) if b < buckets - 1 else (n - 1, n)
        count = nend - nstart
        avg_x = sum(xs[nstart:nend]) / count
        avg_y = sum(ys[nstart:nend]) / count
        ax, ay = xs[a], ys[a]
        best, best_area = start, -1.0
        for i in range(start, end):
            # Twice the triangle's area; the factor does not change which point wins.
            area = abs((ax - avg_x) * (ys[i] - ay) - (ax - xs[i]) * (avg_y - ay))
            if area > best_area:
                best, best_area = i, area
        out.append(points[best])
        a = best
    out.append(points[-1])
    return out
