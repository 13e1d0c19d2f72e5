"""The job library's HBase part, through happybase to the HBase Thrift server (stand-in or real)."""
from __future__ import annotations

import happybase
import pytest

from streamoffsets.errors import MalformedRecord, StoreUnreachable
from streamoffsets.stores.hbase import HBaseOffsetStore, parse_row_key, row_key
from streamoffsets.types import BatchOffsets, PipelineKey


@pytest.fixture
def store(stack, unique_name):
    table = unique_name("offsets").replace("-", "_")
    s = HBaseOffsetStore(stack.hbase_host, stack.hbase_port, table=table)
    assert s.ensure_table() is True
    yield s
    conn = happybase.Connection(stack.hbase_host, stack.hbase_port)
    conn.delete_table(table, disable=True)
    conn.close()
    s.close()


def raw_put(store: HBaseOffsetStore, key: str, cells: dict[str, str]) -> None:
    conn = happybase.Connection(store.host, store.port)
    conn.table(store.table_name).put(key.encode(), {f"offsets:{q}".encode(): v.encode() for q, v in cells.items()})
    conn.close()


def test_row_key_layout_is_clouderas():
    assert row_key("orders", "billing", 1_700_000_000_123) == "orders:billing:1700000000123"
    assert parse_row_key("orders:group:with:colons:1700000000123") == ("orders", "group:with:colons", "1700000000123")
    with pytest.raises(ValueError):
        parse_row_key("orders:1700000000123")
    with pytest.raises(ValueError):
        row_key("bad:topic", "g", 1)


def test_ensure_table_is_idempotent_and_sets_ttl(store):
    assert store.ensure_table() is False
    conn = happybase.Connection(store.host, store.port)
    families = conn.table(store.table_name).families()
    conn.close()
    assert families[b"offsets"]["time_to_live"] == 30 * 24 * 3600


def test_save_then_load_latest_round_trip(store):
    store.save_batch(BatchOffsets("orders", "billing", 1_700_000_000_000, {0: 10, 1: 20}))
    store.save_batch(BatchOffsets("orders", "billing", 1_700_000_005_000, {0: 15, 1: 26}))
    store.save_batch(BatchOffsets("orders", "other", 1_700_000_009_000, {0: 99, 1: 99}))
    latest = store.load_latest("orders", "billing", now_ms=1_800_000_000_000)
    assert latest == BatchOffsets("orders", "billing", 1_700_000_005_000, {0: 15, 1: 26})
    # The reversed scan starts at "now": a row stamped later is not yet visible to a job starting earlier.
    assert store.load_latest("orders", "billing", now_ms=1_700_000_004_999).offsets == {0: 10, 1: 20}
    assert store.load_latest("orders", "nobody") is None


def test_load_latest_ignores_groups_whose_id_extends_ours(store):
    store.save_batch(BatchOffsets("orders", "g", 1_700_000_000_000, {0: 1}))
    store.save_batch(BatchOffsets("orders", "g:0", 1_700_000_009_000, {0: 500}))
    assert store.load_latest("orders", "g", now_ms=1_800_000_000_000).offsets == {0: 1}


def test_values_are_stored_as_text(store):
    store.save_batch(BatchOffsets("orders", "billing", 1_700_000_000_000, {3: 1234}))
    conn = happybase.Connection(store.host, store.port)
    row = conn.table(store.table_name).row(b"orders:billing:1700000000000")
    conn.close()
    assert row == {b"offsets:3": b"1234"}


def test_history_in_a_time_range_oldest_first(store):
    for i in range(5):
        store.save_batch(BatchOffsets("orders", "billing", 1_700_000_000_000 + i * 1000, {0: i * 10}))
    page = store.history("orders", "billing", start_ms=1_700_000_001_000, end_ms=1_700_000_003_000)
    assert [b.offsets[0] for b in page.batches] == [10, 20, 30]
    assert page.problems == [] and page.truncated is False
    limited = store.history("orders", "billing", limit=2)
    assert [b.offsets[0] for b in limited.batches] == [0, 10] and limited.truncated


@pytest.mark.parametrize(
    "key, cells, problem",
    [
        ("orders:billing:1700000001000", {"0": "abc"}, "offset 'abc' is not a number"),
        ("orders:billing:1700000001000", {"x": "5"}, "qualifier 'x' is not a partition id"),
        ("orders:billing:1700000001000", {"0": "-4"}, "offset -4 is negative"),
        ("orders:billing:17000000x1000", {"0": "5"}, "is not epoch milliseconds"),
    ],
)
def test_malformed_rows_are_reported_by_name_and_skipped(store, key, cells, problem):
    store.save_batch(BatchOffsets("orders", "billing", 1_700_000_000_000, {0: 1}))
    raw_put(store, key, cells)
    store.save_batch(BatchOffsets("orders", "billing", 1_700_000_002_000, {0: 3}))
    page = store.history("orders", "billing")
    assert [b.offsets[0] for b in page.batches] == [1, 3]
    assert len(page.problems) == 1
    assert page.problems[0].key == key and problem in page.problems[0].problem
    assert store.table_name in page.problems[0].store


def test_malformed_newest_row_stops_a_job_with_its_name(store):
    raw_put(store, "orders:billing:1700000001000", {"0": "NaN"})
    with pytest.raises(MalformedRecord) as err:
        store.load_latest("orders", "billing", now_ms=1_800_000_000_000)
    assert "orders:billing:1700000001000" in str(err.value)


def test_list_pipelines_skip_scans_pairs_and_reports_bad_keys(store):
    for topic, group in [("a", "g1"), ("a", "g2"), ("b", "g1"), ("b", "g:x")]:
        for i in range(3):
            store.save_batch(BatchOffsets(topic, group, 1_700_000_000_000 + i, {0: i}))
    raw_put(store, "not-a-batch-key", {"0": "1"})
    pipelines, problems = store.list_pipelines()
    assert pipelines == [PipelineKey("a", "g1"), PipelineKey("a", "g2"), PipelineKey("b", "g1"), PipelineKey("b", "g:x")]
    assert [p.key for p in problems] == ["not-a-batch-key"]


def test_unreachable_server_is_a_typed_error():
    from devstack.components import free_port

    dead = HBaseOffsetStore("127.0.0.1", free_port(), timeout_ms=500)
    with pytest.raises(StoreUnreachable) as err:
        dead.load_latest("orders", "billing")
    assert "hbase://127.0.0.1" in str(err.value)


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=200, deadline=None)
@given(
    key=st.one_of(st.binary(max_size=40), st.from_regex(r"\A[a-z.]{1,5}:[^\n]{0,8}:[0-9x٣-]{0,22}\Z").map(str.encode)),
    cells=st.dictionaries(
        st.one_of(st.binary(max_size=12), st.from_regex(r"\Aoffsets:[0-9a-z-]{0,4}\Z").map(str.encode)),
        st.one_of(st.binary(max_size=12), st.integers(-10, 2**70).map(lambda i: str(i).encode())),
        max_size=4,
    ),
)
def test_fuzzed_rows_decode_or_raise_malformed_record_naming_the_store(key, cells):
    """Any row read from HBase either decodes to valid offsets or raises MalformedRecord."""
    store = HBaseOffsetStore("127.0.0.1", 1, table="fuzz")
    try:
        batch = store.decode_row(key, cells)
    except MalformedRecord as exc:
        assert exc.store == "hbase://127.0.0.1:1/fuzz" and exc.problem
        return
    assert batch.offsets and all(0 <= p < 2**31 and 0 <= o < 2**63 for p, o in batch.offsets.items())
    assert ":" not in batch.topic and 0 <= batch.batch_time_ms < 2**63
