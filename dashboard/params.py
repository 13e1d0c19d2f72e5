"""The one parser of what people and clients type: query parameters of the pages, chart and export
URLs and the API, and the fields of the forms, validated into plain values.

Every bad value is one error, a BadParam naming the parameter, the value and what is accepted:
the pages answer 400 with its message (web.views._bad_param), the API a JSON 400 with "invalid "
before it (api.views.api_view), the forms show its `detail` next to the field (form_value).
Never a 500.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta, tzinfo
from datetime import timezone as dt_timezone
from zoneinfo import ZoneInfo

from django.conf import settings
from django.http import QueryDict

from offsetwatch.lib.timefmt import local_minutes
from streamoffsets.evaluation import Status

RANGES = {
    "15m": timedelta(minutes=15), "1h": timedelta(hours=1), "6h": timedelta(hours=6),
    "24h": timedelta(hours=24), "7d": timedelta(days=7), "30d": timedelta(days=30),
}
RANGE_LABELS = {"15m": "15 min", "1h": "1 h", "6h": "6 h", "24h": "24 h", "7d": "7 days", "30d": "30 days"}
KINDS = ("total", "partitions")
UNITS = ("messages", "seconds")
DEFAULT_RANGE = "1h"


class BadParam(ValueError):
    def __init__(self, name: str, value: str, expected: str):
        shown = value if len(value) <= 80 else value[:80] + "…"
        super().__init__(f"parameter {name!r}: {shown!r} {expected}")
        self.name = name
        self.detail = f"{shown!r} {expected}"  # the message without the parameter's name (a form's field error)


def time_zone() -> ZoneInfo:
    return ZoneInfo(settings.TIME_ZONE)


@dataclass(frozen=True)
class TimeRange:
    since: datetime | None  # None: all retained history (batch exports only)
    until: datetime
    preset: str | None  # "1h", ...; "all"; None for a custom from/to

    @property
    def label(self) -> str:
        """How titles, file headers and pages say the range (in settings.TIME_ZONE)."""
        if self.preset == "all":
            return "all retained history"
        if self.preset:
            return f"last {RANGE_LABELS[self.preset]}"
        return f"{local_minutes(self.since, time_zone())} to {local_minutes(self.until, time_zone())}"

    @property
    def slug(self) -> str:
        """The range in a file name."""
        if self.preset:
            return "all" if self.preset == "all" else f"last-{self.preset}"
        fmt = "%Y%m%dT%H%M"
        return f"{self.since.astimezone(time_zone()):{fmt}}-{self.until.astimezone(time_zone()):{fmt}}"

    def inputs(self) -> tuple[str, str]:
        """The range's ends for datetime-local inputs (wall-clock time in settings.TIME_ZONE)."""
        return local_minutes(self.since, time_zone(), "T") if self.since else "", local_minutes(self.until, time_zone(), "T")

    def query(self) -> dict[str, str]:
        """The parameters that give this range again (for links)."""
        if self.preset:
            return {"range": self.preset}
        return {"from": local_minutes(self.since, time_zone(), "T"), "to": local_minutes(self.until, time_zone(), "T")}


@dataclass(frozen=True)
class ChartParams:
    kind: str
    unit: str
    range: TimeRange

    def query(self) -> dict[str, str]:
        return {"kind": self.kind, "unit": self.unit, **self.range.query()}


def single(query: QueryDict, name: str) -> str:
    """The one value of parameter `name` ("" when absent); given twice it is ambiguous: refused."""
    values = query.getlist(name)
    if len(values) > 1:
        raise BadParam(name, values[-1], f"is given {len(values)} times; give it once")
    return values[0] if values else ""


def choice(name: str, value: str, choices) -> str:
    """`value` if it is one of `choices` (the message lists them)."""
    if value not in choices:
        raise BadParam(name, value, f"is not one of {', '.join(choices)}")
    return value


def _choice(query: QueryDict, name: str, choices: tuple[str, ...], default: str) -> str:
    return choice(name, single(query, name) or default, choices)


# --- the shared parsers: every page, chart URL, export, API parameter and audit filter ---------

# The instants the dashboard works with: Python's datetime range less a day at each end, so any
# of them can be shown in any time zone (offsets are under 24 h) and moved by a few hours without
# overflowing. An ISO time beyond them (year 1 at +14:00 is before year 1 in UTC) is clamped to
# them, not refused: it is a valid way to say "from the beginning" or "until the end".
EARLIEST = datetime(1, 1, 2, tzinfo=dt_timezone.utc)
LATEST = datetime(9999, 12, 30, 23, 59, 59, 999000, tzinfo=dt_timezone.utc)  # whole ms: epoch ms round-trip
TIME_FORMAT = ("is not a date-time: ISO 8601 from year 1 to 9999, e.g. 2026-11-22T13:00 or "
               "2026-11-22T13:00+01:00 (a '+' in a URL is sent as %2B)")
_TIME_MAX_CHARS = 64  # the longest ISO form (with nanoseconds and an offset with seconds) is ~40


def clamp(at: datetime) -> datetime:
    """`at` (aware) in UTC within [EARLIEST, LATEST]."""
    try:
        utc = at.astimezone(dt_timezone.utc)
    except (OverflowError, ValueError):  # beyond Python's range once the offset is applied
        return EARLIEST if at.year == 1 else LATEST
    return min(max(utc, EARLIEST), LATEST)


def shifted(at: datetime, delta: timedelta) -> datetime:
    """at + delta, saturated at EARLIEST/LATEST instead of overflowing."""
    try:
        return clamp(at + delta)
    except OverflowError:
        return EARLIEST if delta < timedelta(0) else LATEST


def instant(name: str, value: str, *, naive_tz: tzinfo | None = None) -> datetime:
    """An ISO 8601 date-time as an aware UTC datetime within [EARLIEST, LATEST]. Without an offset
    it is wall-clock time in `naive_tz` (default settings.TIME_ZONE: what a datetime-local input
    sends). A '+' sent unencoded in a query string arrives as a space: read as the '+' it was."""
    raw = value.strip()
    if raw and len(raw) <= _TIME_MAX_CHARS and raw.isascii() and raw.isprintable():
        candidates = [raw]
        if " " in raw:
            head, _, tail = raw.rpartition(" ")
            candidates.append(f"{head}+{tail}")
        for text in candidates:
            try:
                parsed = datetime.fromisoformat(text)
            except ValueError:
                continue
            if parsed.tzinfo is None:
                parsed = parsed.replace(tzinfo=naive_tz or time_zone())
            return clamp(parsed)
    raise BadParam(name, value, TIME_FORMAT)


_WHOLE = re.compile(r"-?[0-9]{1,19}", re.ASCII)  # int() also reads '٣', '+1', ' 1', '1_0': not here


def whole_number(name: str, value: str, lo: int, hi: int) -> int:
    """A whole number lo..hi written in ASCII digits (a leading '-' where lo < 0)."""
    raw = value.strip()
    if not _WHOLE.fullmatch(raw) or (raw.startswith("-") and lo >= 0) or not lo <= int(raw) <= hi:
        raise BadParam(name, value, f"is not a whole number from {lo} to {hi}")
    return int(raw)


def text(name: str, value: str, max_chars: int) -> str:
    """Text to match against what we store: at most `max_chars` (longer cannot match anything) and
    no NUL (PostgreSQL cannot hold one)."""
    if "\x00" in value or len(value) > max_chars:
        raise BadParam(name, value, f"must be at most {max_chars} characters without NUL")
    return value


def statuses(name: str, value: str) -> list[int]:
    """Comma-separated status names (any case) as their numbers: `warn,critical` -> [1, 2]."""
    names = [part.strip().upper() for part in value.split(",") if part.strip()]
    if not names or any(n not in Status.__members__ for n in names):
        raise BadParam(name, value, f"is not a status; use one or more (comma-separated) of "
                                    f"{', '.join(Status.__members__)}")
    return [int(Status[n]) for n in names]


# The last instant Python can represent (9999-12-31T23:59:59.999Z): a larger epoch ms is refused;
# those up to it are clamped to LATEST like an ISO time.
MAX_MS = 253_402_300_799_999
LATEST_MS = int(LATEST.timestamp() * 1000)
_DIGITS = re.compile(r"[0-9]+", re.ASCII)  # int() also accepts Arabic-Indic and other digits
EPOCH_MS_OR_TIME = ("is not an ISO-8601 time from year 1 to 9999 (2024-05-01T12:00:00Z) or epoch "
                    "milliseconds (a '+' in a URL must be sent as %2B)")


def epoch_ms(name: str, value: str) -> int:
    """An instant as epoch milliseconds, given as epoch ms (ASCII digits) or ISO 8601 (UTC where it
    names no offset; `instant`: clamped to EARLIEST..LATEST). The API's times."""
    if _DIGITS.fullmatch(value):
        if len(value) > 15 or int(value) > MAX_MS:
            raise BadParam(name, value, f"is beyond the last representable instant ({MAX_MS} ms)")
        return min(int(value), LATEST_MS)
    try:
        at = instant(name, value, naive_tz=dt_timezone.utc)
    except BadParam:
        raise BadParam(name, value, EPOCH_MS_OR_TIME) from None
    return int(at.timestamp() * 1000)


def _datetime(query: QueryDict, name: str) -> datetime | None:
    raw = single(query, name)
    return instant(name, raw) if raw.strip() else None


def parse_range(query: QueryDict, *, now: datetime, allow_all: bool = False, default: str = DEFAULT_RANGE) -> TimeRange:
    """`range` (a preset, or "all" where allowed) or `from`/`to` (ISO 8601; `to` defaults to now)."""
    since, until = _datetime(query, "from"), _datetime(query, "to")
    if since is None and until is not None:
        raise BadParam("from", "", "is required with 'to'")
    if since is not None:
        if single(query, "range"):
            raise BadParam("range", single(query, "range"), "cannot be combined with 'from'/'to'")
        until = until or now
        if since >= until:
            raise BadParam("from", single(query, "from"), f"must be before 'to' ({until.isoformat()})")
        return TimeRange(since, until, None)
    presets = (*RANGES, "all") if allow_all else tuple(RANGES)
    key = _choice(query, "range", presets, default)
    return TimeRange(None if key == "all" else now - RANGES[key], now, key)


def parse_chart_params(query: QueryDict, *, now: datetime) -> ChartParams:
    return ChartParams(
        kind=_choice(query, "kind", KINDS, "total"),
        unit=_choice(query, "unit", UNITS, "messages"),
        range=within_max_span(parse_range(query, now=now)),
    )


def within_max_span(time_range: TimeRange) -> TimeRange:
    """The range, if it spans at most CHART_MAX_SPAN_S: a chart's cost grows with its span, so a
    longer one is a 400 naming the parameter that made it long (`from`, or `range`)."""
    limit = timedelta(seconds=settings.CHART_MAX_SPAN_S)
    if time_range.since is None or time_range.until - time_range.since <= limit:
        return time_range
    name = "range" if time_range.preset else "from"
    shown = time_range.preset or time_range.since.isoformat()
    raise BadParam(name, shown, f"makes a range longer than the most a chart spans ({_span_words(limit)}, "
                                "OFFSETWATCH_CHART_MAX_SPAN): choose a later 'from' or an earlier 'to'")


def _span_words(span: timedelta) -> str:
    seconds = span.total_seconds()
    if seconds % 86400 == 0:
        return f"{int(seconds // 86400)} days"
    if seconds % 3600 == 0:
        return f"{int(seconds // 3600)} hours"
    return f"{seconds:g} seconds"


def parse_int(query: QueryDict, name: str, *, default: int | None, low: int, high: int) -> int | None:
    raw = single(query, name)
    if not raw.strip():
        return default
    return whole_number(name, raw, low, high)


def form_value(parse, name: str, raw: str, *args, **kwargs):
    """parse(name, raw, *args, **kwargs) for a form field's clean_<name>: None when the field is
    empty, the BadParam as the field's ValidationError (its message less the name the form shows)."""
    from django import forms

    if not raw:
        return None
    try:
        return parse(name, raw, *args, **kwargs)
    except BadParam as exc:
        raise forms.ValidationError(exc.detail) from None


# --- a pipeline page's partition table (issue #16: a pipeline of 1,000 partitions) -------------

PARTITION_ONLY = ("problems",)  # `only=problems`: the partitions whose own status is above OK
PARTITION_MAX = 2**31 - 1  # Kafka's partition ids are int32
PARTITIONS_SHOWN_MAX = 10**6  # far above any topic's partition count; larger is a typo


@dataclass(frozen=True)
class PartitionParams:
    """Which partition rows a pipeline's page shows: the first `shown` (None: all) of those that
    match `only_problems` and `partition` (None: any), worst first."""

    shown: int | None
    only_problems: bool = False
    partition: int | None = None


def parse_partition_params(query: QueryDict, *, default_shown: int) -> PartitionParams:
    """`shown` (a number of rows, or "all"), `only` ("problems") and `partition` (a partition id)."""
    raw_shown = single(query, "shown")
    if raw_shown.strip().lower() == "all":
        shown = None
    else:
        try:
            shown = parse_int(query, "shown", default=default_shown, low=1, high=PARTITIONS_SHOWN_MAX)
        except BadParam:
            raise BadParam("shown", raw_shown, f"is not a number of rows from 1 to {PARTITIONS_SHOWN_MAX}, "
                                               "nor 'all'") from None
    only = single(query, "only")
    if only:
        choice("only", only, PARTITION_ONLY)
    return PartitionParams(shown=shown, only_problems=bool(only),
                           partition=parse_int(query, "partition", default=None, low=0, high=PARTITION_MAX))
