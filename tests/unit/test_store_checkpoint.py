"""The Structured Streaming checkpoint reader (streamoffsets/stores/checkpoint.py).

Hand-built checkpoint directories cover the format cases; tests/integration/test_store_checkpoint_spark.py
runs a real query with our Kafka source and checks the reader against what the query did, which is
what keeps the hand-built files honest about Spark's format.
"""
from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from streamoffsets.errors import MalformedRecord, ReadOnlyStore, StoreUnreachable
from streamoffsets.stores.base import OffsetStore
from streamoffsets.stores.checkpoint import CheckpointStore
from streamoffsets.stores.registry import open_store
from streamoffsets.types import BatchOffsets, PipelineKey

T0 = 1_700_000_000_000


def meta(ts: int) -> str:
    # As Spark 4.3 writes it (conf shortened).
    return json.dumps(
        {"batchWatermarkMs": 0, "batchTimestampMs": ts, "conf": {"spark.sql.shuffle.partitions": "2"}},
        separators=(",", ":"),
    )


def kafka(topic: str, offsets: dict[int, int]) -> str:
    # Spark's Kafka source writes compact JSON; ours writes json.dumps defaults. Both must read.
    return json.dumps({topic: {str(p): o for p, o in offsets.items()}})


def write_batch(ckpt, batch_id: int, sources: list[str], ts: int, committed: bool = True, version: str = "v1"):
    """offsets/N (and commits/N) the way Spark's HDFSMetadataLog leaves them, .crc files included."""
    for sub in ("offsets", "commits"):
        (ckpt / sub).mkdir(parents=True, exist_ok=True)
    (ckpt / "metadata").write_text('{"id":"5f0e6b5e-7d0a-4f7c-9b9e-0c3b1d7c6a11"}')
    (ckpt / "offsets" / str(batch_id)).write_text("\n".join([version, meta(ts), *sources]))
    (ckpt / "offsets" / f".{batch_id}.crc").write_bytes(b"crc\x00\x01")
    if committed:
        (ckpt / "commits" / str(batch_id)).write_text('v1\n{"nextBatchWatermarkMs":0}')
        (ckpt / "commits" / f".{batch_id}.crc").write_bytes(b"crc\x00\x02")


@pytest.fixture
def ckpt(tmp_path):
    """One checkpoint directory, `orders-job`, of a query reading topic `orders`: batches 0-2
    committed, batch 3 planned but not committed (the query stopped during it)."""
    path = tmp_path / "ckpts" / "orders-job"
    write_batch(path, 0, [kafka("orders", {0: 4, 1: 4})], T0)
    write_batch(path, 1, [kafka("orders", {0: 8, 1: 8})], T0 + 1000)
    write_batch(path, 2, [kafka("orders", {0: 10, 1: 9})], T0 + 2000)
    write_batch(path, 3, [kafka("orders", {0: 14, 1: 13})], T0 + 3000, committed=False)
    return path


def test_is_a_read_only_offset_store_opened_from_its_url(ckpt):
    s = open_store(f"checkpoint://{ckpt}")
    assert isinstance(s, CheckpointStore) and isinstance(s, OffsetStore)
    assert (s.kind, s.writable, s.keeps_history, s.name) == ("checkpoint", False, True, f"checkpoint://{ckpt}")
    with pytest.raises(ReadOnlyStore, match="written only by its query"):
        s.save_batch(BatchOffsets("orders", "orders-job", T0, {0: 1}))
    assert str(CheckpointStore.from_url("checkpoint:///ck/my%20query").path) == "/ck/my query"
    for bad in ["checkpoint://host/x", "checkpoint:rel", "file:///x"]:
        with pytest.raises(ValueError, match="checkpoint:///"):
            CheckpointStore.from_url(bad)


@pytest.mark.parametrize("where", ["single", "root"])
def test_history_has_every_batch_oldest_first_with_id_time_and_commit_state(ckpt, where):
    store = CheckpointStore(ckpt if where == "single" else ckpt.parent)
    page = store.history("orders", "orders-job")
    assert page.problems == [] and not page.truncated
    assert page.batches == [
        BatchOffsets("orders", "orders-job", T0, {0: 4, 1: 4}, batch_id=0, committed=True),
        BatchOffsets("orders", "orders-job", T0 + 1000, {0: 8, 1: 8}, batch_id=1, committed=True),
        BatchOffsets("orders", "orders-job", T0 + 2000, {0: 10, 1: 9}, batch_id=2, committed=True),
        BatchOffsets("orders", "orders-job", T0 + 3000, {0: 14, 1: 13}, batch_id=3, committed=False),
    ]
    assert store.list_pipelines() == ([PipelineKey("orders", "orders-job")], [])


def test_load_latest_is_the_newest_committed_batch_not_the_planned_one(ckpt):
    # Spark re-runs planned batch 3 on restart, from batch 2's end: that is the position.
    latest = CheckpointStore(ckpt).load_latest("orders", "orders-job")
    assert latest == BatchOffsets("orders", "orders-job", T0 + 2000, {0: 10, 1: 9}, batch_id=2, committed=True)
    (ckpt / "commits" / "3").write_text('v1\n{"nextBatchWatermarkMs":0}')
    assert CheckpointStore(ckpt).load_latest("orders", "orders-job").batch_id == 3


def test_unknown_pipelines_have_nothing(ckpt, tmp_path):
    store = CheckpointStore(ckpt)
    assert store.load_latest("other-topic", "orders-job") is None
    assert store.load_latest("orders", "another-job") is None
    assert store.history("orders", "another-job").batches == []
    write_batch(tmp_path / "fresh", 0, [kafka("orders", {0: 1})], T0, committed=False)
    assert CheckpointStore(tmp_path / "fresh").load_latest("orders", "fresh") is None  # nothing committed yet
    missing = CheckpointStore(tmp_path / "nowhere")
    assert missing.load_latest("orders", "nowhere") is None
    # Listing a path that is not there fails: an empty success would read as a healthy store.
    with pytest.raises(StoreUnreachable, match="does not exist"):
        missing.list_pipelines()


def test_group_names_that_are_paths_are_refused(ckpt):
    for group in ["..", "../orders-job", "a/b", ""]:
        with pytest.raises(ValueError, match="path component"):
            CheckpointStore(ckpt.parent).history("orders", group)


def test_history_window_and_limit(ckpt):
    store = CheckpointStore(ckpt)
    assert [b.batch_id for b in store.history("orders", "orders-job", start_ms=T0 + 1000, end_ms=T0 + 2000).batches] == [1, 2]
    page = store.history("orders", "orders-job", limit=2)
    assert [b.batch_id for b in page.batches] == [0, 1] and page.truncated
    page = store.history("orders", "orders-job", start_ms=T0 + 2000, limit=2)
    assert [b.batch_id for b in page.batches] == [2, 3] and not page.truncated


def test_a_root_of_checkpoints_lists_one_pipeline_per_topic_and_directory(tmp_path):
    root = tmp_path / "ckpts"
    write_batch(root / "job-a", 0, [kafka("orders", {0: 1})], T0)
    # One source reading two topics (subscribePattern), and a second source with no offset yet.
    write_batch(root / "job-b", 0, ['{"clicks":{"0":5},"views":{"0":7,"1":2}}', "-"], T0)
    write_batch(root / "job-b", 1, ['{"clicks":{"0":6},"views":{"0":7,"1":3}}', kafka("orders", {0: 2})], T0 + 1)
    (root / "not-started").mkdir()  # a query that never planned a batch: no offsets/ yet
    (root / "not-started" / "metadata").write_text("{}")
    (root / "notes.txt").write_text("not a checkpoint")

    store = CheckpointStore(root)
    found, problems = store.list_pipelines()
    assert problems == []
    assert found == [
        PipelineKey("clicks", "job-b"), PipelineKey("orders", "job-a"),
        PipelineKey("orders", "job-b"), PipelineKey("views", "job-b"),
    ]
    assert [b.offsets for b in store.history("views", "job-b").batches] == [{0: 7, 1: 2}, {0: 7, 1: 3}]
    assert [b.batch_id for b in store.history("orders", "job-b").batches] == [1]  # batch 0 had no offset for it


def test_the_v2_offsets_log_with_named_sources(tmp_path):
    # Spark 4.2+ with source evolution: `<source name>:<offset>` lines.
    ckpt = tmp_path / "named"
    write_batch(ckpt, 0, [f"events:{kafka('orders', {0: 3})}", "rates:-"], T0, version="v2")
    assert CheckpointStore(ckpt).load_latest("orders", "named").offsets == {0: 3}


def test_spark_temp_and_checksum_files_are_ignored_but_odd_names_reported(ckpt):
    (ckpt / "offsets" / ".4.9d1c2e1a-6f2b-4b53-9a5e-0b7f.tmp").write_text("v1\n{")  # Spark writing batch 4
    (ckpt / "offsets" / "4.tmp").write_text("v1\n{")
    (ckpt / "offsets" / "notes").write_text("hello")
    (ckpt / "offsets" / "007").write_text("v1")

    store = CheckpointStore(ckpt)
    page = store.history("orders", "orders-job")
    assert [b.batch_id for b in page.batches] == [0, 1, 2, 3]
    assert sorted((p.key, p.problem) for p in page.problems) == [
        (str(ckpt / "offsets" / "007"), "file name '007' is not a batch id"),
        (str(ckpt / "offsets" / "notes"), "file name 'notes' is not a batch id"),
    ]
    assert len(store.list_pipelines()[1]) == 2
    assert store.load_latest("orders", "orders-job").batch_id == 2


GOOD_SOURCE = kafka("orders", {0: 20, 1: 20})
MALFORMED = [
    # (offsets file content, problem), each written as the newest batch, 4
    ("v9\n" + meta(T0) + "\n" + GOOD_SOURCE, "offsets log version v9 is not supported"),
    ("1\n" + meta(T0) + "\n" + GOOD_SOURCE, "is not a version (v1..v2) of Spark's offsets log"),
    ("", "empty"),
    ("v1", "no metadata line"),
    ("v1\n" + meta(T0)[:40], "metadata line is not JSON"),
    ("v1\n" + meta(T0), "no source offset lines"),
    ("v1\n" + meta(T0) + "\n" + GOOD_SOURCE[:15], "source #1: offset is not JSON"),  # truncated
    ("v1\n{\"batchWatermarkMs\":0}\n" + GOOD_SOURCE, "no batchTimestampMs"),
    ("v1\n" + meta(T0) + "\n" + '{"orders":{"0":-1}}', "partition 0: offset -1 is negative"),
    ("v1\n" + meta(T0) + "\n" + '{"orders":{"0":"12"}}', 'offset "12" is not an integer'),
    ("v1\n" + meta(T0) + "\n" + '{"orders":{"0":1.5}}', "offset 1.5 is not an integer"),
    ("v1\n" + meta(T0) + "\n" + '{"orders":{"zero":1}}', "partition 'zero' is not a partition id"),
    ("v1\n" + meta(T0) + "\n" + '{"logOffset":3}', "is not a Kafka source offset"),  # a file source
    ("v1\n" + meta(T0) + "\n" + "[" * 100_000, "not JSON"),  # nested too deeply for a recursive parser
    ("v1\n" + meta(T0) + "\n" + '{"orders":{"0":NaN}}', "not JSON"),
    ("v1\n" + meta(T0) + "\n" + GOOD_SOURCE + "\n" + kafka("orders", {0: 1, 1: 1}), "different offsets in two sources"),
    ("v2\n" + meta(T0) + "\n" + GOOD_SOURCE, "is not '<source name>:<offset>'"),
]


@pytest.mark.parametrize("content, problem", MALFORMED)
def test_a_malformed_newest_batch_is_reported_and_raised_only_by_load_latest(ckpt, content, problem):
    path = ckpt / "offsets" / "4"
    path.write_text(content)
    (ckpt / "commits" / "4").write_text('v1\n{"nextBatchWatermarkMs":0}')
    store = CheckpointStore(ckpt)

    page = store.history("orders", "orders-job")
    assert [b.batch_id for b in page.batches] == [0, 1, 2, 3]
    assert len(page.problems) == 1 and page.problems[0].key == str(path)
    assert problem in page.problems[0].problem

    with pytest.raises(MalformedRecord) as info:
        store.load_latest("orders", "orders-job")
    assert (info.value.store, info.value.key) == (store.name, str(path))
    assert problem in info.value.problem

    found, problems = store.list_pipelines()  # falls back to the newest readable batch
    assert found == [PipelineKey("orders", "orders-job")]
    if "two sources" not in problem:
        assert [p.key for p in problems] == [str(path)] and problem in problems[0].problem

    (ckpt / "commits" / "4").unlink()  # planned only: a restart would not begin there
    assert store.load_latest("orders", "orders-job").batch_id == 2


def test_non_utf8_offsets_file(ckpt):
    (ckpt / "offsets" / "1").write_bytes(b"v1\n\xff\xfe")
    page = CheckpointStore(ckpt).history("orders", "orders-job")
    assert [b.batch_id for b in page.batches] == [0, 2, 3]
    assert [(p.key, p.problem) for p in page.problems] == [(str(ckpt / "offsets" / "1"), "not UTF-8 text (byte 3)")]


def test_a_malformed_commit_file_is_reported_and_the_batch_not_called_committed(ckpt):
    (ckpt / "commits" / "2").write_text("v7\n{}")
    store = CheckpointStore(ckpt)
    page = store.history("orders", "orders-job")
    assert [(b.batch_id, b.committed) for b in page.batches] == [(0, True), (1, True), (2, False), (3, False)]
    assert [p.key for p in page.problems] == [str(ckpt / "commits" / "2")]
    assert "commits log version v7" in page.problems[0].problem
    with pytest.raises(MalformedRecord, match="commits log version v7"):
        store.load_latest("orders", "orders-job")


def test_a_topic_missing_beside_an_unknown_source_format_is_not_guessed(tmp_path):
    ckpt = tmp_path / "mixed"
    write_batch(ckpt, 0, ['{"logOffset":3}'], T0)
    store = CheckpointStore(ckpt)
    with pytest.raises(MalformedRecord, match="no Kafka offset for topic 'orders'"):
        store.load_latest("orders", "mixed")
    found, problems = store.list_pipelines()
    assert found == [] and "is not a Kafka source offset" in problems[0].problem
    # Beside a Kafka source that names the topic, another source's format does not matter.
    write_batch(ckpt, 1, ['{"logOffset":4}', kafka("orders", {0: 9})], T0 + 1)
    assert store.load_latest("orders", "mixed").offsets == {0: 9}


# --- fuzz: whatever a file holds, the reader returns valid data or reports it -------------------

FUZZ = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
LINES = st.one_of(
    st.sampled_from([
        "v1", "v2", "v9", "-", meta(T0), meta(-1), "{}", GOOD_SOURCE, f"src:{GOOD_SOURCE}", '{"orders":{}}',
        '{"orders":{"0":-5}}', '{"orders":{"0":1e3}}', '{"orders":{"00":1}}', "3", "null", "[]", "",
        '{"orders":{"0":99999999999999999999}}', '{"":{"0":1}}', "src:-",
    ]),
    st.text(max_size=40),
)


def check_any_offsets_file(ckpt, content: bytes, committed: bool) -> None:
    write_batch(ckpt, 0, [kafka("orders", {0: 1})], T0)  # a good batch before the fuzzed one
    (ckpt / "offsets" / "1").write_bytes(content)
    commit = ckpt / "commits" / "1"
    if committed:
        commit.write_text('v1\n{"nextBatchWatermarkMs":0}')
    elif commit.exists():
        commit.unlink()
    store = CheckpointStore(ckpt)

    page = store.history("orders", ckpt.name)
    event(f"history: {len(page.batches)} batches, {len(page.problems)} problems")
    assert page.batches[0].batch_id == 0
    for batch in page.batches:
        assert all(0 <= p < 2**31 and 0 <= o < 2**63 for p, o in batch.offsets.items())
        assert batch.batch_time_ms >= 0 and batch.committed == (batch.batch_id == 0 or committed)
    assert all(p.key == str(ckpt / "offsets" / "1") and p.problem for p in page.problems)
    assert len(page.batches) + len(page.problems) in (1, 2)
    try:
        latest = store.load_latest("orders", ckpt.name)
    except MalformedRecord as exc:
        assert committed and exc.key == str(ckpt / "offsets" / "1")
    else:
        assert latest is None or latest.batch_id == (1 if committed else 0)
    store.list_pipelines()


@FUZZ
@given(content=st.binary(max_size=300), committed=st.booleans())
def test_fuzz_offsets_file_arbitrary_bytes(tmp_path, content, committed):
    check_any_offsets_file(tmp_path / "fuzzed", content, committed)


@FUZZ
@given(
    # Often a valid start, so the fuzzing reaches the source lines.
    lines=st.tuples(st.sampled_from([[], ["v1"], ["v1", meta(T0)], ["v2", meta(T0)]]), st.lists(LINES, max_size=5))
    .map(lambda t: t[0] + t[1]),
    committed=st.booleans(),
)
def test_fuzz_offsets_file_arbitrary_lines(tmp_path, lines, committed):
    check_any_offsets_file(tmp_path / "fuzzed", "\n".join(lines).encode("utf-8", "surrogatepass"), committed)


@FUZZ
@given(content=st.one_of(st.binary(max_size=100), st.lists(LINES, max_size=3).map(lambda ls: "\n".join(ls).encode())))
def test_fuzz_commit_file(tmp_path, content):
    ckpt = tmp_path / "fuzzed"
    write_batch(ckpt, 0, [kafka("orders", {0: 1})], T0)
    (ckpt / "commits" / "0").write_bytes(content)
    store = CheckpointStore(ckpt)
    [batch] = store.history("orders", "fuzzed").batches
    try:
        latest = store.load_latest("orders", "fuzzed")
    except MalformedRecord as exc:
        assert exc.key == str(ckpt / "commits" / "0") and not batch.committed
    else:
        assert latest == batch and batch.committed
