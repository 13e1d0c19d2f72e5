"""The stand-in's data: in-memory tables, rows, cells, versions, delete markers and TTL.

Kept apart from the Thrift calls so HBase's storage semantics (cell order, version limits,
"deletes mask puts", lazy TTL expiry) live in one place, and the handler only translates
Thrift arguments into these operations. Validation of table names and column family
descriptors is here too: it decides what a table may hold.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from devstack.hbase.idl import (
    FOREVER,
    Cell,
    ColumnDescriptor,
    HbaseIOError,
    IllegalArgument,
)

# Compression.Algorithm names (looked up lower-case by HBase, reported upper-case) and BloomType
# values (matched exactly, like `BloomType.valueOf`).
_COMPRESSIONS = {"none", "gz", "lzo", "snappy", "lz4", "bzip2", "zstd", "lzma", "brotli"}
_BLOOM_TYPES = {"NONE", "ROW", "ROWCOL", "ROWPREFIX_FIXED_LENGTH"}

# A column restriction as Get/Scan.addFamily + addColumn build it: family -> qualifiers, or
# family -> None for the whole family; None for no restriction at all.
ColumnSpec = dict[bytes, "set[bytes] | None"] | None


def to_bytes(value) -> bytes:
    if value is None:
        return b""
    if isinstance(value, str):
        return value.encode("utf-8")
    return bytes(value)


def parse_column(column: bytes) -> tuple[bytes, bytes | None]:
    """CellUtil.parseColumn: split at the first ':'; no ':' means the whole family.

    Note `b'fam:'` is family `fam` with the *empty* qualifier, not the whole family.
    """
    family, sep, qualifier = column.partition(b":")
    return family, (qualifier if sep else None)


def table_qualifier(name) -> bytes:
    """Validate like TableName.valueOf; `default:x` is `x`, other namespaces do not exist."""
    name = to_bytes(name)
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


@dataclass
class Family:
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


def family_from_descriptor(cd) -> Family:
    """ThriftUtilities.colDescFromThrift plus HBase's column family validation."""
    raw = to_bytes(cd.name)
    if not raw:
        raise IllegalArgument(message="column name is empty")
    family = parse_column(raw)[0]  # 'cf:' and even 'cf:x' name family 'cf'
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
    return Family(
        name=family,
        max_versions=max_versions,
        ttl_s=ttl if ttl > 0 else FOREVER,  # colDescFromThrift: a TTL <= 0 means forever
        compression=compression.upper(),
        in_memory=bool(cd.inMemory),
        bloom_filter_type=bloom,
        block_cache_enabled=bool(cd.blockCacheEnabled),
    )


@dataclass
class Row:
    # family -> qualifier -> versions as [(ts, value)], newest first, at most maxVersions.
    cells: dict[bytes, dict[bytes, list[tuple[int, bytes]]]] = field(default_factory=dict)
    # Delete markers ("tombstones"). In HBase a DeleteFamily / DeleteColumn marker at ts T hides
    # every version with ts <= T, including ones written *after* the delete, until a major
    # compaction purges the marker. We keep them so late writes with old timestamps stay hidden
    # (the stand-in does not compact, so its markers stay for the life of the process).
    family_markers: dict[bytes, int] = field(default_factory=dict)
    column_markers: dict[tuple[bytes, bytes], int] = field(default_factory=dict)

    def is_masked(self, family: bytes, qualifier: bytes, ts: int) -> bool:
        return ts <= max(
            self.family_markers.get(family, -1), self.column_markers.get((family, qualifier), -1)
        )

    def is_empty(self) -> bool:
        return not self.cells and not self.family_markers and not self.column_markers


@dataclass
class Table:
    name: bytes
    families: dict[bytes, Family]
    created_ms: int
    enabled: bool = True
    rows: dict[bytes, Row] = field(default_factory=dict)
    keys: list[bytes] = field(default_factory=list)  # sorted by raw bytes, like HBase row keys

    def family(self, family: bytes) -> Family:
        fam = self.families.get(family)
        if fam is None:
            raise HbaseIOError(
                message=f"NoSuchColumnFamilyException: column family {family.decode(errors='replace')!r} "
                f"does not exist in table {self.name.decode(errors='replace')}"
            )
        return fam

    def row_for_write(self, key: bytes) -> Row:
        row = self.rows.get(key)
        if row is None:
            row = self.rows[key] = Row()
            bisect.insort(self.keys, key)
        return row

    def drop_if_empty(self, key: bytes) -> None:
        row = self.rows.get(key)
        if row is not None and row.is_empty():
            del self.rows[key]
            i = bisect.bisect_left(self.keys, key)
            if i < len(self.keys) and self.keys[i] == key:
                del self.keys[i]

    def read_row(self, key: bytes, spec: ColumnSpec, before: int | None, now: int,
                 max_versions: int = 1) -> list[Cell]:
        """Visible cells of one row as (family, qualifier, ts, value), in HBase cell order
        (family, qualifier ascending; versions newest first). Purges expired cells on the way."""
        row = self.rows.get(key)
        if row is None:
            return []
        out = []
        for family in sorted(row.cells):
            if spec is not None and family not in spec:
                continue
            fam = self.families[family]
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
            self.drop_if_empty(key)
        return out

    def put(self, key: bytes, family: bytes, qualifier: bytes, ts: int, value: bytes) -> None:
        fam = self.families[family]
        row = self.row_for_write(key)
        if row.is_masked(family, qualifier, ts):
            # Hidden by an earlier delete marker with a newer-or-equal timestamp, as in HBase.
            self.drop_if_empty(key)
            return
        versions = row.cells.setdefault(family, {}).setdefault(qualifier, [])
        versions[:] = [(t, v) for t, v in versions if t != ts]  # same coordinates: last write wins
        versions.append((ts, value))
        versions.sort(key=lambda tv: tv[0], reverse=True)
        del versions[fam.max_versions:]  # the family keeps at most maxVersions versions

    def delete(self, key: bytes, family: bytes, qualifier: bytes | None, ts: int) -> None:
        """Delete.addFamily(f, ts) / addColumns(f, q, ts): every version with timestamp <= ts."""
        row = self.row_for_write(key)  # markers are kept even when the row has no cells yet
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
