"""Plotly figures built on the server from database rows (the page only draws them)."""
from __future__ import annotations

import html
import json
from array import array
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from zoneinfo import ZoneInfo

import plotly.graph_objects as go
import plotly.io as pio

from dashboard.charts.selectors import MISSING, ChartTable, Marker, chart_markers, pipeline_chart_table
from dashboard.models import Pipeline
from dashboard.params import ChartParams, TimeRange
from offsetwatch.lib.downsample import minmax_buckets
from streamoffsets.visible import visible

# A page's chart payload stays under ~300 KB whatever the range and the partition count: all
# series of a figure share FIGURE_POINT_BUDGET points (~22 bytes each in JSON), each series gets
# at most SERIES_MAX_POINTS (a chart is ~1,000 px wide: more would not show) and at least
# SERIES_MIN_POINTS. Min/max buckets keep every spike.
FIGURE_POINT_BUDGET = 10_000
SERIES_MAX_POINTS = 2_000
SERIES_MIN_POINTS = 16
# Markers carry a hover label each: the newest MAX_MARKERS are drawn, the rest counted in a note.
MAX_MARKERS = 200
MARKER_LABEL_CHARS = 120

_MARKER_STYLE = {
    "incident opened": {"color": "#b42318", "symbol": "triangle-down"},
    "incident closed": {"color": "#2e7d32", "symbol": "triangle-up"},
    "restart": {"color": "#1d4ed8", "symbol": "diamond"},
    "rewind": {"color": "#6b46c1", "symbol": "x"},
}


def series_budget(series_count: int) -> int:
    """Points each series of a figure keeps."""
    return max(SERIES_MIN_POINTS, min(SERIES_MAX_POINTS, FIGURE_POINT_BUDGET // max(1, series_count)))


def chart_title(*, pipeline: Pipeline, kind: str, unit: str, time_range: TimeRange, tz_name: str) -> str:
    """Plain text naming the chart, the pipeline (topic / group, store), the range and the time zone.
    Names through `visible`: the title is read by people (pages, SVG/PNG, the CSV's first row), so a
    right-to-left override in a group name is shown, not obeyed."""
    if unit == "seconds":
        what = "Lag in seconds, most-behind partition" if kind == "total" else "Lag in seconds per partition"
    else:
        what = "Total lag in messages" if kind == "total" else "Lag in messages per partition"
    return (f"{what}: {visible(pipeline.topic)} / {visible(pipeline.group)} (store {visible(pipeline.store.name)}), "
            f"{time_range.label}, {tz_name}")


@dataclass
class Chart:
    table: ChartTable
    markers: list[Marker]
    title: str


def pipeline_chart(*, pipeline: Pipeline, params: ChartParams, tz: ZoneInfo, resolution: str | None = None) -> Chart:
    """A pipeline's chart: its numbers, its markers, its title. `resolution` as
    pipeline_chart_table takes it: None picks it from the range (the page's figure, images),
    SAMPLES is full resolution (exports)."""
    r = params.range
    table = pipeline_chart_table(pipeline=pipeline, kind=params.kind, unit=params.unit, since=r.since,
                                 until=r.until, resolution=resolution)
    return Chart(
        table=table,
        markers=chart_markers(pipeline=pipeline, since=r.since, until=r.until),
        title=chart_title(pipeline=pipeline, kind=params.kind, unit=params.unit, time_range=r, tz_name=tz.key),
    )


def wall_clock_ms(epoch_s: float, tz: ZoneInfo) -> int:
    """An instant as milliseconds of wall-clock time in `tz`: plotly.js draws date axes in UTC,
    so each point is shifted by its own offset (DST included) to read as local time."""
    offset = datetime.fromtimestamp(epoch_s, tz).utcoffset()
    return round((epoch_s + offset.total_seconds()) * 1000)


def table_downsample(table, max_points: int):
    """A ChartTable with at most about `max_points` rows, every column's spikes kept: each column
    gets max_points / columns points by min/max buckets, and the union of their rows is kept."""
    per_column = max(4, max_points // max(1, len(table.columns)))
    keep: set[int] = set()
    for i in range(len(table.columns)):
        points = [(row, v) for row, v in enumerate(table.values(i)) if v is not None]
        keep.update(row for row, _ in minmax_buckets(points, per_column))
    rows = sorted(keep)
    return ChartTable(table.kind, table.unit, array("d", (table.times[r] for r in rows)), list(table.names),
                      list(table.partitions), [array(col.typecode, (col[r] for r in rows)) for col in table.columns])


def chart_figure_dict(*, table, markers, title: str, tz: ZoneInfo) -> dict:
    """The figure of a ChartTable with its markers as plain data (plotly's figure schema), every
    series downsampled to its budget. Plain dicts, not plotly objects: validating 64 traces of
    points costs more than reading them from the roll-ups (chart_figure makes the object)."""
    unit = table.unit
    budget = series_budget(len(table.columns))
    data = []
    shifted: dict[float, int] = {}  # every series shares the table's times: each is shifted once
    for i, name in enumerate(table.names):
        points = minmax_buckets(_known_points(table.times, table.columns[i]), budget)
        data.append({
            "type": "scatter",
            "x": [shifted[t] if t in shifted else shifted.setdefault(t, wall_clock_ms(t, tz)) for t, _ in points],
            "y": [v for _, v in points],
            "mode": "lines+markers" if len(points) <= 100 else "lines",
            "name": name,
            "line": {"shape": "hv" if unit == "messages" else "linear", "width": 1.5},
            "hovertemplate": "%{x|%Y-%m-%d %H:%M:%S}<br>%{y:,}" + (" messages" if unit == "messages" else " s")
            + f"<extra>{html.escape(name)}</extra>",
        })
    annotations: list[dict] = []
    _add_markers(data, annotations, markers, tz)
    many = len(table.columns) > 1
    layout = {
        # Plotly reads tags in titles (<b>, <a href>): names are escaped so they show as written.
        "title": {"text": html.escape(title, quote=False), "font": {"size": 13}},
        "xaxis": {"type": "date", "title": {"text": f"time ({tz.key})"}},
        "yaxis": {"title": {"text": f"lag ({unit})"}, "rangemode": "tozero"},
        # The markers' axis: 0 to 1 over the plot, never shown.
        "yaxis2": {"overlaying": "y", "range": [0, 1], "visible": False, "fixedrange": True},
        "margin": {"l": 60, "r": 20, "t": 40, "b": 50},
        "height": 420 if many else 320,
        "showlegend": many or bool(markers),
    }
    if not len(table.times):
        annotations.append({"text": "no lag samples in this range yet", "showarrow": False, "xref": "paper",
                            "yref": "paper", "x": 0.5, "y": 0.5})
    if annotations:
        layout["annotations"] = annotations
    return {"data": data, "layout": layout}


def _known_points(times: array, column: array) -> list[tuple[float, int | float]]:
    """(time, value) where the column's value is known (ChartTable: MISSING in 'q', NaN in 'd')."""
    if column.typecode == "q":
        return [(t, v) for t, v in zip(times, column) if v != MISSING]
    return [(t, v) for t, v in zip(times, column) if v == v]


TEMPLATE = "plotly_white"


@lru_cache(maxsize=1)
def _template_json() -> dict:
    # The template as plotly.js takes it (plotly expands the name in Python): made once.
    return pio.templates[TEMPLATE].to_plotly_json()


def chart_figure(*, table, markers, title: str, tz: ZoneInfo) -> go.Figure:
    """The figure as a plotly object (images are rendered from it)."""
    fig = chart_figure_dict(table=table, markers=markers, title=title, tz=tz)
    fig["layout"]["template"] = TEMPLATE
    return go.Figure(fig)


def chart_figure_json(*, table, markers, title: str, tz: ZoneInfo) -> bytes:
    """The figure's JSON for the page (plotly.js draws it): what chart_figure(...).to_json() gives,
    without building and validating plotly objects."""
    fig = chart_figure_dict(table=table, markers=markers, title=title, tz=tz)
    fig["layout"]["template"] = _template_json()
    return json.dumps(fig, separators=(",", ":")).encode()


def _add_markers(data: list[dict], annotations: list[dict], markers, tz: ZoneInfo) -> None:
    shown = markers[-MAX_MARKERS:]
    by_kind: dict[str, list] = {}
    for m in shown:
        by_kind.setdefault(m.kind, []).append(m)
    for kind, items in by_kind.items():
        style = _MARKER_STYLE.get(kind, {"color": "#374151", "symbol": "circle"})
        xs = [wall_clock_ms(m.at.timestamp(), tz) for m in items]
        # A vertical line per event (x, x, gap), then a symbol at the top carrying the label.
        data.append({
            "type": "scatter",
            "x": [v for x in xs for v in (x, x, None)], "y": [v for _ in xs for v in (0, 1, None)], "yaxis": "y2",
            "mode": "lines", "line": {"color": style["color"], "width": 1, "dash": "dot"}, "hoverinfo": "skip",
            "legendgroup": kind, "showlegend": False,
        })
        data.append({
            "type": "scatter",
            "x": xs, "y": [1] * len(xs), "yaxis": "y2", "mode": "markers", "name": kind, "legendgroup": kind,
            "marker": {"color": style["color"], "symbol": style["symbol"], "size": 9},
            "hovertext": [html.escape(visible(m.label[:MARKER_LABEL_CHARS]), quote=False) for m in items],
            "hovertemplate": "%{x|%Y-%m-%d %H:%M:%S}<br>%{hovertext}<extra>" + kind + "</extra>",
        })
    if len(markers) > len(shown):
        annotations.append({"text": f"{len(markers) - len(shown)} older events not drawn", "showarrow": False,
                            "xref": "paper", "yref": "paper", "x": 0, "y": 1.06, "xanchor": "left"})
