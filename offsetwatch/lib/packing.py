"""Compact sample storage: per-partition numbers packed as little-endian int64 arrays.

One row per (topic, cycle) or (pipeline, cycle) with packed arrays costs ~8 bytes per offset
value plus a row overhead shared by all its partitions, where a row per (partition, time)
costs ~112 bytes with its index. BinaryField keeps it portable (PostgreSQL bytea, SQLite blob).
"""
from __future__ import annotations

from array import array
from sys import byteorder

NONE = -1  # offsets are never negative: -1 stands for "no value" (e.g. partition missing in store)


def pack(values: list[int | None]) -> bytes:
    arr = array("q", (NONE if v is None else v for v in values))
    if byteorder != "little":
        arr.byteswap()
    return arr.tobytes()


def unpack(data: bytes | memoryview | None) -> list[int | None]:
    if not data:
        return []
    arr = array("q")
    arr.frombytes(bytes(data))
    if byteorder != "little":
        arr.byteswap()
    return [None if v == NONE else v for v in arr]


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
