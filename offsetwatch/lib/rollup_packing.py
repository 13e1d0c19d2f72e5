"""The packed columns of a chart roll-up (dashboard.models.ChartRollup): per partition, the
largest lag in messages (int64) and in seconds (int32 tenths of a second), zlib-compressed.

Its own format, not offsetwatch.lib.packing's: a lag can be any int64 (packing's NONE = -1 is a
possible lag), seconds fit in 4 bytes at the tenth the charts show, and one row per minute for a
week is worth compressing (lags of one pipeline share their high bytes).

Unknown is the smallest value of each type (MISSING, SECONDS_MISSING), so the largest of two
buckets is a plain max() per partition.
"""
from __future__ import annotations

import zlib
from array import array
from sys import byteorder

MISSING = -(2**63)  # an unknown lag in messages
SECONDS_MISSING = -(2**31)  # an unknown lag in seconds
SECONDS_MAX = 2**31 - 1  # tenths of a second: 6.8 years; a larger lag is kept as this


def tenths(seconds: float | None) -> int:
    """A lag in seconds as stored: tenths, SECONDS_MISSING when unknown."""
    if seconds is None or seconds != seconds:
        return SECONDS_MISSING
    return min(SECONDS_MAX, max(0, round(seconds * 10)))


def encode(lags: array, seconds: array) -> bytes:
    """One blob from an array('q') of lags and an array('i') of tenths, same length."""
    lags, seconds = array("q", lags), array("i", seconds)
    if byteorder != "little":
        lags.byteswap()
        seconds.byteswap()
    return zlib.compress(lags.tobytes() + seconds.tobytes(), 1)


def decode(blob: bytes | memoryview | None) -> tuple[array, array]:
    """(lags 'q', tenths 'i') from encode()'s blob; two empty arrays for an empty one."""
    if not blob:
        return array("q"), array("i")
    raw = zlib.decompress(bytes(blob))
    n = len(raw) // 12
    lags, seconds = array("q"), array("i")
    lags.frombytes(raw[:8 * n])
    seconds.frombytes(raw[8 * n:])
    if byteorder != "little":
        lags.byteswap()
        seconds.byteswap()
    return lags, seconds


def encode_partitions(partitions: list[int]) -> bytes:
    """Partition ids: empty when they are 0..n-1 (nearly always)."""
    if partitions == list(range(len(partitions))):
        return b""
    ids = array("q", partitions)
    if byteorder != "little":
        ids.byteswap()
    return ids.tobytes()


def decode_partitions(blob: bytes | memoryview | None, count: int) -> list[int]:
    if not blob:
        return list(range(count))
    ids = array("q")
    ids.frombytes(bytes(blob))
    if byteorder != "little":
        ids.byteswap()
    return ids.tolist()
