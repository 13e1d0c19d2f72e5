"""Formatting only: numbers, durations and status names as the pages show them."""
from __future__ import annotations

from django import template

from streamoffsets.evaluation import Status

register = template.Library()


@register.filter
def status_name(value) -> str:
    return "UNKNOWN" if value is None else Status(int(value)).name


@register.filter
def duration(seconds) -> str:
    """12 s, 4 min, 3 h, 2 d; an em dash for unknown."""
    if seconds is None:
        return "—"
    seconds = float(seconds)
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


@register.filter
def thousands(value) -> str:
    return "—" if value is None else f"{int(value):,}"


@register.filter
def age_ms(epoch_ms, now) -> str:
    """How long ago an epoch-milliseconds time was, relative to `now`."""
    if epoch_ms is None:
        return "—"
    return duration(max(0.0, now.timestamp() - epoch_ms / 1000))
