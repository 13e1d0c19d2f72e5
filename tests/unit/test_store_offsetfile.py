"""The offset file store (streamoffsets/stores/offsetfile.py) on a real file system under tmp_path."""
from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from streamoffsets.errors import MalformedRecord, StoreUnreachable
from streamoffsets.stores.base import OffsetStore
from streamoffsets.stores.offsetfile import OffsetFileStore, format_file
from streamoffsets.stores.registry import open_store
from streamoffsets.types import BatchOffsets, PipelineKey

T0 = 1_700_000_000_000
GOOD = b"offsetwatch-gtoffset v1\nbatch_time_ms=1700000000000\n0 42\n1 17\nend partitions=2\n"


@pytest.fixture
def store(tmp_path):
    return OffsetFileStore.from_url(f"file://{tmp_path}/offsets")


def all_files(root) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs)


def test_is_an_offset_store_opened_from_its_url(tmp_path):
    s = open_store(f"file://{tmp_path}/offsets")
    assert isinstance(s, OffsetFileStore) and isinstance(s, OffsetStore)
    assert (s.kind, s.writable, s.keeps_history) == ("file", True, False)
    assert s.name == f"file://{tmp_path}/offsets"
    assert str(OffsetFileStore.from_url("file:///data/my%20offsets/").root) == "/data/my offsets"
    for bad in ["file://host/x", "file:relative", "hbase://h/x"]:
        with pytest.raises(ValueError, match="file:///"):
            OffsetFileStore.from_url(bad)


def test_round_trip_in_the_documented_format(store):
    assert store.load_latest("events", "billing") is None  # first start: no file yet
    store.save_batch(BatchOffsets("events", "billing", T0, {1: 17, 0: 42}))

    path = store.root / "billing" / "events" / "gtoffset"
    assert path.read_bytes() == GOOD  # partitions sorted, trailer counts them
    assert oct(path.stat().st_mode & 0o777) == "0o644"
    assert store.load_latest("events", "billing") == BatchOffsets("events", "billing", T0, {0: 42, 1: 17})
    assert store.list_pipelines() == ([PipelineKey("events", "billing")], [])

    store.save_batch(BatchOffsets("events", "billing", T0 + 5000, {0: 50, 1: 20, 2: 3}))
    assert store.load_latest("events", "billing").offsets == {0: 50, 1: 20, 2: 3}


def test_history_is_the_current_state_within_the_window(store):
    assert store.history("events", "g").batches == []
    store.save_batch(BatchOffsets("events", "g", T0, {0: 1}))
    assert [b.offsets for b in store.history("events", "g").batches] == [{0: 1}]
    assert store.history("events", "g", start_ms=T0, end_ms=T0).batches[0].batch_time_ms == T0
    assert store.history("events", "g", start_ms=T0 + 1).batches == []
    assert store.history("events", "g", end_ms=T0 - 1).batches == []
    page = store.history("events", "g", limit=0)
    assert page.batches == [] and page.truncated


def test_save_replaces_the_file_whole_and_leaves_no_temp_file(store):
    store.save_batch(BatchOffsets("events", "g", T0, {p: 1000 + p for p in range(50)}))
    path = store.root / "g" / "events" / "gtoffset"
    inode = path.stat().st_ino
    store.save_batch(BatchOffsets("events", "g", T0 + 1, {0: 7}))  # much shorter than the old file

    assert path.read_bytes() == b"offsetwatch-gtoffset v1\nbatch_time_ms=1700000000001\n0 7\nend partitions=1\n"
    assert path.stat().st_ino != inode  # a new file renamed over the old, not rewritten in place
    assert all_files(store.root) == ["g/events/gtoffset"]


def test_a_crash_before_the_rename_leaves_the_old_file_and_a_stray_temp_file_that_is_ignored(store):
    store.save_batch(BatchOffsets("events", "g", T0, {0: 10, 1: 10}))
    directory = store.root / "g" / "events"
    # What a writer killed mid-write leaves: half of a new file under the temp name.
    (directory / ".gtoffset.k2j3h4.tmp").write_bytes(GOOD[:30])

    assert store.load_latest("events", "g").offsets == {0: 10, 1: 10}
    assert store.list_pipelines() == ([PipelineKey("events", "g")], [])
    store.save_batch(BatchOffsets("events", "g", T0 + 1, {0: 11, 1: 11}))  # the next save still works
    assert store.load_latest("events", "g").offsets == {0: 11, 1: 11}


def test_a_failed_write_keeps_the_old_file_and_removes_its_temp_file(store, monkeypatch):
    store.save_batch(BatchOffsets("events", "g", T0, {0: 10}))

    def crash(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", crash)
    with pytest.raises(Exception, match="No space left"):
        store.save_batch(BatchOffsets("events", "g", T0 + 1, {0: 11}))
    monkeypatch.undo()
    assert store.load_latest("events", "g").offsets == {0: 10}
    assert all_files(store.root) == ["g/events/gtoffset"]


@pytest.mark.parametrize("group", ["../../etc", "a/b", "..", ".", "", "a\\b", "nul\x00byte", "/abs"])
def test_group_and_topic_names_that_are_paths_are_refused(store, group):
    batch = BatchOffsets("events", group, T0, {0: 1})
    with pytest.raises(ValueError, match="cannot be a path component"):
        store.save_batch(batch)
    with pytest.raises(ValueError, match="cannot be a path component"):
        store.load_latest("events", group)
    with pytest.raises(ValueError, match="topic"):
        store.save_batch(BatchOffsets(group, "g", T0, {0: 1}))
    assert not store.root.exists()  # nothing written anywhere


@pytest.mark.parametrize("group, dirname", [
    ("grp with spaces", "grp%20with%20spaces"),
    ("ünïcødé-组", "%C3%BCn%C3%AFc%C3%B8d%C3%A9-%E7%BB%84"),
    ("100%", "100%25"),
    ("%2F..%2F", "%252F..%252F"),  # an encoded-looking name stays one literal name
    ("...", "%2E.."),  # never a hidden name
    (".hidden-group", "%2Ehidden-group"),
    ("group:with:colons", "group%3Awith%3Acolons"),
    ("my.group_v2-x~", "my.group_v2-x~"),
])
def test_other_group_ids_round_trip_inside_the_root(store, group, dirname):
    store.save_batch(BatchOffsets("events", group, T0, {0: 5}))
    assert store.load_latest("events", group).offsets == {0: 5}
    assert all_files(store.root) == [f"{dirname}/events/gtoffset"]
    assert store.list_pipelines() == ([PipelineKey("events", group)], [])


def test_over_long_names_are_refused(store):
    with pytest.raises(ValueError, match="too long"):
        store.save_batch(BatchOffsets("events", "组" * 30, T0, {0: 1}))  # 30 x 9 bytes encoded


def test_values_the_format_cannot_hold_are_refused(store):
    for batch in [
        BatchOffsets("events", "g", T0, {}),
        BatchOffsets("events", "g", T0, {0: -1}),
        BatchOffsets("events", "g", T0, {-1: 0}),
        BatchOffsets("events", "g", T0, {0: 2**63}),
        BatchOffsets("events", "g", -5, {0: 1}),
    ]:
        with pytest.raises(ValueError):
            store.save_batch(batch)
    assert not store.root.exists()


def test_list_pipelines_walks_root_group_topic_and_reports_unaddressable_directories(store):
    store.save_batch(BatchOffsets("events", "billing", T0, {0: 1}))
    store.save_batch(BatchOffsets("clicks", "billing", T0, {0: 1}))
    store.save_batch(BatchOffsets("events", "audit", T0, {0: 1}))
    (store.root / "billing" / "no-file-yet").mkdir()  # a topic directory without gtoffset: skipped
    (store.root / ".snapshot" / "events").mkdir(parents=True)
    (store.root / ".snapshot" / "events" / "gtoffset").write_bytes(GOOD)  # hidden: skipped
    (store.root / "raw group" / "events").mkdir(parents=True)  # written by a tool that does not encode
    (store.root / "raw group" / "events" / "gtoffset").write_bytes(GOOD)

    found, problems = store.list_pipelines()
    assert found == [PipelineKey("clicks", "billing"), PipelineKey("events", "audit"), PipelineKey("events", "billing")]
    assert len(problems) == 1
    assert problems[0].key == str(store.root / "raw group" / "events" / "gtoffset")
    assert "not a percent-encoded name" in problems[0].problem


def test_list_pipelines_fails_on_a_missing_root(store):
    """An unmounted share or a mistyped root is a failing read, never an empty success."""
    with pytest.raises(StoreUnreachable, match="root directory does not exist"):
        store.list_pipelines()


MALFORMED = [
    (b"", "empty"),
    (GOOD[:-1], "newline"),  # cut inside the last line
    (GOOD[:GOOD.index(b"end")], "end partitions"),  # cut at a line boundary before the trailer
    (GOOD.replace(b"1 17\n", b""), "counts 2 partitions but the file has 1"),  # a line lost
    (b"0 42\n", "version header"),
    (GOOD.replace(b"v1", b"v9"), "'v9' is not supported"),
    (GOOD.replace(b"batch_time_ms=1700000000000", b"batch_time=17"), "batch_time_ms"),
    (GOOD.replace(b"1700000000000", b"soon"), "batch time 'soon'"),
    (GOOD.replace(b"0 42", b"0 -42"), "offset -42 is negative"),
    (GOOD.replace(b"0 42", b"0 4x2"), "offset '4x2' is not a decimal"),
    (GOOD.replace(b"0 42", b"0 042"), "offset '042'"),
    (GOOD.replace(b"0 42", b"0 99999999999999999999"), "is not a decimal number"),
    (GOOD.replace(b"0 42", b"0\t42"), "not '<partition> <offset>'"),
    (GOOD.replace(b"1 17", b"0 17"), "partition 0 appears twice"),
    (GOOD.replace(b"1 17", b"x 17"), "partition 'x'"),
    (b"offsetwatch-gtoffset v1\nbatch_time_ms=1\nend partitions=0\n", "no partition offsets"),
    (GOOD.replace(b"42", b"4\xff2"), "not UTF-8"),
    (GOOD.replace(b"\n", b"\r\n"), "line ends"),
]


@pytest.mark.parametrize("content, problem", MALFORMED)
def test_each_malformation_names_the_file_and_the_problem(store, content, problem):
    path = store.root / "g" / "events" / "gtoffset"
    path.parent.mkdir(parents=True)
    path.write_bytes(content)

    with pytest.raises(MalformedRecord) as info:
        store.load_latest("events", "g")
    assert (info.value.store, info.value.key) == (store.name, str(path))
    assert problem in info.value.problem

    page = store.history("events", "g")  # reported, not raised
    assert page.batches == []
    assert [(p.key, p.problem) for p in page.problems] == [(str(path), info.value.problem)]


def test_a_hand_edited_file_in_any_partition_order_reads(store):
    path = store.root / "g" / "events" / "gtoffset"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"offsetwatch-gtoffset v1\nbatch_time_ms=5\n2 9\n0 7\nend partitions=2\n")
    assert store.load_latest("events", "g") == BatchOffsets("events", "g", 5, {0: 7, 2: 9})


# --- fuzz: whatever a file holds, the reader returns valid data or reports it -------------------


def check_any_content(store, content: bytes) -> None:
    path = store.root / "g" / "events" / "gtoffset"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    try:
        batch = store.load_latest("events", "g")
    except MalformedRecord as exc:
        event("malformed")
        assert exc.key == str(path) and exc.problem
        page = store.history("events", "g")
        assert page.batches == [] and [p.key for p in page.problems] == [str(path)]
        return
    event("read a batch")
    assert batch is not None and batch.offsets
    assert all(0 <= p < 2**31 and 0 <= o < 2**63 for p, o in batch.offsets.items())
    # Only the canonical form of some batch is accepted (partition lines in any order).
    assert sorted(format_file(batch).split(b"\n")) == sorted(content.split(b"\n"))
    assert store.history("events", "g").batches == [batch]


def lines_to_bytes(lines: list[str]) -> bytes:
    return ("\n".join(lines) + "\n").encode("utf-8", "surrogatepass")


FUZZ = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
valid_line = st.sampled_from(
    ["offsetwatch-gtoffset v1", "batch_time_ms=1", "0 1", "1 2", "end partitions=1", "end partitions=2", "", "-1 5"]
)


@FUZZ
@given(content=st.binary(max_size=300))
def test_fuzz_arbitrary_bytes(store, content):
    check_any_content(store, content)


@FUZZ
@given(
    # Often a valid start, so the fuzzing reaches the partition lines and the trailer.
    lines=st.tuples(
        st.sampled_from([[], ["offsetwatch-gtoffset v1"], ["offsetwatch-gtoffset v1", "batch_time_ms=1"]]),
        st.lists(st.one_of(valid_line, st.text(max_size=30)), max_size=6),
    ).map(lambda t: t[0] + t[1])
)
def test_fuzz_arbitrary_lines(store, lines):
    check_any_content(store, lines_to_bytes(lines))


def test_a_file_cut_after_any_byte_is_malformed(store):
    path = store.root / "g" / "events" / "gtoffset"
    path.parent.mkdir(parents=True)
    for size in range(len(GOOD)):
        path.write_bytes(GOOD[:size])
        with pytest.raises(MalformedRecord):
            store.load_latest("events", "g")


@FUZZ
@given(
    group=st.text(max_size=40),
    offsets=st.dictionaries(st.integers(0, 2**31 - 1), st.integers(0, 2**63 - 1), min_size=1, max_size=20),
    batch_time=st.integers(0, 2**63 - 1),
)
def test_fuzz_any_group_is_refused_or_round_trips_inside_the_root(tmp_path_factory, group, offsets, batch_time):
    store = OffsetFileStore(tmp_path_factory.mktemp("fuzz") / "root")
    batch = BatchOffsets("events", group, batch_time, offsets)
    try:
        store.save_batch(batch)
    except ValueError:
        assert not store.root.exists()
        return
    assert store.load_latest("events", group) == batch
    [written] = all_files(store.root)
    assert (store.root / written).resolve().is_relative_to(store.root.resolve())
    assert store.list_pipelines() == ([PipelineKey("events", group)], [])
