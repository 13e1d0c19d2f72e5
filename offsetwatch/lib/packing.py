"""Compact sample storage: per-partition numbers packed in one bytes value per row.

One row per (topic, cycle) or (pipeline, cycle) with packed arrays shares the row's overhead
among all its partitions, where a row per (partition, time) costs ~112 bytes with its index.
BinaryField keeps it portable (PostgreSQL bytea, SQLite blob).

Two formats, told apart by their length (so rows written before #16 read as they are):
- raw: little-endian int64s, 8 bytes a value; its length is a multiple of 8.
- frame of reference: a header byte, the smallest value as the base (little-endian, signed, in
  the fewest bytes that hold it), then each value's difference from the base, unsigned
  little-endian in the fewest bytes (1 to 7) that hold the largest; or, when every value is the
  same, their count (uint32). A topic's offsets are close together (its partitions are
  balanced, committed offsets trail the high watermark), so a difference fits in 3 or 4 bytes
  where the value takes 8: 20 offsets near 10^9 within 3 % take 86 bytes where raw takes 160.
  Its length is never a multiple of 8: a pad byte is added when it would be (the header says so).
`pack` writes whichever is shorter (raw for one or two values, or when the values span more
than 7 bytes can hold).
"""
from __future__ import annotations

import struct
from array import array
from sys import byteorder

NONE = -1  # offsets are never negative: -1 stands for "no value" (e.g. partition missing in store)

# The header byte: bits 0-2 the bytes per value, bits 3-5 the base's bytes less one, then:
_MISSING = 0x40  # some values are missing: the width's largest number stands for them
_PADDED = 0x80  # one pad byte at the end
_COUNT = struct.Struct("<I")


def _code_of(size: int) -> str:
    return next(c for c in "BHILQ" if array(c).itemsize == size)


# The width code is the bytes per value, 1 to 7 (0: every value is the base; 8 would never be
# shorter than raw). Widths 1, 2 and 4 are arrays; 3, 5 and 6 are read by struct as a low and a
# high part; 7 (rare: a span past 2^48) is widened to 8 bytes by strided slice copies.
_ARRAY = {1: _code_of(1), 2: _code_of(2), 3: _code_of(4), 4: _code_of(4), 5: _code_of(8), 6: _code_of(8),
          7: _code_of(8)}
_SWAP = byteorder != "little"
_SPLIT = {3: ("<HB", 16), 5: ("<IB", 32), 6: ("<IH", 32)}  # width -> (struct format, the high part's shift)


def _restride(data: bytes, width: int, to: int) -> bytes:
    """Little-endian unsigned numbers of `width` bytes each as numbers of `to` bytes (zero high
    bytes added, or dropped: the numbers must fit)."""
    out = bytearray(len(data) // width * to)
    for i in range(min(width, to)):
        out[i::to] = data[i::width]
    return bytes(out)


def _pack_raw(values: list[int | None]) -> bytes:
    arr = array("q", [NONE if v is None else v for v in values] if None in values else values)
    if _SWAP:
        arr.byteswap()
    return arr.tobytes()


def _pack_compact(values: list[int | None]) -> bytes | None:
    """The frame-of-reference format, or None when it cannot be shorter than raw."""
    missing = None in values or NONE in values
    present = [v for v in values if v is not None and v != NONE] if missing else values
    base = min(present) if present else 0
    top = max(present) if present else 0
    if base < -(1 << 63) or top >= 1 << 63:
        raise OverflowError("a packed value must fit in a signed 64-bit integer")
    span = top - base
    if not present or (span == 0 and not missing):
        # every value the same (or every value missing): the base and the count say it all
        head, base_bytes = _head(0, base, missing)
        return _padded(head, base_bytes + _COUNT.pack(len(values)))
    size = max(1, ((span + missing).bit_length() + 7) // 8)  # the sentinel stays free when values are missing
    if size > 7:
        return None
    code = _ARRAY[size]
    if missing:
        sentinel = (1 << (8 * size)) - 1
        arr = array(code, [sentinel if v is None or v == NONE else v - base for v in values])
    else:
        arr = array(code, [v - base for v in values])
    if _SWAP:
        arr.byteswap()
    head, base_bytes = _head(size, base, missing)
    packed = arr.tobytes() if arr.itemsize == size else _restride(arr.tobytes(), arr.itemsize, size)
    return _padded(head, base_bytes + packed)


def _head(size: int, base: int, missing: bool) -> tuple[int, bytes]:
    """The header byte and the base in the fewest bytes that hold it (signed)."""
    length = ((base if base >= 0 else ~base).bit_length() + 8) // 8
    return size | (length - 1) << 3 | (_MISSING if missing else 0), base.to_bytes(length, "little", signed=True)


def _padded(head: int, body: bytes) -> bytes:
    """Never a multiple of 8 bytes long: that is the raw format's length."""
    if (1 + len(body)) % 8 == 0:
        return bytes([head | _PADDED]) + body + b"\0"
    return bytes([head]) + body


def pack(values: list[int | None]) -> bytes:
    """Signed 64-bit values (None or -1: no value) packed in the shorter format."""
    if not values:
        return b""
    compact = _pack_compact(values) if len(values) > 2 else None  # raises OverflowError past int64
    # Compact is 1 + (1 to 8) + n x (1 to 7) bytes: shorter than raw's 8 x n unless the base
    # and the widths are near their largest.
    if compact is not None and len(compact) < 8 * len(values):
        return compact
    return _pack_raw(values)


def unpack(data: bytes | memoryview | None) -> list[int | None]:
    if not data:
        return []
    if len(data) % 8 == 0:
        arr = array("q")
        arr.frombytes(data)
        if _SWAP:
            arr.byteswap()
        # `in` scans in C: most rows have no missing value and need no per-value test
        return [None if v == NONE else v for v in arr.tolist()] if NONE in arr else arr.tolist()
    head = data[0]
    size, start = head & 7, 2 + (head >> 3 & 7)
    base = int.from_bytes(data[1:start], "little", signed=True)
    end = len(data) - (1 if head & _PADDED else 0)
    missing = head & _MISSING
    if size == 0:
        if end - start != _COUNT.size:
            raise ValueError("not a packed array (its length does not match its header)")
        (count,) = _COUNT.unpack_from(data, start)
        return [None] * count if missing else [base] * count
    if end < start or (end - start) % size:
        raise ValueError("not a packed array (its length does not match its header)")
    if size in _SPLIT:  # 3, 5 or 6 bytes: read as two numbers, low then high, in one C loop
        fmt, shift = _SPLIT[size]
        body = data[start:end]
        if missing:
            sentinel = (1 << (8 * size)) - 1
            return [None if d == sentinel else base + d
                    for d in [lo | hi << shift for lo, hi in struct.iter_unpack(fmt, body)]]
        return [base + lo + (hi << shift) for lo, hi in struct.iter_unpack(fmt, body)]
    arr = array(_ARRAY[size])
    if arr.itemsize == size:
        arr.frombytes(data[start:end])
    else:
        arr.frombytes(_restride(bytes(data[start:end]), size, arr.itemsize))
    if _SWAP:
        arr.byteswap()
    if missing:
        sentinel = (1 << (8 * size)) - 1
        return [None if d == sentinel else base + d for d in arr.tolist()]
    return [base + d for d in arr.tolist()]


def pack_partitions(partitions: list[int]) -> bytes:
    """Partition ids, sorted. Empty when they are 0..n-1 (nearly always): the values' count says n."""
    return b"" if partitions == list(range(len(partitions))) else pack(partitions)


def unpack_partitions(data: bytes | memoryview | None, count: int) -> list[int]:
    ids = unpack(data)
    return ids if ids else list(range(count))


def pack_map(values: dict[int, int | None]) -> tuple[bytes, bytes]:
    """(partitions, values) packed, in partition order."""
    partitions = sorted(values)
    return pack_partitions(partitions), pack([values[p] for p in partitions])


def unpack_map(partitions: bytes, values: bytes) -> dict[int, int | None]:
    vals = unpack(values)
    return dict(zip(unpack_partitions(partitions, len(vals)), vals))


def unpack_watermarks(partitions: bytes, lows: bytes, highs: bytes) -> dict[int, tuple[int, int]]:
    """A WatermarkSample's packed columns as partition -> (low, high)."""
    lo, hi = unpack(lows), unpack(highs)
    return dict(zip(unpack_partitions(partitions, len(lo)), zip(lo, hi)))
