"""The packed columns of a chart roll-up (dashboard.models.ChartRollup): per partition, the
largest lag in messages (int32 when they all fit, else int64) and in seconds (int32 tenths of a
second): 8 bytes per partition and bucket, nearly always.

Its own format, not offsetwatch.lib.packing's: a lag can be any int64 (packing's NONE = -1 is a
possible lag), and seconds fit in 4 bytes at the tenth the charts show. Not compressed: zlib's
set-up costs ~50 us a row, and every open bucket is rewritten every cycle (PostgreSQL compresses
values over 2 KB itself, a pipeline of more than ~250 partitions).

Unknown is the smallest value of each type (MISSING, SECONDS_MISSING), so the largest of two
buckets is a plain max() per partition.
"""
from __future__ import annotations

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


_TENTHS_FIT = SECONDS_MAX / 10


def tenths_array(seconds) -> array:
    """tenths() of each value, as an array('i'): one comprehension, no call per value (every
    partition of every pipeline, at every cycle)."""
    return array("i", [SECONDS_MISSING if s is None or s != s else round(s * 10) if 0 <= s < _TENTHS_FIT
                       else tenths(s) for s in seconds])


_NARROW_MISSING = -(2**31)  # MISSING in the 4-byte width


def encode(lags: array, seconds: array) -> bytes:
    """One blob from an array('q') of lags and an array('i') of tenths, same length: a width
    byte (b"i": the lags fit 4 bytes, as nearly always; b"q": 8), the lags, the tenths."""
    lag_col, width = None, b"i"
    if _NARROW_MISSING not in lags:
        narrow = [_NARROW_MISSING if v == MISSING else v for v in lags] if MISSING in lags else lags
        try:
            lag_col = array("i", narrow)
        except OverflowError:
            pass
    if lag_col is None:
        lag_col, width = array("q", lags), b"q"
    seconds = array("i", seconds)
    if byteorder != "little":
        lag_col.byteswap()
        seconds.byteswap()
    return width + lag_col.tobytes() + seconds.tobytes()


def decode(blob: bytes | memoryview | None) -> tuple[array, array]:
    """(lags 'q', tenths 'i') from encode()'s blob; two empty arrays for an empty one."""
    if not blob:
        return array("q"), array("i")
    raw = bytes(blob)
    size = 8 if raw[:1] == b"q" else 4
    n = (len(raw) - 1) // (size + 4)
    lag_col, seconds = array("q" if size == 8 else "i"), array("i")
    lag_col.frombytes(raw[1:1 + size * n])
    seconds.frombytes(raw[1 + size * n:])
    if byteorder != "little":
        lag_col.byteswap()
        seconds.byteswap()
    if size == 4:
        lag_col = array("q", lag_col) if _NARROW_MISSING not in lag_col else array(
            "q", (MISSING if v == _NARROW_MISSING else v for v in lag_col))
    return lag_col, seconds


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
