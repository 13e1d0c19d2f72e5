"""Export formats: CSV tables of batches and chart series with their preamble, the chart's JSON,
download names, and chart images (PNG/SVG) rendered by kaleido in the system Chromium."""
from __future__ import annotations

import logging
import os
import re
import shutil
import threading
from datetime import datetime
from typing import Any, Iterator
from zoneinfo import ZoneInfo

from django.conf import settings

from dashboard.exports.selectors import batch_export_partitions, batch_export_rows
from dashboard.models import Pipeline
from dashboard.params import TimeRange
from offsetwatch.lib.timefmt import ms_local

log = logging.getLogger(__name__)


def export_preamble(*, pipeline: Pipeline, what: str, time_range: TimeRange, tz: ZoneInfo, now: datetime) -> list[list]:
    """The `#` rows that say what a CSV holds. Names are cells of their own, so a topic or group
    beginning with `=` is neutralised like any other cell."""
    return [
        ["# Offset Watch export", what],
        ["# topic", pipeline.topic],
        ["# group", pipeline.group],
        ["# store", pipeline.store.name],
        ["# cluster", pipeline.store.cluster.name],
        ["# range", time_range.label],
        ["# from", time_range.since.astimezone(tz).isoformat() if time_range.since else "(oldest retained)"],
        ["# to", time_range.until.astimezone(tz).isoformat()],
        ["# time zone", tz.key],
        ["# exported at", now.astimezone(tz).isoformat(timespec="seconds")],
    ]


def range_ms(time_range: TimeRange) -> tuple[int | None, int]:
    since = None if time_range.since is None else int(time_range.since.timestamp() * 1000)
    return since, int(time_range.until.timestamp() * 1000)


def batches_table(*, pipeline: Pipeline, time_range: TimeRange, tz: ZoneInfo) -> tuple[list[str], Iterator[list]]:
    """(header, rows) of the per-batch history, oldest first: batch time (ISO in `tz` and epoch
    ms), batch id, committed, records, then one column per partition (empty where a batch has
    none)."""
    since_ms, until_ms = range_ms(time_range)
    partitions = batch_export_partitions(pipeline=pipeline, since_ms=since_ms, until_ms=until_ms)
    header = ["batch_time", "batch_time_ms", "batch_id", "committed", "records", *[f"p{p}" for p in partitions]]
    keys = [str(p) for p in partitions]

    def rows() -> Iterator[list]:
        for ms, batch_id, committed, records, offsets in batch_export_rows(
            pipeline=pipeline, since_ms=since_ms, until_ms=until_ms
        ):
            yield [ms_local(ms, tz), ms, batch_id, committed, records, *[offsets.get(k) for k in keys]]

    return header, rows()


def chart_table_rows(table, tz: ZoneInfo) -> tuple[list[str], Iterator[list]]:
    """(header, rows) of a ChartTable: time (ISO in `tz`), epoch ms, one column per series."""
    header = ["time", "epoch_ms", *[f"{name} ({table.unit})" for name in table.names]]

    def rows() -> Iterator[list]:
        for t, values in table.rows():
            ms = round(t * 1000)
            yield [ms_local(ms, tz), ms, *values]

    return header, rows()


def chart_json(*, pipeline: Pipeline, table, markers, time_range: TimeRange, tz: ZoneInfo, title: str,
               downsampled_to: int | None) -> dict:
    """The chart's data as one JSON document: what it is, then each series as [epoch_ms, value]
    points (unknown values left out) and the markers."""
    return {
        "title": title,
        "pipeline": {"id": pipeline.pk, "topic": pipeline.topic, "group": pipeline.group,
                     "store": pipeline.store.name, "cluster": pipeline.store.cluster.name},
        "kind": table.kind,
        "unit": table.unit,
        "range": {"label": time_range.label, "preset": time_range.preset,
                  "from": time_range.since.isoformat(), "to": time_range.until.isoformat()},
        "time_zone": tz.key,
        "downsampled_to": downsampled_to,
        "points_format": ["epoch_ms", "value"],
        "series": [
            {"name": name, "partition": partition,
             "points": [[round(t * 1000), v] for t, v in zip(table.times, table.values(i)) if v is not None]}
            for i, (name, partition) in enumerate(zip(table.names, table.partitions))
        ],
        "markers": [{"at": m.at.astimezone(tz).isoformat(), "epoch_ms": round(m.at.timestamp() * 1000),
                     "kind": m.kind, "label": m.label} for m in markers],
    }


def _slug(text: str, limit: int = 60) -> str:
    # Hostile names (quotes, newlines, slashes, non-ASCII) never reach a header or a path.
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._")[:limit] or "x"


def download_name(*, pipeline: Pipeline, what: str, time_range: TimeRange, ext: str) -> str:
    """e.g. offsetwatch_orders_billing_local-hbase_last-24h_total-messages.png"""
    parts = ["offsetwatch", _slug(pipeline.topic), _slug(pipeline.group), _slug(pipeline.store.name),
             time_range.slug, _slug(what)]
    return "_".join(parts) + "." + ext


IMAGE_TYPES = {"png": "image/png", "svg": "image/svg+xml"}


class ImageExportFailed(RuntimeError):
    """Chromium could not render the chart (missing, crashed, too slow)."""


_render_lock = threading.Lock()


_renderer_broken: str | None = None


def _kaleido_ready():
    """kaleido's sync server (one Chromium per process, started on the first image: ~2 s once,
    then ~0.15 s per image), restarted if its thread died."""
    import kaleido

    server = kaleido._global_server
    thread = getattr(server, "_thread", None)
    if server.is_running() and thread is not None and not thread.is_alive():
        log.warning("kaleido's server thread died; starting it again")
        kaleido.stop_sync_server(silence_warnings=True)
    if not server.is_running():
        # mathjax=False: no CDN fetch (closed networks); plotly.js comes from the plotly package.
        kaleido.start_sync_server(n=1, timeout=settings.IMAGE_TIMEOUT_S, mathjax=False, silence_warnings=True,
                                  path=chromium_path())
    return kaleido


def chromium_path() -> str:
    """The Chromium to render with, found before kaleido starts: a missing one would kill
    kaleido's server thread and leave its callers waiting, where this says what is missing."""
    configured = settings.CHROMIUM_PATH or os.environ.get("BROWSER_PATH", "")
    if configured:
        if not os.path.isfile(configured):
            raise ImageExportFailed(f"no Chromium at {configured} (OFFSETWATCH_CHROMIUM_PATH or BROWSER_PATH)")
        return configured
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        found = shutil.which(name)
        if found:
            return found
    raise ImageExportFailed("no Chromium on PATH: install Debian's chromium package (scripts/setup.sh does) or set "
                            "OFFSETWATCH_CHROMIUM_PATH")


def render_image(fig, *, fmt: str, width: int, height: int) -> bytes:
    """The figure as PNG or SVG bytes. One render at a time per process (kaleido's sync server
    pairs requests and answers through one queue); a render that hangs past IMAGE_TIMEOUT_S
    fails this request and the next ones until the process restarts, instead of piling up."""
    global _renderer_broken
    if fmt not in IMAGE_TYPES:
        raise ValueError(f"unknown image format {fmt!r}")
    with _render_lock:
        if _renderer_broken:
            raise ImageExportFailed(_renderer_broken)
        try:
            kaleido = _kaleido_ready()
        except ImageExportFailed:
            raise
        except Exception as exc:  # kaleido refusing to start: said, not a 500
            raise ImageExportFailed(f"cannot start Chromium for kaleido: {exc}") from exc
        result: dict[str, Any] = {}

        def call() -> None:
            try:
                result["image"] = kaleido.calc_fig_sync(
                    fig.to_dict(), opts={"format": fmt, "width": width, "height": height, "scale": 1})
            except BaseException as exc:
                result["error"] = exc

        worker = threading.Thread(target=call, name="chart-image", daemon=True)
        worker.start()
        worker.join(settings.IMAGE_TIMEOUT_S + 10)
        if worker.is_alive():
            _renderer_broken = (f"Chromium did not answer within {settings.IMAGE_TIMEOUT_S + 10:.0f} s; image export "
                                "is off until the dashboard restarts")
            log.error(_renderer_broken)
            raise ImageExportFailed(_renderer_broken)
        if "error" in result:
            raise ImageExportFailed(f"Chromium could not render the chart: {result['error']}") from result["error"]
    image = result["image"]
    return image.encode() if isinstance(image, str) else image
