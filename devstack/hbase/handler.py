"""The Hbase Thrift 1 calls the stand-in answers: those that are used, and only those.

Used means: made by happybase for the happybase API our code calls (streamoffsets, collectors,
bench, devstack, tests), or by `tests/integration/test_hbase_standin_contract.py`, which pins what the
stand-in must share with a real HBase. Per happybase call:

* Connection.tables / create_table / delete_table(disable=True) / is_table_enabled:
  getTableNames, createTable, disableTable + deleteTable, isTableEnabled;
* Table.families / regions: getColumnDescriptors, getTableRegions;
* Table.row / rows / cells: getRowWithColumns[Ts], getRowsWithColumns[Ts], getVer[Ts];
* Table.put / delete / batch / counter_set: mutateRows[Ts]; counter_inc/dec/get: atomicIncrement;
* Table.scan: scannerOpenWithScan (compat='0.90': scannerOpen, scannerOpenTs,
  scannerOpenWithStop, scannerOpenWithStopTs), scannerGetList, scannerClose.

Every other call of the IDL answers IOError "... not implemented by the HBase Thrift stand-in"
(see thrift_safe). Each method mirrors HBase's `ThriftHBaseServiceHandler` and says where that
matters.
"""
from __future__ import annotations

import hashlib
import struct
import threading
from collections.abc import Callable, Iterable

from devstack.hbase.filters import Filters, UnsupportedFilter, parse_filter_string
from devstack.hbase.idl import (
    LATEST_TIMESTAMP,
    MAX_ROW_LENGTH,
    AlreadyExists,
    HbaseIOError,
    IllegalArgument,
    TCell,
    TRegionInfo,
    TRowResult,
    now_ms,
    row_result,
)
from devstack.hbase.scanners import Scanner, Scanners
from devstack.hbase.table_store import (
    ColumnSpec,
    Family,
    Table,
    family_from_descriptor,
    parse_column,
    table_qualifier,
    to_bytes,
)
from devstack.hbase.thrift_safe import thrift_safe

_pack_long = struct.Struct(">q").pack
_unpack_long = struct.Struct(">q").unpack


def _time_bound(timestamp) -> int | None:
    """A read's exclusive upper time bound; None (no bound) for no or the latest timestamp."""
    return None if timestamp in (None, LATEST_TIMESTAMP) else timestamp


def _check_row_key(key: bytes) -> None:
    if not key:
        raise IllegalArgument(message="Row length is 0")
    if len(key) > MAX_ROW_LENGTH:
        raise IllegalArgument(message=f"Row length {len(key)} is > {MAX_ROW_LENGTH}")


@thrift_safe
class Handler:
    """In-memory state and the Hbase Thrift 1 calls; thread-safe (one re-entrant lock)."""

    def __init__(self, clock: Callable[[], int] = now_ms, server_name: bytes = b"localhost",
                 server_port: int = 16020):
        self._clock = clock  # current time in ms; injectable for tests
        self._lock = threading.RLock()
        self._tables: dict[bytes, Table] = {}
        self._scanners = Scanners()
        self._server_name = server_name
        self._server_port = server_port

    # ---------------------------------------------------------------- helpers ---------------

    def _existing_table(self, name) -> Table:
        key = table_qualifier(name)
        table = self._tables.get(key)
        if table is None:
            raise HbaseIOError(message=f"TableNotFoundException: {key.decode(errors='replace')}")
        return table

    def _enabled_table(self, name) -> Table:
        # Reads and writes to a disabled table fail in HBase (its regions are offline).
        table = self._existing_table(name)
        if not table.enabled:
            raise HbaseIOError(message=f"TableNotEnabledException: {table.name.decode(errors='replace')} is disabled")
        return table

    @staticmethod
    def _column_spec(table: Table, columns: Iterable[bytes] | None) -> ColumnSpec:
        """Get/Scan.addFamily + addColumn, in order: addColumn after addFamily narrows the family
        to that column, addFamily after addColumn widens it again (HBase's familyMap rules)."""
        if not columns:
            return None
        spec: dict[bytes, set[bytes] | None] = {}
        for column in columns:
            family, qualifier = parse_column(to_bytes(column))
            table.family(family)
            if qualifier is None:
                spec[family] = None
            else:
                if spec.get(family) is None:
                    spec[family] = set()
                spec[family].add(qualifier)
        return spec

    def _get_rows(self, table_name, rows, columns, timestamp) -> list[TRowResult]:
        with self._lock:
            table = self._enabled_table(table_name)
            spec = self._column_spec(table, columns)
            before = _time_bound(timestamp)
            now = self._clock()
            results = []
            for key in rows:
                key = to_bytes(key)
                if not key:
                    raise HbaseIOError(message="Row length is 0")
                cells = table.read_row(key, spec, before, now)
                if cells:  # rowResultFromHBase skips empty results
                    results.append(row_result(key, cells))
            return results

    def _get_cells(self, table_name, row, column, timestamp, versions) -> list[TCell]:
        if versions <= 0:
            raise HbaseIOError(message="maxVersions must be positive")
        with self._lock:
            table = self._enabled_table(table_name)
            key = to_bytes(row)
            if not key:
                raise HbaseIOError(message="Row length is 0")
            spec = self._column_spec(table, [column])
            cells = table.read_row(key, spec, _time_bound(timestamp), self._clock(), versions)
            return [TCell(value=v, timestamp=ts) for _f, _q, ts, v in cells]

    @staticmethod
    def _write_ts(timestamp: int, now: int) -> int:
        # A Put/Delete without explicit timestamp (LATEST_TIMESTAMP) gets the server's clock.
        if timestamp == LATEST_TIMESTAMP:
            return now
        if timestamp < 0:
            raise IllegalArgument(message=f"Timestamp cannot be negative. ts={timestamp}")
        return timestamp

    @staticmethod
    def _plan_mutations(table: Table, key: bytes, mutations):
        """Split Thrift Mutations into (deletes, puts) with validated families."""
        _check_row_key(key)
        deletes, puts = [], []
        for m in mutations or []:
            family, qualifier = parse_column(to_bytes(m.column))
            table.family(family)
            if m.isDelete:
                deletes.append((family, qualifier))
            elif qualifier is None:
                # HBase: "Delete is the only mutation supported over the whole column family";
                # mutateRowsTs rejects a put to a bare family.
                raise IllegalArgument(message=f"Invalid famAndQf provided: {to_bytes(m.column)!r}")
            else:
                puts.append((family, qualifier, to_bytes(m.value)))
        return deletes, puts

    # ---------------------------------------------------------------- admin ------------------

    def getTableNames(self):
        with self._lock:
            return sorted(self._tables)

    def createTable(self, tableName, columnFamilies):
        name = table_qualifier(tableName)
        with self._lock:
            # HBase checks for an existing table before it looks at the descriptors.
            if name in self._tables:
                raise AlreadyExists(message="table name already in use")
            families: dict[bytes, Family] = {}
            for cd in columnFamilies or []:
                fam = family_from_descriptor(cd)
                if fam.name in families:
                    raise IllegalArgument(message=f"Family {fam.name!r} already exists so cannot be added")
                families[fam.name] = fam
            if not families:
                raise HbaseIOError(message="DoNotRetryIOException: Table should have at least one column family.")
            self._tables[name] = Table(name=name, families=families, created_ms=self._clock())

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
            name = table_qualifier(tableName)
            table = self._tables.get(name)
            if table is None:
                raise HbaseIOError(message="table does not exist")
            if table.enabled:
                # HBase only deletes disabled tables (happybase's delete_table(disable=True) disables first).
                raise HbaseIOError(message=f"TableNotDisabledException: {name.decode(errors='replace')}")
            del self._tables[name]
            self._scanners.drop_table(table)

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

    def getVer(self, tableName, row, column, numVersions, attributes):
        return self._get_cells(tableName, row, column, None, numVersions)

    def getVerTs(self, tableName, row, column, timestamp, numVersions, attributes):
        return self._get_cells(tableName, row, column, timestamp, numVersions)

    def getRowWithColumns(self, tableName, row, columns, attributes):
        return self._get_rows(tableName, [row], columns, None)

    def getRowWithColumnsTs(self, tableName, row, columns, timestamp, attributes):
        return self._get_rows(tableName, [row], columns, timestamp)

    def getRowsWithColumns(self, tableName, rows, columns, attributes):
        return self._get_rows(tableName, rows or [], columns, None)

    def getRowsWithColumnsTs(self, tableName, rows, columns, timestamp, attributes):
        return self._get_rows(tableName, rows or [], columns, timestamp)

    # ---------------------------------------------------------------- writes -----------------

    def mutateRows(self, tableName, rowBatches, attributes):
        self.mutateRowsTs(tableName, rowBatches, LATEST_TIMESTAMP, attributes)

    def mutateRowsTs(self, tableName, rowBatches, timestamp, attributes):
        with self._lock:
            table = self._enabled_table(tableName)
            # Validate everything first so a bad mutation leaves the table untouched.
            plans = []
            for batch in rowBatches or []:
                key = to_bytes(batch.row)
                plans.append((key, *self._plan_mutations(table, key, batch.mutations)))
            ts = self._write_ts(timestamp, self._clock())
            # HBase's mutateRowsTs sends all Puts, then all Deletes: a delete in the same batch
            # (same timestamp or later clock) hides the put - happybase's Batch uses this call.
            for key, _deletes, puts in plans:
                for family, qualifier, value in puts:
                    table.put(key, family, qualifier, ts, value)
            for key, deletes, _puts in plans:
                for family, qualifier in deletes:
                    table.delete(key, family, qualifier, ts)
            for key, _d, _p in plans:
                table.drop_if_empty(key)

    def atomicIncrement(self, tableName, row, column, value):
        with self._lock:
            table = self._enabled_table(tableName)
            key = to_bytes(row)
            _check_row_key(key)
            family, qualifier = parse_column(to_bytes(column))
            qualifier = qualifier or b""  # a bare family increments the empty qualifier
            table.family(family)
            now = self._clock()
            current = table.read_row(key, {family: {qualifier}}, None, now)
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
            table.put(key, family, qualifier, new_ts, _pack_long(new))
            return new

    # ---------------------------------------------------------------- scanners ---------------

    def _open_scanner(self, tableName, start, stop, columns, timestamp=None, filter_string=None,
                      batch=None, sort_columns=False, reversed_=False) -> int:
        with self._lock:
            table = self._enabled_table(tableName)
            spec = self._column_spec(table, columns)
            filters = Filters()
            if filter_string:
                try:
                    filters = parse_filter_string(to_bytes(filter_string))
                except UnsupportedFilter as exc:
                    text = to_bytes(filter_string).decode("utf-8", "replace")
                    raise HbaseIOError(
                        message=f"filter not supported by the stand-in: {text} ({exc})"
                    ) from exc
            if batch is not None and batch <= 0:
                batch = None  # Scan.setBatch(<=0) means "whole rows"
            return self._scanners.add(Scanner(
                table=table, spec=spec, start=to_bytes(start), stop=to_bytes(stop),
                before=_time_bound(timestamp), reversed=bool(reversed_), filters=filters,
                batch=batch, sort_columns=bool(sort_columns),
            ))

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

    # happybase's compat='0.90' mode scans with these instead of scannerOpenWithScan.

    def scannerOpen(self, tableName, startRow, columns, attributes):
        return self._open_scanner(tableName, startRow, b"", columns)

    def scannerOpenWithStop(self, tableName, startRow, stopRow, columns, attributes):
        return self._open_scanner(tableName, startRow, stopRow, columns)

    def scannerOpenTs(self, tableName, startRow, columns, timestamp, attributes):
        return self._open_scanner(tableName, startRow, b"", columns, timestamp=timestamp)

    def scannerOpenWithStopTs(self, tableName, startRow, stopRow, columns, timestamp, attributes):
        return self._open_scanner(tableName, startRow, stopRow, columns, timestamp=timestamp)

    def scannerGetList(self, id, nbRows):
        with self._lock:
            return self._scanners.get(id).next_results(nbRows, self._clock)

    def scannerClose(self, id):
        with self._lock:
            self._scanners.close(id)
