"""Offsets in HBase, in the Cloudera layout.

Table `stream_kafka_offsets`, family `offsets` (30-day TTL), one row per batch:
row key `<TOPIC>:<GROUP>:<EPOCH_BATCHTIME_MS>`, qualifier = partition id, value = the next
offset to read, all as text. Topic names cannot contain ':' (Kafka allows [a-zA-Z0-9._-]),
so a key splits as: topic = before the first ':', batch time = after the last ':', group =
everything between (a group id may contain ':').
"""
from __future__ import annotations

import socket
import time
from contextlib import contextmanager
from typing import Iterator
from urllib.parse import parse_qs, urlparse

import happybase
from thriftpy2.transport import TTransportException

from streamoffsets.errors import MalformedRecord, OffsetStoreError, StoreUnreachable
from streamoffsets.stores.base import StoreBase
from streamoffsets.types import BatchOffsets, HistoryPage, PipelineKey, RowProblem

DEFAULT_TABLE = "stream_kafka_offsets"
DEFAULT_FAMILY = "offsets"
THIRTY_DAYS_S = 30 * 24 * 3600
# Kafka offsets are signed 64-bit, partition ids signed 32-bit.
MAX_OFFSET = 2**63 - 1
MAX_PARTITION = 2**31 - 1
# Rows fetched per Thrift round trip when scanning history.
SCAN_BATCH = 500


def parse_row_key(key: str) -> tuple[str, str, str]:
    """Split `TOPIC:GROUP:MS` into its three parts (MS still text); ValueError if it has fewer."""
    topic, sep1, rest = key.partition(":")
    group, sep2, ms = rest.rpartition(":")
    if not (sep1 and sep2) or not topic or not group:
        raise ValueError("row key is not <topic>:<group>:<batch time ms>")
    return topic, group, ms


def row_key(topic: str, group: str, batch_time_ms: int) -> str:
    if ":" in topic or not topic:
        raise ValueError(f"topic {topic!r} cannot be stored in an HBase row key (empty or contains ':')")
    if not group:
        raise ValueError("group id must not be empty")
    # Epoch milliseconds have 13 digits until the year 2286, so text order is time order.
    return f"{topic}:{group}:{batch_time_ms:013d}"


class HBaseOffsetStore(StoreBase):
    """Save and read per-batch offsets through the HBase Thrift 1 server (happybase)."""

    kind = "hbase"
    writable = True
    keeps_history = True

    def __init__(
        self,
        host: str,
        port: int = 9090,
        table: str = DEFAULT_TABLE,
        family: str = DEFAULT_FAMILY,
        timeout_ms: int = 5000,
        transport: str = "buffered",
        protocol: str = "binary",
    ):
        self.host, self.port, self.table_name, self.family = host, port, table, family
        self.timeout_ms, self.transport, self.protocol = timeout_ms, transport, protocol
        self.name = f"hbase://{host}:{port}/{table}"
        self._conn: happybase.Connection | None = None

    @classmethod
    def from_url(cls, url: str, timeout_ms: int = 5000) -> "HBaseOffsetStore":
        """`hbase://host:port/table[?transport=buffered|framed&protocol=binary|compact]` (table
        defaults to stream_kafka_offsets; transport and protocol as the Thrift server runs, by
        default buffered and binary, HBase's and happybase's defaults)."""
        parsed = urlparse(url)
        if parsed.scheme != "hbase" or not parsed.hostname:
            raise ValueError(f"not an HBase store URL (hbase://host:port/table): {url!r}")
        table = parsed.path.strip("/") or DEFAULT_TABLE
        query = {k: v[-1] for k, v in parse_qs(parsed.query, keep_blank_values=True).items()}
        options = {}
        for name, allowed in (("transport", ("buffered", "framed")), ("protocol", ("binary", "compact"))):
            value = query.pop(name, None)
            if value is not None:
                if value not in allowed:
                    raise ValueError(f"HBase store URL: {name}={value!r} is not one of {', '.join(allowed)}")
                options[name] = value
        if query:
            raise ValueError(f"HBase store URL: unknown option(s) {', '.join(sorted(query))} (transport, protocol)")
        return cls(parsed.hostname, parsed.port or 9090, table, timeout_ms=timeout_ms, **options)

    # --- connection -----------------------------------------------------------------------
    def _connection(self) -> happybase.Connection:
        if self._conn is None:
            self._conn = happybase.Connection(
                self.host, self.port, timeout=self.timeout_ms, autoconnect=False,
                transport=self.transport, protocol=self.protocol,
            )
            self._conn.open()
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            finally:
                self._conn = None

    @contextmanager
    def _calling(self, what: str):
        """Turn transport failures into StoreUnreachable; drop the broken connection."""
        try:
            yield
        except (TTransportException, socket.error, OSError) as exc:
            self.close()
            raise StoreUnreachable(self.name, what, f"cannot reach the HBase Thrift server: {exc}") from exc
        except OffsetStoreError:
            raise
        except Exception as exc:  # Thrift IOError/IllegalArgument structs from the server
            if type(exc).__name__ in {"IOError", "IllegalArgument", "AlreadyExists", "TApplicationException"}:
                message = getattr(exc, "message", None) or str(exc)
                raise OffsetStoreError(self.name, what, f"HBase refused the call: {message}") from exc
            raise

    def ping(self, timeout_s: float) -> None:
        """Ask the Thrift server for its table names on a connection of its own that waits at
        most `timeout_s`: a server that accepts connections but does not answer (frozen,
        overloaded) fails here in that time, not after the full timeout of every later call."""
        conn = happybase.Connection(self.host, self.port, timeout=int(timeout_s * 1000), autoconnect=False,
                                    transport=self.transport, protocol=self.protocol)
        try:
            with self._calling(f"ping (no answer within {timeout_s:g} s)"):
                conn.open()
                conn.tables()
        finally:
            conn.close()

    def _table(self) -> happybase.Table:
        return self._connection().table(self.table_name)

    # --- schema ------------------------------------------------------------------------------
    def ensure_table(self, ttl_seconds: int = THIRTY_DAYS_S) -> bool:
        """Create the offsets table if absent (family with TTL, one version). True if created."""
        with self._calling("create table"):
            conn = self._connection()
            names = {t.decode() if isinstance(t, bytes) else t for t in conn.tables()}
            if self.table_name in names:
                return False
            conn.create_table(self.table_name, {self.family: dict(max_versions=1, time_to_live=ttl_seconds)})
            return True

    # --- writes --------------------------------------------------------------------------------
    def save_batch(self, batch: BatchOffsets) -> None:
        """Write one row for a finished batch (call after the batch's output is stored)."""
        key = row_key(batch.topic, batch.group, batch.batch_time_ms)
        cells = {}
        for partition, offset in batch.offsets.items():
            if offset < 0:
                raise ValueError(f"offset for partition {partition} is negative: {offset}")
            cells[f"{self.family}:{int(partition)}".encode()] = str(int(offset)).encode()
        if not cells:
            raise ValueError(f"batch {key} has no partition offsets to save")
        with self._calling(key):
            self._table().put(key.encode(), cells)

    # --- reads ----------------------------------------------------------------------------------
    def decode_row(self, key: bytes, data: dict[bytes, bytes]) -> BatchOffsets:
        """Decode one row; MalformedRecord names the row and what is wrong with it."""
        try:
            text_key = key.decode("utf-8")
        except UnicodeDecodeError:
            raise MalformedRecord(self.name, repr(key), "row key is not UTF-8 text") from None
        try:
            topic, group, ms = parse_row_key(text_key)
        except ValueError as exc:
            raise MalformedRecord(self.name, text_key, str(exc)) from None
        # The length first: Python refuses int() of text past 4300 digits (a ValueError that
        # would stop the read of the whole store, not name this row).
        if not ms.isascii() or not ms.isdigit() or len(ms) > 19 or int(ms) > MAX_OFFSET:
            shown = repr(ms) if len(ms) <= 30 else f"{ms[:20]!r}… ({len(ms)} characters)"
            raise MalformedRecord(self.name, text_key, f"batch time {shown} is not epoch milliseconds")
        offsets: dict[int, int] = {}
        prefix = f"{self.family}:".encode()
        for column, value in data.items():
            if not column.startswith(prefix):
                continue
            qualifier = column[len(prefix):].decode("utf-8", "replace")
            if not (qualifier.isascii() and qualifier.isdigit()):
                raise MalformedRecord(self.name, text_key, f"qualifier {qualifier!r} is not a partition id")
            raw = value.decode("utf-8", "replace").strip()
            if not (raw.isascii() and raw.lstrip("-").isdigit()):
                raise MalformedRecord(
                    self.name, text_key, f"partition {qualifier}: offset {raw!r} is not a number"
                )
            if len(raw) > 20 or len(qualifier) > 10:
                raise MalformedRecord(self.name, text_key, f"partition {qualifier[:20]}: offset {raw[:30]} is out of Kafka's range")
            if int(raw) < 0:
                raise MalformedRecord(self.name, text_key, f"partition {qualifier}: offset {raw} is negative")
            if int(raw) > MAX_OFFSET or int(qualifier) > MAX_PARTITION:
                raise MalformedRecord(self.name, text_key, f"partition {qualifier}: offset {raw} is out of Kafka's range")
            offsets[int(qualifier)] = int(raw)
        if not offsets:
            raise MalformedRecord(self.name, text_key, f"row has no cells in family {self.family!r}")
        return BatchOffsets(topic, group, int(ms), offsets)

    def _scan(self, batch_size: int = SCAN_BATCH, **kwargs) -> Iterator[tuple[bytes, dict[bytes, bytes]]]:
        with self._calling(f"scan {kwargs.get('row_start', b'')!r}"):
            yield from self._table().scan(columns=[self.family.encode()], batch_size=batch_size, **kwargs)

    def load_latest(self, topic: str, group: str, now_ms: int | None = None) -> BatchOffsets | None:
        """The newest batch row for (topic, group) by a reversed scan from `now` down to 0.

        Rows of other groups whose id starts with `group:` fall in the same key range; they
        are skipped. A malformed newest row raises MalformedRecord: a job must not guess
        where to start.
        """
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        prefix = f"{topic}:{group}:"
        upper = row_key(topic, group, now_ms).encode()
        for key, data in self._scan(row_start=upper, row_stop=prefix.encode(), reverse=True):
            rest = key.decode("utf-8", "replace")[len(prefix):]
            if ":" in rest:
                continue  # belongs to a group named "<group>:..."
            return self.decode_row(key, data)
        return None

    def history(
        self, topic: str, group: str, start_ms: int = 0, end_ms: int | None = None, limit: int | None = None
    ) -> HistoryPage:
        """Batches with start_ms <= batch time <= end_ms, oldest first; malformed rows reported."""
        prefix = f"{topic}:{group}:"
        stop = (row_key(topic, group, end_ms + 1) if end_ms is not None else prefix + ";").encode()
        page = HistoryPage()
        for key, data in self._scan(row_start=row_key(topic, group, start_ms).encode(), row_stop=stop):
            rest = key.decode("utf-8", "replace")[len(prefix):]
            if ":" in rest:
                continue
            if limit is not None and len(page.batches) + len(page.problems) >= limit:
                page.truncated = True
                break
            try:
                page.batches.append(self.decode_row(key, data))
            except MalformedRecord as exc:
                page.problems.append(RowProblem(self.name, exc.key, exc.problem))
        return page

    def batch_times(self, topic: str, group: str, start_ms: int, end_ms: int) -> list[int]:
        """The batch times of (topic, group) rows in [start_ms, end_ms], by a keys-only scan (one
        empty cell per row): how the collectors look for rows that arrived late, cheaply."""
        prefix = f"{topic}:{group}:"
        times = []
        for key, _ in self._scan(row_start=row_key(topic, group, max(0, start_ms)).encode(),
                                 row_stop=row_key(topic, group, end_ms + 1).encode(),
                                 filter=b"FirstKeyOnlyFilter() AND KeyOnlyFilter()"):
            rest = key.decode("utf-8", "replace")[len(prefix):]
            if rest.isascii() and rest.isdigit():  # not a sub-group's row, not a malformed time
                times.append(int(rest))
        return times

    def batches_at(self, topic: str, group: str, times: list[int]) -> HistoryPage:
        """The rows of (topic, group) at these batch times (one multi-get), oldest first."""
        page = HistoryPage()
        if not times:
            return page
        keys = [row_key(topic, group, ms).encode() for ms in sorted(times)]
        with self._calling(f"get {len(keys)} rows of {topic}:{group}"):
            rows = self._table().rows(keys, columns=[self.family.encode()])
        for key, data in rows:
            try:
                page.batches.append(self.decode_row(key, data))
            except MalformedRecord as exc:
                page.problems.append(RowProblem(self.name, exc.key, exc.problem))
        return page

    def record_key(self, topic: str, group: str, batch_time_ms: int) -> str:
        """The row key a batch is stored under (named in problems, so an operator can find it)."""
        return row_key(topic, group, batch_time_ms)

    def list_pipelines(self, max_pipelines: int = 100_000) -> tuple[list[PipelineKey], list[RowProblem]]:
        """The (topic, group) pairs present, by a skip scan: one short scan per pair, not per row.

        After finding a pair, the scan jumps past `TOPIC:GROUP:<digits>` (':' sorts right after
        '9'). Rows whose key has not three parts are reported as problems; a run of them is read
        in one streaming scan of keys only (not one scan per bad row).
        """
        found: list[PipelineKey] = []
        problems: list[RowProblem] = []
        cursor: bytes | None = b""
        while cursor is not None and len(found) < max_pipelines:
            next_cursor = None
            # One row per round trip: the rows after a pipeline's first are its own history (a row
            # per batch), then the next pipelines', none of which the skip uses. With SCAN_BATCH
            # rows per round trip each skip made the server read and send up to 500 keys: listing
            # N pipelines cost N x 500 keys (issue #16: 500 pipelines in 29 s on the stand-in).
            for key, _ in self._scan(row_start=cursor, filter=b"FirstKeyOnlyFilter() AND KeyOnlyFilter()",
                                     batch_size=1):
                text = key.decode("utf-8", "replace")
                try:
                    topic, group, ms = parse_row_key(text)
                    if not ms.isdigit():
                        raise ValueError(f"batch time {ms!r} is not epoch milliseconds")
                except ValueError as exc:
                    problems.append(RowProblem(self.name, text, str(exc)))
                    continue  # the same scanner goes on to the next row
                found.append(PipelineKey(topic, group))
                next_cursor = f"{topic}:{group}::".encode()
                break  # jump over the rest of this pipeline's rows
            cursor = next_cursor
        return found, problems
