"""Times as text, the ways the dashboard writes them (pure: no settings, no app). Epoch
milliseconds are the stores' and the API's times; datetimes the database's.

The job library (streamoffsets) keeps its own few (it imports nothing of the dashboard), and
streamoffsets.evaluation.human_duration says durations in words for both.
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone, tzinfo

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def iso(at: datetime | None) -> str | None:
    """ISO 8601 as the datetime holds it (its offset, its precision); None for None (JSON null)."""
    return at.isoformat() if at else None


def utc_seconds(at: datetime | None) -> str:
    """2026-11-22T13:45:01+00:00, or "?" when there is no time (in sentences: outcomes, refusals)."""
    return at.astimezone(timezone.utc).isoformat(timespec="seconds") if at else "?"


def local_minutes(at: datetime, tz: tzinfo, sep: str = " ") -> str:
    """2026-11-22 14:45 in `tz` (sep "T": what a datetime-local input holds)."""
    return at.astimezone(tz).isoformat(sep=sep, timespec="minutes")[:16]


def ms_datetime(ms: int) -> datetime:
    """Epoch ms as a UTC datetime, exactly (fromtimestamp(ms / 1000) rounds through a float);
    OverflowError beyond year 9999."""
    return _EPOCH + timedelta(milliseconds=ms)


def ms_iso(ms: int | None) -> str | None:
    """Epoch ms as 2026-11-22T13:45:01.123+00:00, exactly; None for None or a time beyond year
    9999 (which has no ISO form: the API gives the ms too)."""
    if ms is None:
        return None
    try:
        return ms_datetime(ms).isoformat(timespec="milliseconds")
    except OverflowError:
        return None


def ms_text(ms, timespec: str = "milliseconds") -> str:
    """Epoch ms in a sentence: 2026-11-22T13:45:01.123+00:00 (UTC); "<ms> ms" for a time Python
    cannot represent, the value's repr for what is not a number of ms."""
    if not isinstance(ms, int):
        return repr(ms)
    try:
        return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat(timespec=timespec)
    except (OverflowError, OSError, ValueError):
        return f"{ms} ms"


def ms_local(ms: int, tz: tzinfo) -> str:
    """Epoch ms as 2026-11-22T14:45:01.123+01:00 in `tz` (export files)."""
    return datetime.fromtimestamp(ms / 1000, tz).isoformat(timespec="milliseconds")


def ms_clock(ms) -> str:
    """Epoch ms as 2026-11-22 13:45:01.123 (UTC, for pages); "—" for what is not a time."""
    try:
        return datetime.fromtimestamp(int(ms) / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    except (TypeError, ValueError, OverflowError, OSError):
        return "—"
