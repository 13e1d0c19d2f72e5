"""Compact sample storage: per-partition numbers packed in one bytes value per row.

One row per (topic, cycle) or (pipeline, cycle) with packed arrays shares the row's overhead
among all its partitions, where a row per (partition, time) costs ~112 bytes with its index.
BinaryField keeps it portable (PostgreSQL bytea, SQLite blob).

Two formats, told apart by their length (so rows written before #16 read as they are):
- raw: little-endian int64s, 8 bytes a value; its length is a multiple of 8.
- frame of reference: a header byte, the smallest value as a little-endian int64 base, then each
  value's difference from the base as an unsigned little-endian number of 1 to 7 bytes, the
  fewest that hold the largest (or none at all when every value is the same, then a uint32
  count). A topic's offsets are close together (its
  partitions are balanced, committed offsets trail the high watermark), so a difference fits in
  2 or 4 bytes where the value needs 8. Its length is never a multiple of 8: a pad byte is
  added when it would be (the header says so).
`pack` writes whichever is shorter (raw for one or two values, or when the values span more
than 7 bytes can hold).
"""
from __future__ import annotations

import struct
from array import array
from sys import byteorder

NONE = -1  # offsets are never negative: -1 stands for "no value" (e.g. partition missing in store)

_TAG = 0xA0  # the header's top 3 bits, checked when reading
_MISSING = 0x08  # some values are missing: the width's largest number stands for them
_PADDED = 0x10  # one pad byte at the end
_WIDTH_MASK = 0x07
_BASE = struct.Struct("<q")
_COUNT = struct.Struct("<I")
_HEAD = 1 + _BASE.size


def _code_of(size: int) -> str:
    return next(c for c in "BHILQ" if array(c).itemsize == size)


# The width code is the bytes per value, 1 to 7 (0: every value is the base; 8 would never be
# shorter than raw). Widths 3, 5, 6 and 7 are stored in their bytes and widened to the array
# type's 4 or 8 with strided slice copies, which run in C.
_ARRAY = {1: _code_of(1), 2: _code_of(2), 3: _code_of(4), 4: _code_of(4), 5: _code_of(8), 6: _code_of(8),
          7: _code_of(8)}
_SWAP = byteorder != "little"


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
    missing = None in values or NONE in values
    present = [v for v in values if v is not None and v != NONE] if missing else values
    base = min(present) if present else 0
    span = max(present) - base if present else 0
    if not present or (span == 0 and not missing):
        # every value the same (or every value missing): the base and the count say it all
        head = _TAG | (_MISSING if missing else 0)
        return bytes([head]) + _BASE.pack(base) + _COUNT.pack(len(values))
    size = max(1, ((span + missing).bit_length() + 7) // 8)  # the sentinel stays free when values are missing
    if size > 7:
        return None
    sentinel = (1 << (8 * size)) - 1
    code = _ARRAY[size]
    if missing:
        arr = array(code, [sentinel if v is None or v == NONE else v - base for v in values])
    else:
        arr = array(code, [v - base for v in values])
    if _SWAP:
        arr.byteswap()
    head = _TAG | size | (_MISSING if missing else 0)
    packed = arr.tobytes() if arr.itemsize == size else _restride(arr.tobytes(), arr.itemsize, size)
    body = _BASE.pack(base) + packed
    if (1 + len(body)) % 8 == 0:
        return bytes([head | _PADDED]) + body + b"\0"
    return bytes([head]) + body


def pack(values: list[int | None]) -> bytes:
    """Signed 64-bit values (None or -1: no value) packed in the shorter format."""
    if not values:
        return b""
    raw = _pack_raw(values)  # also the range check: raises OverflowError past int64
    if len(values) < 3:
        return raw
    compact = _pack_compact(values)
    return compact if compact is not None and len(compact) < len(raw) else raw


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
    if head & 0xE0 != _TAG:
        raise ValueError(f"not a packed array (header {head:#x})")
    (base,) = _BASE.unpack_from(data, 1)
    wcode = head & _WIDTH_MASK
    missing = head & _MISSING
    if wcode == 0:
        (count,) = _COUNT.unpack_from(data, _HEAD)
        return [None] * count if missing else [base] * count
    size, code = wcode, _ARRAY[wcode]
    end = len(data) - (1 if head & _PADDED else 0)
    arr = array(code)
    if arr.itemsize == size:
        arr.frombytes(data[_HEAD:end])
    else:
        arr.frombytes(_restride(bytes(data[_HEAD:end]), size, arr.itemsize))
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
