"""The Hbase.thrift IDL as thriftpy2 loads it, the structs the stand-in sends, HBase constants.

One place for them because every other module of the stand-in speaks in these types: the
exceptions a call may raise, the structs it answers with, and the HBase constants (from
`HConstants`) whose values the Thrift API exposes.
"""
from __future__ import annotations

import os
import time

import happybase
import thriftpy2

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

# A cell as the table store hands it out: (family, qualifier, timestamp, value).
Cell = tuple[bytes, bytes, int, bytes]


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def row_result(key: bytes, cells: list[Cell], sort_columns: bool = False) -> TRowResult:
    # ThriftUtilities.rowResultFromHBase: either the `columns` map or `sortedColumns` list.
    if sort_columns:
        return TRowResult(row=key, sortedColumns=[
            TColumn(columnName=f + b":" + q, cell=TCell(value=v, timestamp=ts))
            for f, q, ts, v in cells
        ])
    return TRowResult(row=key, columns={
        f + b":" + q: TCell(value=v, timestamp=ts) for f, q, ts, v in cells
    })
