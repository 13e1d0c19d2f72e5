"""The overview's lag sparklines: a short series per pipeline kept with its evaluation.

The overview of 1,000 pipelines cannot afford an hour of samples per pipeline per render, so each
cycle extends the previous evaluation's series: one point per minute (the largest lag seen in
that minute, so spikes stay), the last hour kept. Rendering is then a few numbers per row.
"""
from __future__ import annotations

BUCKET_S = 60
KEEP = 60


def push(points: list[list[float]], at_s: float, value: int, bucket_s: int = BUCKET_S, keep: int = KEEP) -> list[list[float]]:
    """`points` ([[bucket start s, max value], ...], oldest first) with `value` seen at `at_s`."""
    bucket = at_s - at_s % bucket_s
    points = [p for p in points if isinstance(p, list) and len(p) == 2 and p[0] <= bucket]
    if points and points[-1][0] == bucket:
        points[-1] = [bucket, max(points[-1][1], value)]
    else:
        points.append([bucket, value])
    return [p for p in points if p[0] > bucket - keep * bucket_s]


def svg_points(points: list[list[float]], width: int = 120, height: int = 24) -> str:
    """The `points` attribute of an SVG polyline drawing the series in a width x height box
    (time left to right, zero at the bottom); empty with fewer than two points."""
    if len(points) < 2:
        return ""
    t0, t1 = points[0][0], points[-1][0]
    top = max(p[1] for p in points) or 1
    span = (t1 - t0) or 1
    # Whole pixels: the line is 120 x 24 px, and integers format several times faster than
    # floats (a thousand sparklines per overview render).
    x_scale, y_scale = width / span, (height - 2) / top
    return " ".join([f"{round((t - t0) * x_scale)},{round(height - 1 - v * y_scale)}" for t, v in points])
