"""What the database can hold of what a store holds: pure checks, one named problem per row.

A store is written by jobs and by anyone with access to its table or znodes, so a name or a
number in it can be anything the store accepts. PostgreSQL refuses a value too long for its
column, an integer beyond bigint and text holding NUL, and it refuses them for the whole
transaction: one such row would stop the collection of every pipeline of its store (issue #12).
Every row of a reading is checked here before it is written; what does not fit becomes that
row's problem, and the rest of the store is collected.
"""
from __future__ import annotations

import hashlib
from dataclasses import replace

from streamoffsets.stores.reading import StoreReading
from streamoffsets.types import BatchOffsets, PipelineKey, RowProblem

# Kafka refuses topic names longer than this (Topic.MAX_NAME_LENGTH), so a longer one in a store
# names no topic the dashboard could ever measure. Pipeline.topic's column (255) holds it.
TOPIC_MAX_CHARS = 249
# Pipeline.group's column. Kafka sets no limit on group ids; a real one is far shorter.
GROUP_MAX_CHARS = 1000
# PostgreSQL bigint; Kafka offsets and JVM epoch milliseconds are signed 64-bit too.
BIGINT_MAX = 2**63 - 1
# Kafka partition ids are signed 32-bit.
PARTITION_MAX = 2**31 - 1
# How much of a long name a problem's key shows (StoreProblem.key holds 500 characters).
SHOWN_CHARS = 100


def shown(text: str, limit: int = SHOWN_CHARS) -> str:
    """A name short enough for a problem's key: its start, its length and a digest of the whole
    (two long names with the same start stay two problems)."""
    text = printable(text)
    if len(text) <= limit:
        return text
    digest = hashlib.md5(text.encode("utf-8", "backslashreplace")).hexdigest()[:8]
    return f"{text[:limit]}… ({len(text)} characters, md5 {digest})"


def printable(text: str) -> str:
    """Text PostgreSQL can hold: NUL written as \\x00, lone surrogates escaped (neither can be
    stored, and a problem or an error naming such a row must still be recordable)."""
    if "\x00" in text:
        text = text.replace("\x00", "\\x00")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def stored_text(text: str, limit: int) -> str:
    """`text` made printable and cut to a column of `limit` characters."""
    return printable(text)[:limit]


def text_problem(what: str, text: str, limit: int) -> str | None:
    if len(text) > limit:
        return f"{what} of {len(text)} characters (limit {limit}): not collected"
    if "\x00" in text:
        return f"{what} contains a NUL character, which PostgreSQL cannot store: not collected"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return f"{what} is not valid Unicode (a lone surrogate): not collected"
    return None


def key_problem(key: PipelineKey) -> str | None:
    """Why a pipeline's topic or group id cannot be a Pipeline row, or None."""
    return text_problem("topic", key.topic, TOPIC_MAX_CHARS) or text_problem("group id", key.group, GROUP_MAX_CHARS)


def _in(value, low: int, high: int) -> bool:
    """Whether `value` is an integer in [low, high]; digits as text count (partition ids are text
    in JSON, and services._as_json_offsets turns both into the same)."""
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 20:
        value = int(value)
    return type(value) is int and low <= value <= high


def batch_problem(batch: BatchOffsets) -> str | None:
    """Why a batch cannot be a Batch row (times, ids and offsets are bigint), or None."""
    if not _in(batch.batch_time_ms, 0, BIGINT_MAX):
        return f"batch time {_number(batch.batch_time_ms)} ms is outside 0..2^63-1: not collected"
    if batch.batch_id is not None and not _in(batch.batch_id, 0, BIGINT_MAX):
        return f"batch id {_number(batch.batch_id)} is outside 0..2^63-1: not collected"
    if _plain_offsets(batch.offsets):
        return None
    for partition, offset in batch.offsets.items():
        if not _in(partition, 0, PARTITION_MAX):
            return f"partition {_number(partition)} is outside 0..2^31-1: not collected"
        if not _in(offset, 0, BIGINT_MAX):
            return f"partition {partition}: offset {_number(offset)} is outside 0..2^63-1: not collected"
    return None


def _plain_offsets(offsets: dict) -> bool:
    """Whether every partition and offset is an int in range (what a store's reading nearly always
    is): checked by a few passes in C, where a call per value cost 10,000 calls a cycle."""
    keys, values = offsets.keys(), offsets.values()
    return (bool(offsets) and set(map(type, keys)) == {int} == set(map(type, values))
            and min(keys) >= 0 and max(keys) <= PARTITION_MAX and min(values) >= 0 and max(values) <= BIGINT_MAX)


def _number(value) -> str:
    """A number for a message, however large (Python refuses str() of an int past 4300 digits)."""
    if type(value) is int and value.bit_length() > 256:
        return f"of {value.bit_length()} bits"
    return printable(str(value))[:100]


def row_label(key: PipelineKey) -> str:
    return f"{shown(key.topic)} / {shown(key.group)}"


def reading_storable(reading: StoreReading, *, store_name: str) -> StoreReading:
    """The reading without what the database cannot hold, each left-out row a named problem.

    A pipeline whose name does not fit is left out with all its batches; a batch whose numbers
    do not fit is left out alone (its pipeline's other batches are collected)."""
    problems = list(reading.problems)
    bad_keys = set()
    for key in {*reading.pipelines, *reading.batches, *reading.more}:
        why = key_problem(key)
        if why is not None:
            bad_keys.add(key)
            problems.append(RowProblem(store_name, row_label(key), why))
    batches: dict[PipelineKey, list[BatchOffsets]] = {}
    for key, rows in reading.batches.items():
        if key in bad_keys:
            continue
        kept = []
        for batch in rows:
            why = batch_problem(batch)
            if why is None:
                kept.append(batch)
            else:
                problems.append(RowProblem(store_name, f"{row_label(key)} @ {_number(batch.batch_time_ms)}", why))
        batches[key] = kept
    return replace(
        reading,
        pipelines=[k for k in reading.pipelines if k not in bad_keys],
        batches=batches,
        more={k for k in reading.more if k not in bad_keys},
        problems=problems,
    )
