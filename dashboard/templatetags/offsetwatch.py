"""Formatting only: numbers, durations and status names as the pages show them; URLs masked and
names made visible (streamoffsets.urls, streamoffsets.visible)."""
from __future__ import annotations

from html import escape
from itertools import islice

from django import template
from django.utils.safestring import mark_safe

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


def _cell(value) -> str:
    """A value as cell text, escaped: an em dash for None."""
    return "—" if value is None else escape(str(value))


@register.simple_tag
def partition_row(row: dict) -> str:
    """One row of a pipeline's partition table (dashboard.monitoring.partition_rows). Built here,
    not by a template loop: a template row of ten cells costs ~85 µs, so "show all" of 1,000
    partitions spent 85 ms on them; this costs about a tenth (html.escape directly: Django's
    escape and format_html wrap every call for lazy strings, half of the cost). Every value is
    escaped."""
    lag, state, severity = row.get("lag"), row.get("state") or "", _cell(row.get("severity") or "OK")
    upper = bool(row.get("lag_is_upper_bound") and lag)
    lag_title = row.get("lag_absent") or ("at most: a compacted topic has offset gaps" if upper else "")
    lag_title = f' title="{_cell(lag_title)}"' if lag_title else ""
    time_title = _cell(row.get("lag_method") or row.get("lag_absent") or "")
    left = row.get("retention_seconds_left")
    loss = "—" if left is None else f'<span class="state-bad">{_cell(duration(left))}</span>'
    status = "OK" if severity == "OK" else (
        f'<span class="badge {severity}">{severity}</span> {_cell(row.get("status_reason") or "")}')
    state_class = "state-bad" if "out-of-range" in state else "state-warn" if state == "lagging" else ""
    lost = row.get("messages_lost")
    lost = f": {_cell(thousands(lost))} messages deleted before being processed" if lost else ""
    partition = _cell(row["partition"])
    # Every value in it went through _cell (html.escape) or is a literal of this function.
    return mark_safe(
        f'<tr data-partition="{partition}" data-status="{severity}"><td class="num">{partition}</td>'
        f'<td class="num">{_cell(row.get("committed"))}</td><td class="num">{_cell(row.get("low"))}</td>'
        f'<td class="num">{_cell(row.get("high"))}</td>'
        f'<td class="num lag"{lag_title}>{"≤ " if upper else ""}{_cell(lag)}</td>'
        f'<td class="num" title="{time_title}">{_cell(duration(row.get("lag_seconds")))}</td>'
        f'<td class="num">{_cell(row.get("retention_margin"))}</td><td class="num">{loss}</td><td>{status}</td>'
        f'<td class="{state_class}">{_cell(state)}{lost}</td></tr>'
    )
