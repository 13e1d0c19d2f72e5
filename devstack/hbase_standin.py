"""An in-memory HBase Thrift 1 server stand-in for dev and tests (HBase cannot be installed here).

It is a real Thrift server built with thriftpy2 from the `Hbase.thrift` IDL that happybase
ships, so happybase talks real Thrift over TCP to it, exactly as it would to HBase's own
`hbase thrift start` server (buffered transport + binary protocol by default, as happybase).

    python -m devstack.hbase_standin --host 127.0.0.1 --port 19090 [--framed] [--compact]

In-process (unit tests)::

    server = make_server("127.0.0.1", port)
    thread = start_in_thread(server)       # listening when this returns
    ...
    stop_server(server, thread)

Behaviour mirrors HBase's Thrift 1 handler (`ThriftHBaseServiceHandler`) and the region server
semantics it exposes; each place where that matters says so. Deliberate simplifications:

* one table = one region; data lives in memory only and is lost when the process exits;
* a call is atomic (one lock for the whole handler), also across rows (HBase is atomic per row);
* a scanner reads the live table each time `scannerGetList` is called (it does not pin an MVCC
  snapshot when opened, as an HBase region scanner does);
* idle scanners are dropped after `SCANNER_IDLE_TIMEOUT_S` (HBase has a 60 s scanner lease);
* filter strings: only `KeyOnlyFilter`, `FirstKeyOnlyFilter` and `PrefixFilter`, alone or
  joined with `AND`; anything else is an IOError "filter not supported by the stand-in: ...".

Never imported by production code.
"""
from __future__ import annotations

import argparse
import bisect
import functools
import hashlib
import itertools
import logging
import os
import signal
import socket
import struct
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator

import happybase
import thriftpy2
import thriftpy2.rpc
from thriftpy2.protocol import TBinaryProtocolFactory, TCompactProtocolFactory
from thriftpy2.transport import TBufferedTransportFactory, TFramedTransportFactory

logger = logging.getLogger("devstack.hbase_standin")

# The IDL happybase itself uses; loading it under the same module name returns the very module
# happybase loaded (thriftpy2 caches parsed IDLs), so the struct classes are shared in-process.
HBASE_THRIFT_IDL = os.path.join(os.path.dirname(happybase.__file__), "Hbase.thrift")
Hbase_thrift = thriftpy2.load(HBASE_THRIFT_IDL, module_name="Hbase_thrift")

# The IDL's own exception structs (its `IOError` shadows Python's builtin name, hence the alias).
HbaseIOError = Hbase_thrift.IOError
IllegalArgument = Hbase_thrift.IllegalArgument
AlreadyExists = Hbase_thrift.AlreadyExists
TCell = Hbase_thrift.TCell
TColumn = Hbase_thrift.TColumn
TRowResult = Hbase_thrift.TRowResult
TRegionInfo = Hbase_thrift.TRegionInfo
ColumnDescriptor = Hbase_thrift.ColumnDescriptor

# HConstants.LATEST_TIMESTAMP (Long.MAX_VALUE): "no explicit timestamp, use the server's clock".
LATEST_TIMESTAMP = 2**63 - 1
# HConstants.FOREVER (Integer.MAX_VALUE): the TTL HBase reports for families that never expire.
FOREVER = 2**31 - 1
# HConstants.MAX_ROW_LENGTH (Short.MAX_VALUE).
MAX_ROW_LENGTH = 32767
SCANNER_IDLE_TIMEOUT_S = 600.0

# Compression.Algorithm names (looked up lower-case by HBase, reported upper-case) and BloomType
# values (matched exactly, like `BloomType.valueOf`).
_COMPRESSIONS = {"none", "gz", "lzo", "snappy", "lz4", "bzip2", "zstd", "lzma", "brotli"}
_BLOOM_TYPES = {"NONE", "ROW", "ROWCOL", "ROWPREFIX_FIXED_LENGTH"}

_pack_long = struct.Struct(">q").pack
_unpack_long = struct.Struct(">q").unpack


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


# --------------------------------------------------------------------------------------------
# Storage model
# --------------------------------------------------------------------------------------------

@dataclass
class _Family:
    name: bytes
    max_versions: int
    ttl_s: int  # FOREVER means never expires
    compression: str
    in_memory: bool
    bloom_filter_type: str
    block_cache_enabled: bool

    def descriptor(self) -> ColumnDescriptor:
        # Mirrors ThriftUtilities.colDescFromHbase: the name carries the trailing ':', bloom
        # filter vector size / hash count are not HBase settings and come back as 0.
        return ColumnDescriptor(
            name=self.name + b":",
            maxVersions=self.max_versions,
            compression=self.compression,
            inMemory=self.in_memory,
            bloomFilterType=self.bloom_filter_type,
            bloomFilterVectorSize=0,
            bloomFilterNbHashes=0,
            blockCacheEnabled=self.block_cache_enabled,
            timeToLive=self.ttl_s,
        )

    def is_expired(self, ts: int, now: int) -> bool:
        # HBase's ScanQueryMatcher treats a cell as expired when ts < now - ttl (ms).
        return self.ttl_s != FOREVER and ts < now - self.ttl_s * 1000


@dataclass
class _Row:
    # family -> qualifier -> versions as [(ts, value)], newest first, at most maxVersions.
    cells: dict[bytes, dict[bytes, list[tuple[int, bytes]]]] = field(default_factory=dict)
    # Delete markers ("tombstones"). In HBase a DeleteFamily / DeleteColumn marker at ts T hides
    # every version with ts <= T, including ones written *after* the delete, until a major
    # compaction purges the marker. We keep them so late writes with old timestamps stay hidden.
    family_markers: dict[bytes, int] = field(default_factory=dict)
    column_markers: dict[tuple[bytes, bytes], int] = field(default_factory=dict)

    def is_masked(self, family: bytes, qualifier: bytes, ts: int) -> bool:
        return ts <= max(
            self.family_markers.get(family, -1), self.column_markers.get((family, qualifier), -1)
        )

    def is_empty(self) -> bool:
        return not self.cells and not self.family_markers and not self.column_markers


@dataclass
class _Table:
    name: bytes
    families: dict[bytes, _Family]
    created_ms: int
    enabled: bool = True
    rows: dict[bytes, _Row] = field(default_factory=dict)
    keys: list[bytes] = field(default_factory=list)  # sorted by raw bytes, like HBase row keys

    def row_for_write(self, key: bytes) -> _Row:
        row = self.rows.get(key)
        if row is None:
            row = self.rows[key] = _Row()
            bisect.insort(self.keys, key)
        return row

    def drop_if_empty(self, key: bytes) -> None:
        row = self.rows.get(key)
        if row is not None and row.is_empty():
            del self.rows[key]
            i = bisect.bisect_left(self.keys, key)
            if i < len(self.keys) and self.keys[i] == key:
                del self.keys[i]


def _parse_column(column: bytes) -> tuple[bytes, bytes | None]:
    """CellUtil.parseColumn: split at the first ':'; no ':' means the whole family.

    Note `b'fam:'` is family `fam` with the *empty* qualifier, not the whole family.
    """
    family, sep, qualifier = column.partition(b":")
    return family, (qualifier if sep else None)


def _to_bytes(value) -> bytes:
    if value is None:
        return b""
    if isinstance(value, str):
        return value.encode("utf-8")
    return bytes(value)


# --------------------------------------------------------------------------------------------
# Filter strings (HBase's filter language, a small subset)
# --------------------------------------------------------------------------------------------

class _UnsupportedFilter(Exception):
    pass


@dataclass
class _Filters:
    key_only: bool = False
    key_only_len_as_value: bool = False
    first_key_only: bool = False
    prefixes: list[bytes] = field(default_factory=list)

    def row_key_passes(self, key: bytes) -> bool:
        return all(key.startswith(p) for p in self.prefixes)

    def apply(self, cells: list[tuple[bytes, bytes, int, bytes]]) -> list[tuple[bytes, bytes, int, bytes]]:
        if self.first_key_only:
            cells = cells[:1]
        if self.key_only:
            # KeyOnlyFilter(true) replaces the value by its length as a 4-byte int.
            cells = [
                (f, q, ts, struct.pack(">i", len(v)) if self.key_only_len_as_value else b"")
                for f, q, ts, v in cells
            ]
        return cells


def _tokenize_filter(text: bytes) -> list[tuple[str, bytes]]:
    tokens: list[tuple[str, bytes]] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i:i + 1]
        if c.isspace():
            i += 1
        elif c in (b"(", b")", b","):
            tokens.append((c.decode(), c))
            i += 1
        elif c == b"'":
            # Quoted byte string; '' inside it is an escaped quote (HBase ParseFilter rules).
            j, out = i + 1, bytearray()
            while True:
                if j >= n:
                    raise ValueError("unterminated quoted string")
                if text[j:j + 1] == b"'":
                    if text[j + 1:j + 2] == b"'":
                        out += b"'"
                        j += 2
                        continue
                    break
                out += text[j:j + 1]
                j += 1
            tokens.append(("str", bytes(out)))
            i = j + 1
        else:
            j = i
            while j < n and not text[j:j + 1].isspace() and text[j:j + 1] not in (b"(", b")", b",", b"'"):
                j += 1
            tokens.append(("word", text[i:j]))
            i = j
    return tokens


def _parse_filter_string(text: bytes) -> _Filters:
    """Parse `F(args) [AND F(args)]...` for the supported filters; raise _UnsupportedFilter otherwise."""
    try:
        tokens = _tokenize_filter(text)
    except ValueError as exc:
        raise _UnsupportedFilter(str(exc)) from exc
    filters = _Filters()
    pos = 0

    def expect(kind: str) -> bytes:
        nonlocal pos
        if pos >= len(tokens) or tokens[pos][0] != kind:
            raise _UnsupportedFilter(f"expected {kind!r} at token {pos}")
        pos += 1
        return tokens[pos - 1][1]

    while True:
        name = expect("word")
        expect("(")
        args: list[tuple[str, bytes]] = []
        while pos < len(tokens) and tokens[pos][0] != ")":
            if tokens[pos][0] == ",":
                pos += 1
                continue
            args.append(tokens[pos])
            pos += 1
        expect(")")
        if name == b"KeyOnlyFilter" and not args:
            filters.key_only = True
        elif name == b"KeyOnlyFilter" and len(args) == 1 and args[0] in (("word", b"true"), ("word", b"false")):
            filters.key_only = True
            filters.key_only_len_as_value = args[0][1] == b"true"
        elif name == b"FirstKeyOnlyFilter" and not args:
            filters.first_key_only = True
        elif name == b"PrefixFilter" and len(args) == 1 and args[0][0] == "str":
            filters.prefixes.append(args[0][1])
        else:
            raise _UnsupportedFilter(name.decode("utf-8", "replace"))
        if pos == len(tokens):
            return filters
        # Only conjunctions (FilterList MUST_PASS_ALL); OR / SKIP / WHILE / grouping are not here.
        if tokens[pos] != ("word", b"AND"):
            raise _UnsupportedFilter(tokens[pos][1].decode("utf-8", "replace"))
        pos += 1


# --------------------------------------------------------------------------------------------
# Scanners
# --------------------------------------------------------------------------------------------

@dataclass
class _Scanner:
    table: _Table
    spec: dict | None  # column restriction, see Handler._column_spec
    start: bytes
    stop: bytes
    before: int | None  # exclusive upper time bound (setTimeRange(0, ts)); None = unbounded
    reversed: bool
    filters: _Filters
    batch: int | None  # Scan.setBatch: max cells per result (rows split into partial results)
    sort_columns: bool
    while_prefix: bytes | None = None  # scannerOpenWithPrefix: WhileMatchFilter(PrefixFilter)
    cursor: bytes | None = None  # last row key consumed
    pending: list = field(default_factory=list)  # partial results left over from Scan.setBatch
    done: bool = False
    last_used: float = field(default_factory=time.monotonic)


# --------------------------------------------------------------------------------------------
# The Thrift handler
# --------------------------------------------------------------------------------------------

def _thrift_safe(cls):
    """Make every Hbase service method of `cls` safe to call through thriftpy2.

    thriftpy2's processor only sends back exceptions a method declares in the IDL; anything else
    (a bug, or IllegalArgument from a method that cannot throw it) escapes and kills the client's
    connection. So: undeclared exceptions become the IDL's IOError, and service methods the
    stand-in does not implement raise IOError instead of AttributeError.
    """
    service = Hbase_thrift.Hbase

    def declared(api: str) -> tuple[type, ...]:
        spec = getattr(service, api + "_result").thrift_spec
        return tuple(v[2] for k, v in spec.items() if v[1] != "success")

    def wrap(api: str, func: Callable) -> Callable:
        allowed = declared(api)

        @functools.wraps(func)
        def call(self, *args):
            try:
                return func(self, *args)
            except allowed:
                raise
            except (IllegalArgument, AlreadyExists, HbaseIOError) as exc:
                raise HbaseIOError(message=exc.message) from exc
            except Exception as exc:  # a stand-in bug: report it, keep the connection alive
                logger.exception("%s failed", api)
                raise HbaseIOError(
                    message=f"internal error in the HBase stand-in during {api}: {exc!r}"
                ) from exc

        return call

    def missing(api: str) -> Callable:
        def call(self, *args):
            raise HbaseIOError(message=f"{api} is not implemented by the HBase Thrift stand-in")

        call.__name__ = api
        return call

    for api in service.thrift_services:
        if api in cls.__dict__:
            setattr(cls, api, wrap(api, cls.__dict__[api]))
        else:
            setattr(cls, api, wrap(api, missing(api)))
    return cls


@_thrift_safe
class Handler:
    """In-memory state and the Hbase Thrift 1 calls; thread-safe (one re-entrant lock)."""

    def __init__(self, clock: Callable[[], int] = _now_ms, server_name: bytes = b"localhost",
                 server_port: int = 16020):
        self._clock = clock  # current time in ms; injectable for tests
        self._lock = threading.RLock()
        self._tables: dict[bytes, _Table] = {}
        self._scanners: dict[int, _Scanner] = {}
        self._scanner_ids = itertools.count()  # HBase numbers scanners 0, 1, 2, ...
        self._server_name = server_name
        self._server_port = server_port

    # ---------------------------------------------------------------- helpers ---------------

    @staticmethod
    def _table_name(name) -> bytes:
        """Validate like TableName.valueOf; `default:x` is `x`, other namespaces do not exist."""
        name = _to_bytes(name)
        namespace, sep, qualifier = name.rpartition(b":")
        if sep:
            if not namespace or not all(chr(c).isascii() and (chr(c).isalnum() or c == ord("_")) for c in namespace):
                raise IllegalArgument(message=f"Illegal namespace in table name {name!r}")
            if namespace != b"default":
                raise HbaseIOError(
                    message=f"NamespaceNotFoundException: {namespace.decode(errors='replace')} "
                    "(the stand-in only has the default namespace)"
                )
        if not qualifier:
            raise IllegalArgument(message="Table qualifier must not be empty")
        if qualifier[:1] in (b".", b"-"):
            raise IllegalArgument(message=f"Illegal first character in table name {name!r}")
        for c in qualifier:
            if not (chr(c).isascii() and (chr(c).isalnum() or chr(c) in "_-.")):
                raise IllegalArgument(
                    message=f"Illegal character {chr(c)!r} in table name {name!r}; "
                    "only [a-zA-Z_0-9-.] are allowed"
                )
        return qualifier

    def _existing_table(self, name) -> _Table:
        key = self._table_name(name)
        table = self._tables.get(key)
        if table is None:
            raise HbaseIOError(message=f"TableNotFoundException: {key.decode(errors='replace')}")
        return table

    def _enabled_table(self, name) -> _Table:
        # Reads and writes to a disabled table fail in HBase (its regions are offline).
        table = self._existing_table(name)
        if not table.enabled:
            raise HbaseIOError(message=f"TableNotEnabledException: {table.name.decode(errors='replace')} is disabled")
        return table

    @staticmethod
    def _family(table: _Table, family: bytes) -> _Family:
        fam = table.families.get(family)
        if fam is None:
            raise HbaseIOError(
                message=f"NoSuchColumnFamilyException: column family {family.decode(errors='replace')!r} "
                f"does not exist in table {table.name.decode(errors='replace')}"
            )
        return fam

    def _column_spec(self, table: _Table, columns: Iterable[bytes] | None):
        """Get/Scan.addFamily + addColumn, in order: addColumn after addFamily narrows the family
        to that column, addFamily after addColumn widens it again (HBase's familyMap rules)."""
        if not columns:
            return None
        spec: dict[bytes, set[bytes] | None] = {}
        for column in columns:
            family, qualifier = _parse_column(_to_bytes(column))
            self._family(table, family)
            if qualifier is None:
                spec[family] = None
            else:
                if spec.get(family) is None:
                    spec[family] = set()
                spec[family].add(qualifier)
        return spec

    @staticmethod
    def _check_ts(timestamp: int) -> None:
        if timestamp < 0:
            raise IllegalArgument(message=f"Timestamp cannot be negative. ts={timestamp}")

    def _read_row(self, table: _Table, key: bytes, spec, before: int | None, max_versions: int = 1,
                  now: int | None = None) -> list[tuple[bytes, bytes, int, bytes]]:
        """Visible cells of one row as (family, qualifier, ts, value), in HBase cell order
        (family, qualifier ascending; versions newest first). Purges expired cells on the way."""
        row = table.rows.get(key)
        if row is None:
            return []
        now = self._clock() if now is None else now
        out = []
        for family in sorted(row.cells):
            if spec is not None and family not in spec:
                continue
            fam = table.families[family]
            wanted = spec.get(family) if spec is not None else None
            quals = row.cells[family]
            for qualifier in sorted(quals):
                if wanted is not None and qualifier not in wanted:
                    continue
                versions = quals[qualifier]
                if fam.ttl_s != FOREVER:
                    live = [(ts, v) for ts, v in versions if not fam.is_expired(ts, now)]
                    if len(live) != len(versions):  # lazy TTL purge
                        versions[:] = live
                n = 0
                for ts, value in versions:
                    if before is not None and ts >= before:  # setTimeRange(0, before)
                        continue
                    out.append((family, qualifier, ts, value))
                    n += 1
                    if n >= max_versions:
                        break
            # drop emptied columns/families left by the TTL purge
            for qualifier in [q for q, v in quals.items() if not v]:
                del quals[qualifier]
        for family in [f for f, q in row.cells.items() if not q]:
            del row.cells[family]
        if row.is_empty():
            table.drop_if_empty(key)
        return out

    @staticmethod
    def _row_result(key: bytes, cells, sort_columns: bool = False) -> TRowResult:
        # ThriftUtilities.rowResultFromHBase: either the `columns` map or `sortedColumns` list.
        if sort_columns:
            return TRowResult(row=key, sortedColumns=[
                TColumn(columnName=f + b":" + q, cell=TCell(value=v, timestamp=ts))
                for f, q, ts, v in cells
            ])
        return TRowResult(row=key, columns={
            f + b":" + q: TCell(value=v, timestamp=ts) for f, q, ts, v in cells
        })

    def _get_rows(self, table_name, rows, columns, timestamp) -> list[TRowResult]:
        with self._lock:
            table = self._enabled_table(table_name)
            spec = self._column_spec(table, columns)
            before = None if timestamp in (None, LATEST_TIMESTAMP) else timestamp
            now = self._clock()
            results = []
            for key in rows:
                key = _to_bytes(key)
                if not key:
                    raise HbaseIOError(message="Row length is 0")
                cells = self._read_row(table, key, spec, before, now=now)
                if cells:  # rowResultFromHBase skips empty results
                    results.append(self._row_result(key, cells))
            return results

    def _get_cells(self, table_name, row, column, timestamp, versions) -> list[TCell]:
        if versions <= 0:
            raise HbaseIOError(message="maxVersions must be positive")
        with self._lock:
            table = self._enabled_table(table_name)
            key = _to_bytes(row)
            if not key:
                raise HbaseIOError(message="Row length is 0")
            spec = self._column_spec(table, [column])
            before = None if timestamp in (None, LATEST_TIMESTAMP) else timestamp
            return [TCell(value=v, timestamp=ts)
                    for _f, _q, ts, v in self._read_row(table, key, spec, before, versions)]

    # -- writes --

    def _put(self, table: _Table, key: bytes, family: bytes, qualifier: bytes, ts: int, value: bytes) -> None:
        fam = table.families[family]
        row = table.row_for_write(key)
        if row.is_masked(family, qualifier, ts):
            # Hidden by an earlier delete marker with a newer-or-equal timestamp, as in HBase.
            table.drop_if_empty(key)
            return
        versions = row.cells.setdefault(family, {}).setdefault(qualifier, [])
        versions[:] = [(t, v) for t, v in versions if t != ts]  # same coordinates: last write wins
        versions.append((ts, value))
        versions.sort(key=lambda tv: tv[0], reverse=True)
        del versions[fam.max_versions:]  # the family keeps at most maxVersions versions

    def _delete(self, table: _Table, key: bytes, family: bytes, qualifier: bytes | None, ts: int) -> None:
        """Delete.addFamily(f, ts) / addColumns(f, q, ts): every version with timestamp <= ts."""
        row = table.row_for_write(key)  # markers are kept even when the row has no cells yet
        if qualifier is None:
            row.family_markers[family] = max(ts, row.family_markers.get(family, -1))
            quals = row.cells.get(family, {})
            targets = list(quals)
        else:
            marker = (family, qualifier)
            row.column_markers[marker] = max(ts, row.column_markers.get(marker, -1))
            quals = row.cells.get(family, {})
            targets = [qualifier] if qualifier in quals else []
        for q in targets:
            quals[q] = [(t, v) for t, v in quals[q] if t > ts]
            if not quals[q]:
                del quals[q]
        if family in row.cells and not row.cells[family]:
            del row.cells[family]

    def _write_ts(self, timestamp: int, now: int) -> int:
        # A Put/Delete without explicit timestamp (LATEST_TIMESTAMP) gets the server's clock.
        if timestamp == LATEST_TIMESTAMP:
            return now
        self._check_ts(timestamp)
        return timestamp

    @staticmethod
    def _check_row_key(key: bytes) -> None:
        if not key:
            raise IllegalArgument(message="Row length is 0")
        if len(key) > MAX_ROW_LENGTH:
            raise IllegalArgument(message=f"Row length {len(key)} is > {MAX_ROW_LENGTH}")

    def _plan_mutations(self, table: _Table, key: bytes, mutations, strict_put_column: bool):
        """Split Thrift Mutations into (deletes, puts) with validated families."""
        self._check_row_key(key)
        deletes, puts = [], []
        for m in mutations or []:
            family, qualifier = _parse_column(_to_bytes(m.column))
            self._family(table, family)
            if m.isDelete:
                deletes.append((family, qualifier))
            elif qualifier is None:
                # HBase: "Delete is the only mutation supported over the whole column family".
                # mutateRowTs only logs a warning and skips it; mutateRowsTs rejects it.
                if strict_put_column:
                    raise IllegalArgument(message=f"Invalid famAndQf provided: {_to_bytes(m.column)!r}")
                logger.warning("put without qualifier on %r ignored (as HBase does)", m.column)
            else:
                puts.append((family, qualifier, _to_bytes(m.value)))
        return deletes, puts

    # ---------------------------------------------------------------- admin ------------------

    def getTableNames(self):
        with self._lock:
            return sorted(self._tables)

    def createTable(self, tableName, columnFamilies):
        name = self._table_name(tableName)
        with self._lock:
            # HBase checks for an existing table before it looks at the descriptors.
            if name in self._tables:
                raise AlreadyExists(message="table name already in use")
            families: dict[bytes, _Family] = {}
            for cd in columnFamilies or []:
                fam = self._family_from_descriptor(cd)
                if fam.name in families:
                    raise IllegalArgument(message=f"Family {fam.name!r} already exists so cannot be added")
                families[fam.name] = fam
            if not families:
                raise HbaseIOError(message="DoNotRetryIOException: Table should have at least one column family.")
            self._tables[name] = _Table(name=name, families=families, created_ms=self._clock())

    @staticmethod
    def _family_from_descriptor(cd) -> _Family:
        """ThriftUtilities.colDescFromThrift plus HBase's column family validation."""
        raw = _to_bytes(cd.name)
        if not raw:
            raise IllegalArgument(message="column name is empty")
        family = _parse_column(raw)[0]  # 'cf:' and even 'cf:x' name family 'cf'
        if not family:
            raise IllegalArgument(message="Column Family name can not be empty")
        if family.startswith(b"."):
            raise IllegalArgument(message=f"Column Family names cannot start with a period: {family!r}")
        if any(c < 32 or c == 127 or c in b":\\/" for c in family) or family == b"recovered.edits":
            raise IllegalArgument(message=f"Illegal column family name {family!r}")
        compression = cd.compression or "NONE"
        if compression.lower() not in _COMPRESSIONS:
            raise IllegalArgument(message=f"Unsupported compression algorithm name: {compression}")
        bloom = cd.bloomFilterType or "NONE"
        if bloom not in _BLOOM_TYPES:
            raise IllegalArgument(message=f"No enum constant BloomType.{bloom}")
        max_versions = 3 if cd.maxVersions is None else cd.maxVersions
        if max_versions <= 0:
            raise IllegalArgument(message="Maximum versions must be positive")
        ttl = -1 if cd.timeToLive is None else cd.timeToLive
        return _Family(
            name=family,
            max_versions=max_versions,
            ttl_s=ttl if ttl > 0 else FOREVER,  # colDescFromThrift: a TTL <= 0 means forever
            compression=compression.upper(),
            in_memory=bool(cd.inMemory),
            bloom_filter_type=bloom,
            block_cache_enabled=bool(cd.blockCacheEnabled),
        )

    def enableTable(self, tableName):
        with self._lock:
            table = self._existing_table(tableName)
            if table.enabled:
                raise HbaseIOError(message=f"TableNotDisabledException: {table.name.decode(errors='replace')}")
            table.enabled = True

    def disableTable(self, tableName):
        with self._lock:
            table = self._existing_table(tableName)
            if not table.enabled:
                raise HbaseIOError(message=f"TableNotEnabledException: {table.name.decode(errors='replace')}")
            table.enabled = False

    def isTableEnabled(self, tableName):
        with self._lock:
            return self._existing_table(tableName).enabled

    def deleteTable(self, tableName):
        with self._lock:
            name = self._table_name(tableName)
            table = self._tables.get(name)
            if table is None:
                raise HbaseIOError(message="table does not exist")
            if table.enabled:
                # HBase only deletes disabled tables (happybase's delete_table(disable=True) disables first).
                raise HbaseIOError(message=f"TableNotDisabledException: {name.decode(errors='replace')}")
            del self._tables[name]
            for sid in [i for i, s in self._scanners.items() if s.table is table]:
                del self._scanners[sid]

    def compact(self, tableNameOrRegionName):
        # Minor compaction: nothing observable (delete markers survive it in HBase too).
        with self._lock:
            self._table_for_compaction(tableNameOrRegionName)

    def majorCompact(self, tableNameOrRegionName):
        # Major compaction drops expired cells and purges delete markers, after which a later
        # write with an old timestamp is visible again - like HBase.
        with self._lock:
            table = self._table_for_compaction(tableNameOrRegionName)
            now = self._clock()
            for key in list(table.keys):
                row = table.rows[key]
                row.family_markers.clear()
                row.column_markers.clear()
                self._read_row(table, key, None, None, max_versions=FOREVER, now=now)
                table.drop_if_empty(key)

    def _table_for_compaction(self, name) -> _Table:
        name = _to_bytes(name)
        # Accept a region name as returned by getTableRegions ("table,,id.hash.") too.
        if b"," in name:
            name = name.split(b",", 1)[0]
        return self._existing_table(name)

    def getColumnDescriptors(self, tableName):
        with self._lock:
            table = self._existing_table(tableName)
            return {fam.name + b":": fam.descriptor() for fam in table.families.values()}

    def getTableRegions(self, tableName):
        with self._lock:
            try:
                table = self._existing_table(tableName)
            except HbaseIOError:
                return []  # HBase returns an empty list for a table that does not exist
            # One region spanning every key: empty start and end keys.
            digest = hashlib.md5(table.name + b",," + str(table.created_ms).encode()).hexdigest()
            return [TRegionInfo(
                startKey=b"",
                endKey=b"",
                id=table.created_ms,
                name=table.name + b",," + str(table.created_ms).encode() + b"." + digest.encode() + b".",
                version=1,
                serverName=self._server_name,
                port=self._server_port,
            )]

    # ---------------------------------------------------------------- reads ------------------

    def get(self, tableName, row, column, attributes):
        # A Get without readVersions returns only the newest version of each column.
        return self._get_cells(tableName, row, column, None, 1)

    def getVer(self, tableName, row, column, numVersions, attributes):
        return self._get_cells(tableName, row, column, None, numVersions)

    def getVerTs(self, tableName, row, column, timestamp, numVersions, attributes):
        return self._get_cells(tableName, row, column, timestamp, numVersions)

    def getRow(self, tableName, row, attributes):
        return self._get_rows(tableName, [row], None, None)

    def getRowWithColumns(self, tableName, row, columns, attributes):
        return self._get_rows(tableName, [row], columns, None)

    def getRowTs(self, tableName, row, timestamp, attributes):
        return self._get_rows(tableName, [row], None, timestamp)

    def getRowWithColumnsTs(self, tableName, row, columns, timestamp, attributes):
        return self._get_rows(tableName, [row], columns, timestamp)

    def getRows(self, tableName, rows, attributes):
        return self._get_rows(tableName, rows or [], None, None)

    def getRowsWithColumns(self, tableName, rows, columns, attributes):
        return self._get_rows(tableName, rows or [], columns, None)

    def getRowsTs(self, tableName, rows, timestamp, attributes):
        return self._get_rows(tableName, rows or [], None, timestamp)

    def getRowsWithColumnsTs(self, tableName, rows, columns, timestamp, attributes):
        return self._get_rows(tableName, rows or [], columns, timestamp)

    # ---------------------------------------------------------------- writes -----------------

    def mutateRow(self, tableName, row, mutations, attributes):
        self.mutateRowTs(tableName, row, mutations, LATEST_TIMESTAMP, attributes)

    def mutateRowTs(self, tableName, row, mutations, timestamp, attributes):
        with self._lock:
            table = self._enabled_table(tableName)
            key = _to_bytes(row)
            deletes, puts = self._plan_mutations(table, key, mutations, strict_put_column=False)
            ts = self._write_ts(timestamp, self._clock())
            # HBase's mutateRowTs applies the row's Delete before its Put.
            for family, qualifier in deletes:
                self._delete(table, key, family, qualifier, ts)
            for family, qualifier, value in puts:
                self._put(table, key, family, qualifier, ts, value)
            table.drop_if_empty(key)

    def mutateRows(self, tableName, rowBatches, attributes):
        self.mutateRowsTs(tableName, rowBatches, LATEST_TIMESTAMP, attributes)

    def mutateRowsTs(self, tableName, rowBatches, timestamp, attributes):
        with self._lock:
            table = self._enabled_table(tableName)
            # Validate everything first so a bad mutation leaves the table untouched.
            plans = []
            for batch in rowBatches or []:
                key = _to_bytes(batch.row)
                plans.append((key, *self._plan_mutations(table, key, batch.mutations, strict_put_column=True)))
            ts = self._write_ts(timestamp, self._clock())
            # HBase's mutateRowsTs sends all Puts, then all Deletes: a delete in the same batch
            # (same timestamp or later clock) hides the put - happybase's Batch uses this call.
            for key, _deletes, puts in plans:
                for family, qualifier, value in puts:
                    self._put(table, key, family, qualifier, ts, value)
            for key, deletes, _puts in plans:
                for family, qualifier in deletes:
                    self._delete(table, key, family, qualifier, ts)
            for key, _d, _p in plans:
                table.drop_if_empty(key)

    def deleteAll(self, tableName, row, column, attributes):
        self.deleteAllTs(tableName, row, column, LATEST_TIMESTAMP, attributes)

    def deleteAllTs(self, tableName, row, column, timestamp, attributes):
        with self._lock:
            table = self._enabled_table(tableName)
            key = _to_bytes(row)
            if not key:
                raise HbaseIOError(message="Row length is 0")
            family, qualifier = _parse_column(_to_bytes(column))
            self._family(table, family)
            ts = self._write_ts(timestamp, self._clock())
            self._delete(table, key, family, qualifier, ts)
            table.drop_if_empty(key)

    def deleteAllRow(self, tableName, row, attributes):
        self.deleteAllRowTs(tableName, row, LATEST_TIMESTAMP, attributes)

    def deleteAllRowTs(self, tableName, row, timestamp, attributes):
        # new Delete(row, ts): a DeleteFamily marker at ts for every family of the table.
        with self._lock:
            table = self._enabled_table(tableName)
            key = _to_bytes(row)
            if not key:
                raise HbaseIOError(message="Row length is 0")
            ts = self._write_ts(timestamp, self._clock())
            for family in table.families:
                self._delete(table, key, family, None, ts)
            table.drop_if_empty(key)

    def atomicIncrement(self, tableName, row, column, value):
        with self._lock:
            table = self._enabled_table(tableName)
            key = _to_bytes(row)
            self._check_row_key(key)
            family, qualifier = _parse_column(_to_bytes(column))
            qualifier = qualifier or b""  # a bare family increments the empty qualifier
            self._family(table, family)
            now = self._clock()
            current = self._read_row(table, key, {family: {qualifier}}, None, now=now)
            old, new_ts = 0, now
            if current:
                _f, _q, old_ts, raw = current[0]
                if len(raw) != 8:
                    raise HbaseIOError(
                        message=f"DoNotRetryIOException: Field is not a long, it's {len(raw)} bytes wide"
                    )
                old = _unpack_long(raw)[0]
                new_ts = max(now, old_ts + 1)  # the new version must sort after the old one
            # Java long arithmetic wraps around on overflow.
            new = (old + value + 2**63) % 2**64 - 2**63
            self._put(table, key, family, qualifier, new_ts, _pack_long(new))
            return new

    # ---------------------------------------------------------------- scanners ---------------

    def _open_scanner(self, tableName, start, stop, columns, timestamp=None, filter_string=None,
                      batch=None, sort_columns=False, reversed_=False, while_prefix=None) -> int:
        with self._lock:
            table = self._enabled_table(tableName)
            spec = self._column_spec(table, columns)
            filters = _Filters()
            if filter_string:
                try:
                    filters = _parse_filter_string(_to_bytes(filter_string))
                except _UnsupportedFilter as exc:
                    text = _to_bytes(filter_string).decode("utf-8", "replace")
                    raise HbaseIOError(
                        message=f"filter not supported by the stand-in: {text} ({exc})"
                    ) from exc
            if batch is not None and batch <= 0:
                batch = None  # Scan.setBatch(<=0) means "whole rows"
            before = None if timestamp in (None, LATEST_TIMESTAMP) else timestamp
            self._expire_idle_scanners()
            sid = next(self._scanner_ids)
            self._scanners[sid] = _Scanner(
                table=table, spec=spec, start=_to_bytes(start), stop=_to_bytes(stop), before=before,
                reversed=bool(reversed_), filters=filters, batch=batch,
                sort_columns=bool(sort_columns), while_prefix=while_prefix,
            )
            return sid

    def _expire_idle_scanners(self) -> None:
        limit = time.monotonic() - SCANNER_IDLE_TIMEOUT_S
        for sid in [i for i, s in self._scanners.items() if s.last_used < limit]:
            del self._scanners[sid]

    def scannerOpenWithScan(self, tableName, scan, attributes):
        return self._open_scanner(
            tableName,
            # TScan.startRow / stopRow: start inclusive, stop exclusive; empty = unbounded. For a
            # reversed scan the start is the (inclusive) upper bound and the stop the (exclusive)
            # lower bound - happybase swaps them for reverse=True.
            scan.startRow, scan.stopRow, scan.columns,
            timestamp=scan.timestamp,  # scan.setTimeRange(0, timestamp): only cells with ts < timestamp
            filter_string=scan.filterString,
            batch=scan.batchSize,
            sort_columns=scan.sortColumns,
            reversed_=scan.reversed,
            # scan.caching only tunes round trips inside HBase; nothing to do here.
        )

    def scannerOpen(self, tableName, startRow, columns, attributes):
        return self._open_scanner(tableName, startRow, b"", columns)

    def scannerOpenWithStop(self, tableName, startRow, stopRow, columns, attributes):
        return self._open_scanner(tableName, startRow, stopRow, columns)

    def scannerOpenWithPrefix(self, tableName, startAndPrefix, columns, attributes):
        # HBase: Scan(prefix) with WhileMatchFilter(PrefixFilter(prefix)).
        prefix = _to_bytes(startAndPrefix)
        return self._open_scanner(tableName, prefix, b"", columns, while_prefix=prefix)

    def scannerOpenTs(self, tableName, startRow, columns, timestamp, attributes):
        return self._open_scanner(tableName, startRow, b"", columns, timestamp=timestamp)

    def scannerOpenWithStopTs(self, tableName, startRow, stopRow, columns, timestamp, attributes):
        return self._open_scanner(tableName, startRow, stopRow, columns, timestamp=timestamp)

    def _scanner(self, sid) -> _Scanner:
        scanner = self._scanners.get(sid)
        if scanner is None:
            raise IllegalArgument(message="scanner ID is invalid")
        scanner.last_used = time.monotonic()
        return scanner

    def _next_keys(self, s: _Scanner) -> Iterator[bytes]:
        """Row keys after the scanner's cursor, within its bounds, in scan order."""
        keys = s.table.keys
        if not s.reversed:
            i = bisect.bisect_right(keys, s.cursor) if s.cursor is not None else bisect.bisect_left(keys, s.start)
            while i < len(keys):
                key = keys[i]
                if s.stop and key >= s.stop:
                    return
                yield key
                # The table may change while we yield (purges); re-locate from the key.
                i = bisect.bisect_right(keys, key)
        else:
            if s.cursor is not None:
                i = bisect.bisect_left(keys, s.cursor) - 1
            else:
                i = (bisect.bisect_right(keys, s.start) if s.start else len(keys)) - 1
            while i >= 0:
                key = keys[i]
                if s.stop and key <= s.stop:
                    return
                yield key
                i = bisect.bisect_left(keys, key) - 1

    def scannerGetList(self, id, nbRows):
        with self._lock:
            s = self._scanner(id)
            results: list[TRowResult] = []
            if nbRows is None or nbRows <= 0:
                return results
            while len(results) < nbRows and s.pending:
                results.append(s.pending.pop(0))
            if s.done or len(results) >= nbRows:
                return results
            now = self._clock()
            for key in self._next_keys(s):
                s.cursor = key
                if s.while_prefix is not None and not key.startswith(s.while_prefix):
                    s.done = True  # WhileMatchFilter: the first non-matching row ends the scan
                    break
                if s.filters.prefixes and not s.filters.row_key_passes(key):
                    # PrefixFilter ends a scan once past the prefix; before it, skip the row.
                    p = s.filters.prefixes[0]
                    if (key > p if not s.reversed else key < p) and not key.startswith(p):
                        s.done = True
                        break
                    continue
                cells = s.filters.apply(self._read_row(s.table, key, s.spec, s.before, now=now))
                if not cells:
                    continue  # rows with no visible cells are not returned
                if s.batch:
                    # Scan.setBatch(n): a wide row comes back as several partial results.
                    chunks = [cells[i:i + s.batch] for i in range(0, len(cells), s.batch)]
                else:
                    chunks = [cells]
                for chunk in chunks:
                    result = self._row_result(key, chunk, s.sort_columns)
                    if len(results) < nbRows:
                        results.append(result)
                    else:
                        s.pending.append(result)
                if len(results) >= nbRows:
                    break
            else:
                s.done = True
            return results

    def scannerGet(self, id):
        return self.scannerGetList(id, 1)

    def scannerClose(self, id):
        with self._lock:
            self._scanner(id)
            del self._scanners[id]


# --------------------------------------------------------------------------------------------
# Server plumbing
# --------------------------------------------------------------------------------------------

def make_server(host: str, port: int, framed: bool = False, compact: bool = False,
                handler: Handler | None = None):
    """The thriftpy2 threaded server for a (new or given) Handler; not listening yet.

    Use `start_in_thread` (in-process) or `serve_forever` (foreground) rather than the server's
    own `serve()`: they bind without SO_REUSEPORT (so a second stand-in on a taken port fails
    instead of silently sharing it), run client threads as daemons and can be stopped.
    """
    handler = handler or Handler(server_name=host.encode(), server_port=port)
    server = thriftpy2.rpc.make_server(
        Hbase_thrift.Hbase,
        handler,
        host=host,
        port=port,
        proto_factory=TCompactProtocolFactory() if compact else TBinaryProtocolFactory(),
        trans_factory=TFramedTransportFactory() if framed else TBufferedTransportFactory(),
        client_timeout=None,  # the default drops connections idle for 3 s; HBase does not
    )
    server.handler = handler
    return server


def _listen(server) -> None:
    trans = server.trans
    family, _, _, _, addr = socket.getaddrinfo(trans.host, trans.port, type=socket.SOCK_STREAM,
                                               flags=socket.AI_PASSIVE)[0]
    trans.sock = socket.create_server(addr, family=family, backlog=trans.backlog, reuse_port=False)


def _accept_loop(server) -> None:
    clients: set = server.__dict__.setdefault("_standin_clients", set())

    def handle(client) -> None:
        try:
            server.handle(client)  # thriftpy2: process calls until the client disconnects
        finally:
            clients.discard(client)

    while not server.closed:
        try:
            client = server.trans.accept()
        except OSError:
            if server.closed:
                return
            logger.exception("accept failed")
            continue
        if server.closed:
            client.close()
            return
        clients.add(client)
        threading.Thread(target=handle, args=(client,), daemon=True, name="hbase-standin-client").start()


def start_in_thread(server) -> threading.Thread:
    """Listen now (so clients can connect as soon as this returns) and serve in a daemon thread."""
    _listen(server)
    thread = threading.Thread(target=_accept_loop, args=(server,), daemon=True, name="hbase-standin")
    thread.start()
    return thread


def stop_server(server, thread: threading.Thread | None = None, timeout: float = 5.0) -> None:
    """Stop accepting, close open client connections and the listening socket."""
    server.close()  # sets `closed`
    host, port = server.trans.sock.getsockname()[:2] if server.trans.sock else (None, None)
    if host is not None:
        try:  # wake the blocking accept()
            socket.create_connection((host, port), timeout=1).close()
        except OSError:
            pass
    if thread is not None:
        thread.join(timeout)
    for client in list(server.__dict__.get("_standin_clients", ())):
        try:
            client.close()
        except OSError:
            pass
    server.trans.close()


class _Shutdown(BaseException):
    """Raised from the signal handler; a BaseException so no `except Exception` swallows it."""


def serve_forever(server) -> None:
    """Serve in the foreground until SIGTERM / SIGINT."""

    def on_signal(signum, _frame):
        raise _Shutdown(signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    _listen(server)
    trans = server.trans
    print(f"HBase Thrift stand-in listening on {trans.host}:{trans.port}", flush=True)
    try:
        _accept_loop(server)
    except _Shutdown:
        logger.info("shutting down")
    finally:
        server.close()
        trans.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m devstack.hbase_standin",
        description="In-memory HBase Thrift 1 server stand-in (for dev and tests).",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9090)
    parser.add_argument("--framed", action="store_true", help="framed transport (default: buffered)")
    parser.add_argument("--compact", action="store_true", help="compact protocol (default: binary)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    server = make_server(args.host, args.port, framed=args.framed, compact=args.compact)
    try:
        serve_forever(server)
    except OSError as exc:
        print(f"HBase Thrift stand-in: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
