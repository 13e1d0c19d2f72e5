"""The JSON bodies jobs post (start reports, rewind claim / applied / failed), validated into plain
values before any service or the database sees them.

Every refusal is a PayloadError naming the field's path (`offsets.3`, `clamps.0.messages_lost`):
the API answers 400 with it. What is refused and why:
- offsets are integers 0..2^63-1 (Kafka's int64; PostgreSQL's bigint): not 10**30, not 1e20
  (a float, whatever its value), not true/false, not "5";
- partition keys are ASCII digits naming an int32 (Kafka's partition id): not '٣' (int() reads
  it as 3), not '+1' or ' 1' (int() strips them), not '' or '007'... '007' is read as 7 by the
  job's own code, so it is accepted and written back as '7';
- messages_lost is a non-negative integer and so is their sum (stored in a bigint column);
- strings are bounded, carry no NUL (PostgreSQL's jsonb refuses \\u0000) nor a lone surrogate
  (\\ud800: not encodable as UTF-8) and the report stored as
  is holds no NaN/Infinity (jsonb refuses them too) and is not nested deeper than a report is.
Pure: no database, no Django.
"""
from __future__ import annotations

import math
import re

MAX_OFFSET = 2**63 - 1  # Kafka offsets are int64; the dashboard keeps them in bigint columns
MAX_PARTITION = 2**31 - 1  # Kafka partition ids are int32
MAX_EPOCH_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z
INSTANCE_MAX = 300  # who claims a rewind (host, process, run id): kept in a 300-character column
ERROR_MAX = 20_000  # a job's failure message; the rewind keeps its first 2,000 characters
TEXT_MAX = 100_000  # any other string of a start report (decisions, topic, group: names can be long)
MAX_DEPTH = 8  # a start report is 4 levels deep (rewind.target.<partition>); room to grow
MAX_PARTITIONS = 100_000  # more partitions than any Kafka topic has

_PARTITION_KEY = re.compile(r"[0-9]{1,10}", re.ASCII)


class PayloadError(ValueError):
    """A job's body refused: `path` names the field (dotted, list indexes as numbers)."""

    def __init__(self, path: str, message: str):
        super().__init__(f"{path}: {message}" if path else message)
        self.path = path


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:60] + "…"


def _join(path: str, key) -> str:
    return f"{path}.{key}" if path else str(key)


def integer(value, path: str, *, lo: int = 0, hi: int = MAX_OFFSET) -> int:
    """A JSON integer lo..hi: bools (a subclass of int in Python) and floats (1e20, 5.0) refused."""
    if not isinstance(value, int) or isinstance(value, bool):
        what = f"a non-negative integer at most {hi}" if lo == 0 else f"an integer from {lo} to {hi}"
        raise PayloadError(path, f"must be {what}, not {_shown(value)}")
    if not lo <= value <= hi:
        what = f"a non-negative integer at most {hi}" if lo == 0 else f"an integer from {lo} to {hi}"
        raise PayloadError(path, f"must be {what}; {_shown(value)} is out of range")
    return value


def partition_key(key, path: str) -> str:
    """A partition id as JSON object keys carry it: ASCII digits naming an int32; returned
    canonical ('007' -> '7')."""
    if not isinstance(key, str) or not _PARTITION_KEY.fullmatch(key) or int(key) > MAX_PARTITION:
        raise PayloadError(path, f"{_shown(key)} is not a partition id (ASCII digits, 0 to {MAX_PARTITION})")
    return str(int(key))


MIN_STORED = -(2**63)  # what a store held may be a negative sentinel (Spark's -1/-2): reported as read


def offsets(value, path: str = "offsets", *, allow_empty: bool = True, lo: int = 0) -> dict[str, int]:
    """{partition id: offset}, every offset lo..2^63-1; keys canonical, sorted by partition."""
    if not isinstance(value, dict):
        raise PayloadError(path, f"must be an object of partition id to offset, not {_shown(value)}")
    if not value and not allow_empty:
        raise PayloadError(path, "must name at least one partition")
    if len(value) > MAX_PARTITIONS:
        raise PayloadError(path, f"names {len(value)} partitions; at most {MAX_PARTITIONS}")
    out: dict[str, int] = {}
    for key, offset in value.items():
        where = _join(path, key if isinstance(key, str) and key.isprintable() and len(key) <= 20 else "?")
        canonical = partition_key(key, where)
        if canonical in out:
            raise PayloadError(where, f"partition {canonical} is given twice")
        out[canonical] = integer(offset, where, lo=lo)
    return dict(sorted(out.items(), key=lambda kv: int(kv[0])))


def text(value, path: str, *, max_len: int, required: bool = False) -> str:
    """A string of at most max_len characters without NUL ('' when absent and not required)."""
    if value is None and not required:
        return ""
    if not isinstance(value, str):
        raise PayloadError(path, f"must be a string, not {_shown(value)}")
    if required and not value.strip():
        raise PayloadError(path, "is required")
    if len(value) > max_len:
        raise PayloadError(path, f"is {len(value)} characters long; at most {max_len}")
    if "\x00" in value:
        raise PayloadError(path, "contains a NUL character")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # JSON's "\ud800" decodes to a lone surrogate: not text the database can keep
        raise PayloadError(path, "contains an unpaired surrogate (\\ud800-\\udfff): not Unicode text") from None
    return value


def storable(value, path: str = "", depth: int = 0) -> None:
    """Raise unless `value` can be kept in a jsonb column as it is: no NUL in any string or key,
    no NaN/Infinity, strings bounded, nesting bounded."""
    if depth > MAX_DEPTH:
        raise PayloadError(path, f"is nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, str):
        text(value, path, max_len=TEXT_MAX)
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise PayloadError(path, f"must be a finite number, not {value}")
    elif isinstance(value, dict):
        for key, item in value.items():
            text(key, _join(path, "<key>"), max_len=TEXT_MAX)
            storable(item, _join(path, key if len(key) <= 40 and key.isprintable() else "?"), depth + 1)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            storable(item, _join(path, i), depth + 1)


def start_report(body: dict) -> dict:
    """A start report (streamoffsets.restart.StartPlan.report()) checked field by field; returns
    {"topic", "group", "offsets", "first_start", "clamps", "messages_lost"} and leaves the body,
    which is stored as sent, as it was."""
    storable(body)
    topic = text(body.get("topic"), "topic", max_len=TEXT_MAX, required=True)
    group = text(body.get("group"), "group", max_len=TEXT_MAX, required=True)
    started = offsets(body.get("offsets"), "offsets")
    first_start = body.get("first_start", False)
    if not isinstance(first_start, bool):
        raise PayloadError("first_start", f"must be true or false, not {_shown(first_start)}")
    clamps = body.get("clamps")
    if clamps is None:
        clamps = []
    if not isinstance(clamps, list):
        raise PayloadError("clamps", f"must be a list of objects, not {_shown(clamps)}")
    lost_total = 0
    for i, clamp in enumerate(clamps):
        if not isinstance(clamp, dict):
            raise PayloadError(f"clamps.{i}", f"must be an object, not {_shown(clamp)}")
        lost_total += integer(clamp.get("messages_lost", 0), f"clamps.{i}.messages_lost")
        for name in ("stored", "low", "high", "started_at"):
            if name in clamp:
                integer(clamp[name], f"clamps.{i}.{name}", lo=MIN_STORED)
        if "partition" in clamp:
            integer(clamp["partition"], f"clamps.{i}.partition", hi=MAX_PARTITION)
    if lost_total > MAX_OFFSET:
        raise PayloadError("clamps", f"the messages lost add up to more than {MAX_OFFSET}")
    if body.get("stored") is not None:
        offsets(body["stored"], "stored", lo=MIN_STORED)
    rewind = body.get("rewind")
    if rewind is not None:
        if not isinstance(rewind, dict):
            raise PayloadError("rewind", f"must be an object or null, not {_shown(rewind)}")
        integer(rewind.get("id"), "rewind.id", lo=1)
        integer(rewind.get("marker_batch_ms"), "rewind.marker_batch_ms", hi=MAX_EPOCH_MS)
        offsets(rewind.get("target"), "rewind.target")
        if rewind.get("before") is not None:
            offsets(rewind["before"], "rewind.before", lo=MIN_STORED)
    return {"topic": topic, "group": group, "offsets": started, "first_start": first_start, "clamps": clamps,
            "messages_lost": lost_total}


def instance(body: dict) -> str:
    """Who is reporting (a job instance: host, process, run id): required, at most INSTANCE_MAX."""
    return text(body.get("instance"), "instance", max_len=INSTANCE_MAX, required=True).strip()


def rewind_claim(body: dict) -> dict:
    return {"instance": instance(body)}


def rewind_applied(body: dict) -> dict:
    """{"instance", "offsets" (at least one partition), "marker_batch_ms" (epoch ms or None)}."""
    marker = body.get("marker_batch_ms")
    if marker is not None:
        marker = integer(marker, "marker_batch_ms", hi=MAX_EPOCH_MS)
    return {"instance": instance(body), "offsets": offsets(body.get("offsets"), "offsets", allow_empty=False),
            "marker_batch_ms": marker}


def rewind_failed(body: dict) -> dict:
    """{"instance", "error"}: the error may be absent ("no reason given")."""
    return {"instance": instance(body), "error": text(body.get("error"), "error", max_len=ERROR_MAX)}
