"""Formatting only: numbers, durations and status names as the pages show them; URLs masked and
names made visible (streamoffsets.urls, streamoffsets.visible)."""
from __future__ import annotations

from itertools import islice

from django import template
from django.utils.html import format_html

from dashboard.audit.services import change_lines
from offsetwatch.lib import timefmt
from streamoffsets.evaluation import Status, human_duration
from streamoffsets.urls import mask_secrets, mask_url
from streamoffsets.visible import visible as visible_name

register = template.Library()


def _missing(value) -> bool:
    # A missing related object (a pipeline not evaluated yet) reaches filters as "" or None.
    return value is None or value == ""


@register.filter
def status_name(value) -> str:
    return "UNKNOWN" if _missing(value) else Status(int(value)).name


@register.filter
def duration(seconds) -> str:
    """12 s, 4 min, 3 h, 2 d; an em dash for unknown."""
    return "—" if _missing(seconds) else human_duration(float(seconds))


@register.filter
def thousands(value) -> str:
    return "—" if _missing(value) else f"{int(value):,}"


@register.filter
def age_ms(epoch_ms, now) -> str:
    """How long ago an epoch-milliseconds time was, relative to `now`."""
    if epoch_ms is None:
        return "—"
    return duration(max(0.0, now.timestamp() - epoch_ms / 1000))


@register.filter
def age(when, now) -> str:
    """How long before `now` a datetime was."""
    return "—" if when is None else duration(max(0.0, (now - when).total_seconds()))


@register.filter
def ms_datetime(epoch_ms) -> str:
    """An epoch-milliseconds time as 2026-11-22 13:45:01.123 (UTC)."""
    return timefmt.ms_clock(epoch_ms)


@register.filter
def audit_change(event) -> list[str]:
    """An audit event's before → after, one short line per key ("p0: 120 → 40")."""

    # Names in a change (a store renamed) are shown through `visible`, line breaks included.
    return [visible_name(line) for line in change_lines(event.get("before"), event.get("after"))]


@register.filter
def masked_url(url) -> str:
    """A store or cluster URL with its secrets masked (streamoffsets.urls.mask_url): only the
    admin shows a URL whole."""
    return "" if _missing(url) else mask_url(str(url))


@register.filter
def masked_text(text) -> str:
    """Free text that may quote a URL or a name (a stored error, a source's label): any URL in it
    masked, as a last guard, and invisible characters shown (line breaks and tabs kept)."""
    return "" if _missing(text) else visible_name(mask_secrets(str(text)), keep="\n\t")


@register.filter
def visible(name) -> str:
    """A name with bidirectional controls and invisible characters shown as ⟨U+XXXX⟩."""
    return "" if _missing(name) else visible_name(name)


START_REPORT_OFFSETS = 10  # a job of 1,000 partitions reports 1,000 offsets at each start


@register.filter
def offsets_brief(offsets) -> str:
    """A start report's offsets ({partition: offset}) as "p0: 12, p1: 40": the first
    START_REPORT_OFFSETS, then how many partitions more (the clamped ones are named in the
    report's decisions, beside)."""
    if not isinstance(offsets, dict):
        return "—"
    shown = ", ".join(f"p{p}: {o}" for p, o in islice(offsets.items(), START_REPORT_OFFSETS))
    more = len(offsets) - START_REPORT_OFFSETS
    return f"{shown} and {more:,} partitions more" if more > 0 else shown


def _or_dash(value) -> str:
    return "—" if value is None else str(value)


@register.simple_tag
def partition_row(row: dict) -> str:
    """One row of a pipeline's partition table (dashboard.monitoring.partition_rows). Built here,
    not by a template loop: a template row of ten cells costs ~85 µs, so "show all" of 1,000
    partitions spent 85 ms on them; this costs about a tenth. Every value is escaped."""
    lag, state, severity = row.get("lag"), row.get("state") or "", row.get("severity") or "OK"
    upper = bool(row.get("lag_is_upper_bound") and lag)
    lag_title = row.get("lag_absent") or ("at most: a compacted topic has offset gaps" if upper else "")
    time_title = row.get("lag_method") or row.get("lag_absent") or ""
    left = row.get("retention_seconds_left")
    state_class = "state-bad" if "out-of-range" in state else "state-warn" if state == "lagging" else ""
    lost = row.get("messages_lost")
    return format_html(
        '<tr data-partition="{}" data-status="{}"><td class="num">{}</td><td class="num">{}</td>'
        '<td class="num">{}</td><td class="num">{}</td><td class="num lag"{}>{}{}</td>'
        '<td class="num" title="{}">{}</td><td class="num">{}</td><td class="num">{}</td><td>{}</td>'
        '<td class="{}">{}{}</td></tr>',
        row["partition"], severity, row["partition"], _or_dash(row.get("committed")), _or_dash(row.get("low")),
        _or_dash(row.get("high")), format_html(' title="{}"', lag_title) if lag_title else "", "≤ " if upper else "",
        _or_dash(lag), time_title, duration(row.get("lag_seconds")), _or_dash(row.get("retention_margin")),
        format_html('<span class="state-bad">{}</span>', duration(left)) if left is not None else "—",
        format_html('<span class="badge {}">{}</span> {}', severity, severity, row.get("status_reason") or "")
        if severity != "OK" else "OK",
        state_class, state, f": {thousands(lost)} messages deleted before being processed" if lost else "",
    )
