"""Open scanners: their state, how one walks its table, and the registry of scanner ids.

A Thrift scan is stateful across calls (scannerOpen* returns an id, scannerGetList pages,
scannerClose ends it), so this state lives here, apart from the stateless row reads. The
caller (the handler) holds the handler's lock around every use.
"""
from __future__ import annotations

import bisect
import itertools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from devstack.hbase.filters import Filters
from devstack.hbase.idl import IllegalArgument, TRowResult, row_result
from devstack.hbase.table_store import ColumnSpec, Table

SCANNER_IDLE_TIMEOUT_S = 600.0


@dataclass
class Scanner:
    table: Table
    spec: ColumnSpec  # column restriction
    start: bytes
    stop: bytes
    before: int | None  # exclusive upper time bound (setTimeRange(0, ts)); None = unbounded
    reversed: bool
    filters: Filters
    batch: int | None  # Scan.setBatch: max cells per result (rows split into partial results)
    sort_columns: bool
    cursor: bytes | None = None  # last row key consumed
    pending: list = field(default_factory=list)  # partial results left over from Scan.setBatch
    done: bool = False
    last_used: float = field(default_factory=time.monotonic)

    def _next_keys(self) -> Iterator[bytes]:
        """Row keys after the scanner's cursor, within its bounds, in scan order."""
        keys = self.table.keys
        if not self.reversed:
            if self.cursor is not None:
                i = bisect.bisect_right(keys, self.cursor)
            else:
                i = bisect.bisect_left(keys, self.start)
            while i < len(keys):
                key = keys[i]
                if self.stop and key >= self.stop:
                    return
                yield key
                # The table may change while we yield (purges); re-locate from the key.
                i = bisect.bisect_right(keys, key)
        else:
            if self.cursor is not None:
                i = bisect.bisect_left(keys, self.cursor) - 1
            else:
                i = (bisect.bisect_right(keys, self.start) if self.start else len(keys)) - 1
            while i >= 0:
                key = keys[i]
                if self.stop and key <= self.stop:
                    return
                yield key
                i = bisect.bisect_left(keys, key) - 1

    def next_results(self, nb_rows: int | None, clock: Callable[[], int]) -> list[TRowResult]:
        """Up to `nb_rows` results (scannerGetList); an empty list once the scan is over.
        `clock` gives the current time in ms, for the TTL of the rows read."""
        results: list[TRowResult] = []
        if nb_rows is None or nb_rows <= 0:
            return results
        while len(results) < nb_rows and self.pending:
            results.append(self.pending.pop(0))
        if self.done or len(results) >= nb_rows:
            return results
        now = clock()
        for key in self._next_keys():
            self.cursor = key
            if self.filters.prefixes and not self.filters.row_key_passes(key):
                # PrefixFilter ends a scan once past the prefix; before it, skip the row.
                p = self.filters.prefixes[0]
                if (key > p if not self.reversed else key < p) and not key.startswith(p):
                    self.done = True
                    break
                continue
            cells = self.filters.apply(self.table.read_row(key, self.spec, self.before, now))
            if not cells:
                continue  # rows with no visible cells are not returned
            if self.batch:
                # Scan.setBatch(n): a wide row comes back as several partial results.
                chunks = [cells[i:i + self.batch] for i in range(0, len(cells), self.batch)]
            else:
                chunks = [cells]
            for chunk in chunks:
                result = row_result(key, chunk, self.sort_columns)
                if len(results) < nb_rows:
                    results.append(result)
                else:
                    self.pending.append(result)
            if len(results) >= nb_rows:
                break
        else:
            self.done = True
        return results


class Scanners:
    """Open scanners by id; HBase numbers scanners 0, 1, 2, ..."""

    def __init__(self) -> None:
        self._open: dict[int, Scanner] = {}
        self._ids = itertools.count()

    def add(self, scanner: Scanner) -> int:
        self._expire_idle()
        sid = next(self._ids)
        self._open[sid] = scanner
        return sid

    def get(self, sid) -> Scanner:
        scanner = self._open.get(sid)
        if scanner is None:
            raise IllegalArgument(message="scanner ID is invalid")
        scanner.last_used = time.monotonic()
        return scanner

    def close(self, sid) -> None:
        self.get(sid)
        del self._open[sid]

    def drop_table(self, table: Table) -> None:
        """Forget the scanners of a deleted table."""
        for sid in [i for i, s in self._open.items() if s.table is table]:
            del self._open[sid]

    def _expire_idle(self) -> None:
        limit = time.monotonic() - SCANNER_IDLE_TIMEOUT_S
        for sid in [i for i, s in self._open.items() if s.last_used < limit]:
            del self._open[sid]
