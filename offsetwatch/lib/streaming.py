"""Streaming CSV and JSON arrays in bounded chunks; CSV cells made safe for spreadsheets (text a
spreadsheet would run as a formula gets a leading quote: names come from stores anyone can write)."""
from __future__ import annotations

import csv
import io
import logging
from datetime import datetime
from typing import Any, Callable, Iterable, Iterator, Sequence

log = logging.getLogger(__name__)


# A spreadsheet runs a cell beginning with one of these as a formula (CSV injection, OWASP).
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: Any) -> Any:
    """A value as a CSV cell: text that a spreadsheet would run as a formula gets a leading `'`;
    numbers stay numbers (a negative lag is a number, not a formula)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return value
    text = value.isoformat() if isinstance(value, datetime) else str(value)
    return "'" + text if text.startswith(_FORMULA_START) else text


def csv_chunks(
    *, header: Sequence[str], rows: Iterable[Sequence[Any]], preamble: Sequence[Sequence[Any]] = (),
    rows_per_chunk: int = 1000,
) -> Iterator[tuple[str, int]]:
    """A CSV as (text, data rows written so far) chunks: the `preamble` rows (e.g. `# range`,
    label), the header, then `rows`, every cell through csv_cell. Reads `rows` lazily, so a
    streamed response or a file written from an iterator never holds the whole export."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    for row in preamble:
        writer.writerow([csv_cell(c) for c in row])
    writer.writerow([csv_cell(c) for c in header])
    count = 0
    for row in rows:
        writer.writerow([csv_cell(c) for c in row])
        count += 1
        if count % rows_per_chunk == 0:
            yield buffer.getvalue(), count
            buffer.seek(0)
            buffer.truncate()
    yield buffer.getvalue(), count


def csv_stream(*, header: Sequence[str], rows: Iterable[Sequence[Any]], preamble: Sequence[Sequence[Any]] = ()) -> Iterator[bytes]:
    """The CSV as UTF-8 bytes for a StreamingHttpResponse (any export: batches, chart data, the
    audit log to come)."""
    for text, _ in csv_chunks(header=header, rows=rows, preamble=preamble):
        if text:
            yield text.encode()


def csv_write(
    *, path, header: Sequence[str], rows: Iterable[Sequence[Any]], preamble: Sequence[Sequence[Any]] = (),
    progress: Callable[[int], None] | None = None, rows_per_chunk: int = 5000,
) -> int:
    """Write the CSV to `path` chunk by chunk, calling `progress(rows written)` after each chunk;
    returns the number of data rows."""
    count = 0
    with open(path, "w", encoding="utf-8", newline="") as f:
        for text, count in csv_chunks(header=header, rows=rows, preamble=preamble, rows_per_chunk=rows_per_chunk):
            f.write(text)
            if progress:
                progress(count)
    return count


def json_array_stream(items: Iterable[Any], *, bytes_per_chunk: int = 65536) -> Iterator[bytes]:
    """A JSON array of `items` as UTF-8 chunks for a StreamingHttpResponse: read lazily, so an
    export of the whole audit log never sits in memory, and sent in chunks of about
    `bytes_per_chunk`, not one write per item."""
    import json

    parts, size, separator = ["["], 1, "\n"
    for item in items:
        text = separator + json.dumps(item, ensure_ascii=False, separators=(",", ":"), default=str)
        separator = ",\n"
        parts.append(text)
        size += len(text)
        if size >= bytes_per_chunk:
            yield "".join(parts).encode()
            parts, size = [], 0
    parts.append("\n]\n")
    yield "".join(parts).encode()
