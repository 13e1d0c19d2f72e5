"""Contract tests: HBase's documented semantics, driven through happybase over Thrift
(over 400 lines because the contract is one list, to be run as a whole against a real HBase as well).

They run against the local stand-in (`devstack.hbase`) by default and against a real
HBase Thrift server when `HBASE_THRIFT_URL=host:port` is set, so everything above the
"stand-in only" section relies on documented HBase / HBase Thrift 1 behaviour only. Each test
creates its own uniquely named tables and deletes them at the end.

Thrift 1 time ranges are `[0, timestamp)`: a read "at" timestamp T sees only cells with ts < T.
"""
from __future__ import annotations

import signal
import struct
import subprocess
import sys
import time
from collections import OrderedDict

import happybase
import pytest
from Hbase_thrift import AlreadyExists
from Hbase_thrift import IOError as HbaseIOError

from tests.paths import ROOT

FOREVER = 2**31 - 1  # HConstants.FOREVER, the TTL HBase reports for "never expires"


def now_ms() -> int:
    return int(time.time() * 1000)


@pytest.fixture
def conn(stack):
    c = happybase.Connection(stack.hbase_host, stack.hbase_port, timeout=5000)
    yield c
    c.close()


@pytest.fixture
def make_table(conn, unique_name):
    """Create a uniquely named table (families default to {'cf': {}}); dropped after the test."""
    created: list[str] = []

    def make(families: dict | None = None) -> happybase.Table:
        name = unique_name("contract").replace("-", "_")
        conn.create_table(name, families or {"cf": {}})
        created.append(name)
        return conn.table(name)

    yield make
    existing = set(conn.tables())
    for name in created:
        if name.encode() in existing:
            conn.delete_table(name, disable=True)


def keys(rows) -> list[bytes]:
    return [k for k, _ in rows]


# --- tables -------------------------------------------------------------------------------

def test_create_list_describe_and_delete_table(conn, make_table):
    table = make_table({"cf": {"max_versions": 2}, "meta": {}})
    name = table.name

    assert name in conn.tables()
    assert conn.is_table_enabled(name)
    families = table.families()
    assert set(families) == {b"cf", b"meta"}
    assert families[b"cf"]["max_versions"] == 2
    assert families[b"meta"]["time_to_live"] == FOREVER  # no TTL given: cells never expire
    regions = table.regions()
    assert regions and regions[0]["start_key"] == b""  # the first region starts at the first key

    with pytest.raises(AlreadyExists):
        conn.create_table(name, {"cf": {}})

    # HBase only deletes disabled tables.
    with pytest.raises(HbaseIOError):
        conn.delete_table(name)
    assert name in conn.tables()
    conn.delete_table(name, disable=True)
    assert name not in conn.tables()


def test_writing_to_an_unknown_family_is_an_error(make_table):
    table = make_table()
    with pytest.raises(HbaseIOError):
        table.put(b"r", {b"nope:q": b"v"})
    table.put(b"r", {b"cf:q": b"v"})  # the connection is still usable
    assert table.row(b"r") == {b"cf:q": b"v"}


# --- put / get ------------------------------------------------------------------------------

def test_put_get_round_trip_with_binary_keys_and_values(make_table):
    table = make_table({"cf": {}, "cg": {}})
    row = b"\x00bin\xffrow"
    data = {b"cf:a": b"\x00\x01\xff", b"cf:b": b"", b"cg:\xfe": b"x" * 10_000}
    table.put(row, data)

    assert table.row(row) == data
    assert table.row(b"missing") == {}
    assert table.row(row, columns=[b"cf"]) == {b"cf:a": b"\x00\x01\xff", b"cf:b": b""}
    assert table.row(row, columns=[b"cf:a", b"cg"]) == {b"cf:a": b"\x00\x01\xff", b"cg:\xfe": b"x" * 10_000}
    # rows() returns only rows that exist, in request order.
    table.put(b"other", {b"cf:a": b"1"})
    assert table.rows([b"other", b"missing", row], columns=[b"cf:a"]) == [
        (b"other", {b"cf:a": b"1"}),
        (row, {b"cf:a": b"\x00\x01\xff"}),
    ]


def test_put_overwrites_only_the_given_columns(make_table):
    table = make_table()
    table.put(b"r", {b"cf:a": b"1", b"cf:b": b"2"})
    table.put(b"r", {b"cf:a": b"3"})
    assert table.row(b"r") == {b"cf:a": b"3", b"cf:b": b"2"}


# --- scans ----------------------------------------------------------------------------------

SCAN_KEYS = [b"\x00", b"a", b"a\x00", b"ab", b"abc", b"b", b"b\x00", b"ba", b"c", b"\xff"]


@pytest.fixture
def scan_table(make_table):
    table = make_table()
    with table.batch() as b:
        for key in reversed(SCAN_KEYS):  # insertion order must not matter
            b.put(key, {b"cf:k": key})
    return table


def test_scan_returns_rows_sorted_by_raw_bytes(scan_table):
    rows = list(scan_table.scan())
    assert keys(rows) == sorted(SCAN_KEYS) == SCAN_KEYS
    assert all(data == {b"cf:k": key} for key, data in rows)


def test_scan_start_is_inclusive_and_stop_exclusive(scan_table):
    assert keys(scan_table.scan(row_start=b"a", row_stop=b"b")) == [b"a", b"a\x00", b"ab", b"abc"]
    # Bounds need not exist: the scan starts at the first row >= start, ends before stop.
    assert keys(scan_table.scan(row_start=b"aa", row_stop=b"b\x00")) == [b"ab", b"abc", b"b"]
    assert keys(scan_table.scan(row_start=b"ba")) == [b"ba", b"c", b"\xff"]
    assert keys(scan_table.scan(row_stop=b"a")) == [b"\x00"]
    assert keys(scan_table.scan(row_start=b"d", row_stop=b"e")) == []


def test_row_prefix_scan(scan_table):
    assert keys(scan_table.scan(row_prefix=b"a")) == [b"a", b"a\x00", b"ab", b"abc"]
    assert keys(scan_table.scan(row_prefix=b"ab")) == [b"ab", b"abc"]
    assert keys(scan_table.scan(row_prefix=b"b\x00")) == [b"b\x00"]
    assert keys(scan_table.scan(row_prefix=b"zz")) == []


def test_reversed_scan_bounds(scan_table):
    assert keys(scan_table.scan(reverse=True)) == list(reversed(SCAN_KEYS))
    # Reversed: row_start is the inclusive upper bound, row_stop the exclusive lower bound.
    assert keys(scan_table.scan(row_start=b"b", row_stop=b"a", reverse=True)) == [b"b", b"abc", b"ab", b"a\x00"]
    assert keys(scan_table.scan(row_start=b"bz", reverse=True)) == [b"ba", b"b\x00", b"b", b"abc", b"ab", b"a\x00", b"a", b"\x00"]
    assert keys(scan_table.scan(row_stop=b"c", reverse=True)) == [b"\xff"]
    assert keys(scan_table.scan(reverse=True, limit=3)) == [b"\xff", b"c", b"ba"]


def test_reversed_row_prefix_scan(make_table):
    table = make_table()
    for key in [b"aa9", b"ab1", b"ab2", b"ac1"]:
        table.put(key, {b"cf:k": key})
    assert keys(table.scan(row_prefix=b"ab", reverse=True)) == [b"ab2", b"ab1"]


def test_reversed_row_prefix_scan_passes_happybase_bounds_verbatim(make_table):
    """happybase turns a reversed row_prefix scan into start=bytes_increment(prefix) (inclusive)
    and stop=prefix (exclusive): a row equal to the incremented prefix is included and a row
    equal to the prefix itself is left out. Prefixes that never equal a whole key are safe."""
    table = make_table()
    for key in [b"ab", b"ab1", b"ac"]:
        table.put(key, {b"cf:k": key})
    assert keys(table.scan(row_prefix=b"ab", reverse=True)) == [b"ac", b"ab1"]


def test_limit_and_batch_size_across_many_rows(make_table):
    table = make_table()
    expected = [b"row-%04d" % i for i in range(250)]
    with table.batch(batch_size=40) as b:  # several mutateRows calls
        for key in expected:
            b.put(key, {b"cf:n": key[4:]})

    assert keys(table.scan(batch_size=7)) == expected  # many scannerGetList round trips
    assert keys(table.scan(batch_size=1000)) == expected
    assert keys(table.scan(limit=13)) == expected[:13]
    assert keys(table.scan(batch_size=5, limit=12)) == expected[:12]
    assert keys(table.scan(row_prefix=b"row-01", batch_size=3)) == expected[100:200]
    assert keys(table.scan(batch_size=9, reverse=True)) == expected[::-1]


def test_scan_batching_splits_wide_rows(make_table):
    table = make_table()
    row = {b"cf:%d" % i: b"v%d" % i for i in range(5)}
    table.put(b"wide", row)
    table.put(b"x-narrow", {b"cf:0": b"n"})

    parts = list(table.scan(scan_batching=2))
    assert keys(parts) == [b"wide", b"wide", b"wide", b"x-narrow"]
    assert [len(d) for _, d in parts] == [2, 2, 1, 1]
    merged = {}
    for key, data in parts[:3]:
        merged.update(data)
    assert merged == row


def test_scan_column_restriction_and_sorted_columns(make_table):
    table = make_table({"cf": {}, "cg": {}})
    table.put(b"r1", {b"cg:z": b"1", b"cf:b": b"2", b"cf:a": b"3"})
    table.put(b"r2", {b"cg:y": b"4"})

    # A row with no cell in the requested columns is not returned at all.
    assert list(table.scan(columns=[b"cf"])) == [(b"r1", {b"cf:a": b"3", b"cf:b": b"2"})]
    assert list(table.scan(columns=[b"cf:b", b"cg"])) == [
        (b"r1", {b"cf:b": b"2", b"cg:z": b"1"}),
        (b"r2", {b"cg:y": b"4"}),
    ]
    rows = list(table.scan(sorted_columns=True))
    assert rows[0] == (b"r1", OrderedDict([(b"cf:a", b"3"), (b"cf:b", b"2"), (b"cg:z", b"1")]))
    assert list(rows[0][1]) == [b"cf:a", b"cf:b", b"cg:z"]  # family, then qualifier order


def test_legacy_scanner_calls(stack, make_table):
    """happybase's compat='0.90' mode scans with scannerOpen / WithStop / Ts / WithStopTs."""
    table = make_table()
    for ts, key in ((100, b"a"), (200, b"b"), (300, b"c")):
        table.put(key, {b"cf:x": key}, timestamp=ts)
    legacy = happybase.Connection(stack.hbase_host, stack.hbase_port, timeout=5000, compat="0.90")
    try:
        t = legacy.table(table.name)
        assert list(t.scan()) == [(b"a", {b"cf:x": b"a"}), (b"b", {b"cf:x": b"b"}), (b"c", {b"cf:x": b"c"})]
        assert keys(t.scan(row_start=b"b")) == [b"b", b"c"]
        assert keys(t.scan(row_start=b"a", row_stop=b"c")) == [b"a", b"b"]
        assert keys(t.scan(row_prefix=b"b")) == [b"b"]
        assert keys(t.scan(timestamp=250)) == [b"a", b"b"]  # ts < 250
        assert keys(t.scan(row_stop=b"b", timestamp=250)) == [b"a"]
        assert keys(t.scan(batch_size=1, limit=2)) == [b"a", b"b"]
    finally:
        legacy.close()


# --- timestamps and versions ----------------------------------------------------------------

def test_cell_timestamps(make_table):
    table = make_table({"cf": {"max_versions": 5}})
    table.put(b"r", {b"cf:a": b"v100"}, timestamp=100)
    table.put(b"r", {b"cf:a": b"v200", b"cf:b": b"b200"}, timestamp=200)

    assert table.row(b"r", include_timestamp=True) == {b"cf:a": (b"v200", 200), b"cf:b": (b"b200", 200)}
    # A timestamp bounds reads to strictly older cells: [0, timestamp).
    assert table.row(b"r", timestamp=200, include_timestamp=True) == {b"cf:a": (b"v100", 100)}
    assert table.row(b"r", timestamp=201) == {b"cf:a": b"v200", b"cf:b": b"b200"}
    assert table.row(b"r", timestamp=100) == {}
    assert table.rows([b"r"], timestamp=150) == [(b"r", {b"cf:a": b"v100"})]
    assert list(table.scan(timestamp=150, include_timestamp=True)) == [(b"r", {b"cf:a": (b"v100", 100)})]
    assert list(table.scan(timestamp=50)) == []

    # Without an explicit timestamp a cell gets the server's current time in ms.
    before = now_ms()
    table.put(b"now", {b"cf:a": b"x"})
    (_value, ts), = table.row(b"now", include_timestamp=True).values()
    assert abs(ts - before) < 60_000  # same clock, allowing for skew with a remote server


def test_versions(make_table):
    table = make_table({"cf": {"max_versions": 2}, "all": {"max_versions": 10}})
    for ts in (10, 20, 30):
        table.put(b"r", {b"cf:a": b"v%d" % ts, b"all:a": b"v%d" % ts}, timestamp=ts)

    # Newest first, and a family keeps at most max_versions versions.
    assert table.cells(b"r", b"cf:a", include_timestamp=True) == [(b"v30", 30), (b"v20", 20)]
    assert table.cells(b"r", b"all:a") == [b"v30", b"v20", b"v10"]
    assert table.cells(b"r", b"all:a", versions=2) == [b"v30", b"v20"]
    assert table.cells(b"r", b"all:a", timestamp=30) == [b"v20", b"v10"]
    assert table.cells(b"r", b"all:a", versions=1, timestamp=30) == [b"v20"]
    assert table.cells(b"r", b"all:missing") == []
    # Writing the same timestamp again replaces that version.
    table.put(b"r", {b"all:a": b"again"}, timestamp=20)
    assert table.cells(b"r", b"all:a", include_timestamp=True) == [(b"v30", 30), (b"again", 20), (b"v10", 10)]


# --- deletes ----------------------------------------------------------------------------------

def test_delete_column_family_and_row(make_table):
    table = make_table({"cf": {}, "cg": {}})
    table.put(b"r1", {b"cf:a": b"1", b"cf:b": b"2", b"cg:c": b"3"})
    table.put(b"r2", {b"cf:a": b"4"})

    table.delete(b"r1", columns=[b"cf:a"])
    assert table.row(b"r1") == {b"cf:b": b"2", b"cg:c": b"3"}
    table.delete(b"r1", columns=[b"cf"])  # a bare family deletes all of its cells in the row
    assert table.row(b"r1") == {b"cg:c": b"3"}
    table.delete(b"r1")
    assert table.row(b"r1") == {}
    assert keys(table.scan()) == [b"r2"]  # deleted rows disappear from scans
    table.delete(b"never-written")  # deleting a missing row is not an error
    assert keys(table.scan()) == [b"r2"]


def test_delete_all_versions_and_timestamped_delete(make_table):
    table = make_table({"cf": {"max_versions": 5}})
    for ts in (100, 200, 300):
        table.put(b"r", {b"cf:a": b"v%d" % ts}, timestamp=ts)

    # A delete at timestamp T removes every version with ts <= T.
    table.delete(b"r", columns=[b"cf:a"], timestamp=200)
    assert table.cells(b"r", b"cf:a", include_timestamp=True) == [(b"v300", 300)]
    # ... and keeps masking later puts at ts <= T ("deletes mask puts").
    table.put(b"r", {b"cf:a": b"late"}, timestamp=150)
    assert table.cells(b"r", b"cf:a") == [b"v300"]
    # Without a timestamp, every version is deleted.
    table.delete(b"r", columns=[b"cf:a"])
    assert table.cells(b"r", b"cf:a") == []
    assert table.row(b"r") == {}


# --- batches ----------------------------------------------------------------------------------

def test_batch_puts_and_deletes(make_table):
    table = make_table()
    with table.batch(batch_size=10) as b:
        for i in range(25):
            b.put(b"k%02d" % i, {b"cf:i": b"%d" % i})
    assert keys(table.scan()) == [b"k%02d" % i for i in range(25)]

    with table.batch() as b:
        b.delete(b"k00")
        b.put(b"k99", {b"cf:i": b"99"})
        b.delete(b"k01", columns=[b"cf:i"])
    assert keys(table.scan(row_stop=b"k03")) == [b"k02"]
    assert table.row(b"k99") == {b"cf:i": b"99"}

    with table.batch(timestamp=1234) as b:
        b.put(b"ts", {b"cf:i": b"x"})
    assert table.row(b"ts", include_timestamp=True) == {b"cf:i": (b"x", 1234)}

    # A transactional batch leaving its block by an exception sends nothing.
    with pytest.raises(RuntimeError):
        with table.batch(transaction=True) as b:
            b.put(b"tx", {b"cf:i": b"1"})
            raise RuntimeError("abort")
    assert table.row(b"tx") == {}


# --- TTL ----------------------------------------------------------------------------------------

def test_time_to_live_hides_expired_cells(make_table):
    table = make_table({"short": {"time_to_live": 1}, "cf": {}})
    assert table.families()[b"short"]["time_to_live"] == 1

    old = now_ms() - 10_000  # written with a timestamp well past the 1 s TTL
    table.put(b"r", {b"short:old": b"gone", b"cf:old": b"kept"}, timestamp=old)
    # A cell stamped a minute ahead stays live however slowly the test runs.
    table.put(b"r", {b"short:new": b"fresh"}, timestamp=now_ms() + 60_000)
    table.put(b"only-old", {b"short:x": b"gone"}, timestamp=old)

    assert table.row(b"r") == {b"cf:old": b"kept", b"short:new": b"fresh"}
    assert table.cells(b"r", b"short:old") == []
    assert table.row(b"only-old") == {}
    assert list(table.scan(columns=[b"short"])) == [(b"r", {b"short:new": b"fresh"})]
    assert keys(table.scan()) == [b"r"]


# --- counters -----------------------------------------------------------------------------------

def test_counters(make_table):
    table = make_table()
    assert table.counter_inc(b"r", b"cf:n") == 1
    assert table.counter_inc(b"r", b"cf:n", 5) == 6
    assert table.counter_dec(b"r", b"cf:n", 2) == 4
    assert table.counter_get(b"r", b"cf:n") == 4
    # Counters are stored as 8-byte big-endian signed longs.
    assert table.row(b"r") == {b"cf:n": struct.pack(">q", 4)}
    # counter_set is a plain put; use it on a fresh cell (HBase stamps an increment with
    # max(now, previous ts + 1), so a put right after fast increments can land "older").
    table.counter_set(b"r", b"cf:m", -10)
    assert table.counter_inc(b"r", b"cf:m", 3) == -7
    assert table.counter_inc(b"other", b"cf:n", -2) == -2


def test_incrementing_a_non_counter_cell_fails(make_table):
    table = make_table()
    table.put(b"r", {b"cf:s": b"abc"})
    with pytest.raises(HbaseIOError):
        table.counter_inc(b"r", b"cf:s")
    assert table.row(b"r") == {b"cf:s": b"abc"}


# --- filters ------------------------------------------------------------------------------------

@pytest.fixture
def filter_table(make_table):
    table = make_table({"cf": {}, "cg": {}})
    table.put(b"a1", {b"cf:x": b"1", b"cf:y": b"2", b"cg:z": b"3"})
    table.put(b"a2", {b"cg:w": b"4", b"cg:z": b"5"})
    table.put(b"b1", {b"cf:y": b"6"})
    return table


def test_key_only_filter(filter_table):
    assert list(filter_table.scan(filter="KeyOnlyFilter()")) == [
        (b"a1", {b"cf:x": b"", b"cf:y": b"", b"cg:z": b""}),
        (b"a2", {b"cg:w": b"", b"cg:z": b""}),
        (b"b1", {b"cf:y": b""}),
    ]


def test_first_key_only_filter(filter_table):
    # Only the first cell (lowest family, then qualifier) of each row.
    assert list(filter_table.scan(filter="FirstKeyOnlyFilter()")) == [
        (b"a1", {b"cf:x": b"1"}),
        (b"a2", {b"cg:w": b"4"}),
        (b"b1", {b"cf:y": b"6"}),
    ]
    assert keys(filter_table.scan(filter="FirstKeyOnlyFilter() AND KeyOnlyFilter()")) == [b"a1", b"a2", b"b1"]


def test_prefix_filter(filter_table):
    assert keys(filter_table.scan(filter="PrefixFilter('a')")) == [b"a1", b"a2"]
    assert list(filter_table.scan(filter="PrefixFilter('a') AND KeyOnlyFilter()", columns=[b"cg:z"])) == [
        (b"a1", {b"cg:z": b""}),
        (b"a2", {b"cg:z": b""}),
    ]
    assert keys(filter_table.scan(filter="PrefixFilter('b')", reverse=True)) == [b"b1"]


# --- stand-in only --------------------------------------------------------------------------------

def test_standin_rejects_unsupported_filters_and_keeps_the_connection(stack, conn, make_table):
    if stack.real_hbase:
        pytest.skip("stand-in specific: a real HBase has no unsupported filters")
    table = make_table()
    table.put(b"r", {b"cf:a": b"1"})
    with pytest.raises(HbaseIOError) as exc:
        list(table.scan(filter="ValueFilter(=, 'binary:1')"))
    message = exc.value.message
    message = message.decode() if isinstance(message, bytes) else message
    assert "filter not supported by the stand-in" in message and "ValueFilter" in message
    # Same connection, still working.
    assert table.name in conn.tables()
    assert table.row(b"r") == {b"cf:a": b"1"}


def test_standin_unimplemented_call_is_an_ioerror(stack, conn, make_table):
    if stack.real_hbase:
        pytest.skip("stand-in specific")
    table = make_table()
    with pytest.raises(HbaseIOError):
        conn.client.getRegionInfo(b"x")
    assert table.name in conn.tables()


def test_standin_framed_compact_in_process():
    """make_server's transport/protocol switches, served in-process on a free port."""
    from devstack.components import free_port
    from devstack.hbase.server import make_server, start_in_thread, stop_server

    port = free_port()
    server = make_server("127.0.0.1", port, framed=True, compact=True)
    thread = start_in_thread(server)
    try:
        c = happybase.Connection("127.0.0.1", port, timeout=5000, transport="framed", protocol="compact")
        c.create_table("fc", {"cf": {}})
        c.table("fc").put(b"r", {b"cf:a": b"1"})
        assert list(c.table("fc").scan()) == [(b"r", {b"cf:a": b"1"})]
        c.close()
    finally:
        stop_server(server, thread)
    assert not thread.is_alive()


def test_standin_cli_exits_cleanly_on_sigterm():
    from devstack.components import free_port

    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "devstack.hbase", "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        cwd=ROOT,
    )
    try:
        assert proc.stdout.readline().strip() == f"HBase Thrift stand-in listening on 127.0.0.1:{port}"
        c = happybase.Connection("127.0.0.1", port, timeout=5000)
        assert c.tables() == []  # an open client connection must not block shutdown
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
        c.close()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
