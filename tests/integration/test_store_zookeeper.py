"""The ZooKeeper store against the session's real ZooKeeper, one fresh chroot per test."""
from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kazoo.client import KazooClient
from kazoo.security import make_acl

from devstack.components import free_port
from streamoffsets.errors import MalformedRecord, OffsetStoreError, StoreUnreachable
from streamoffsets.stores.base import OffsetStore
from streamoffsets.stores.registry import open_store
from streamoffsets.stores.zookeeper import ZooKeeperOffsetStore
from streamoffsets.types import BatchOffsets, PipelineKey


def now_ms() -> int:
    return int(time.time() * 1000)


@pytest.fixture
def raw(stack):
    """A plain kazoo client on the server root, to write and inspect nodes by hand."""
    client = KazooClient(hosts=stack.zookeeper_hosts, timeout=5)
    client.start(timeout=5)
    yield client
    client.stop()
    client.close()


@pytest.fixture
def chroot(raw, unique_name):
    path = f"/{unique_name('ow')}"
    raw.create(path)  # kazoo does not create a client's chroot itself
    yield path
    raw.delete(path, recursive=True)


@pytest.fixture
def store(stack, chroot):
    with ZooKeeperOffsetStore(stack.zookeeper_hosts, chroot, timeout_s=5, torn_after_ms=50) as s:
        yield s


def test_is_an_offset_store_opened_from_its_url(stack, chroot):
    s = open_store(f"zk://{stack.zookeeper_hosts}{chroot}")
    try:
        assert isinstance(s, ZooKeeperOffsetStore) and isinstance(s, OffsetStore)
        assert s.name == f"zk://{stack.zookeeper_hosts}{chroot}"
        assert (s.kind, s.writable, s.keeps_history) == ("zookeeper", True, False)
        assert (s.hosts, s.chroot) == (stack.zookeeper_hosts, chroot)
    finally:
        s.close()
    several = ZooKeeperOffsetStore.from_url("zk://zk1:2181,zk2:2181/kafka/prod")
    assert (several.hosts, several.chroot, several.name) == ("zk1:2181,zk2:2181", "/kafka/prod", "zk://zk1:2181,zk2:2181/kafka/prod")
    assert ZooKeeperOffsetStore.from_url("zk://zk1:2181").chroot == ""
    with pytest.raises(ValueError):
        ZooKeeperOffsetStore.from_url("hbase://zk1:2181/x")


def test_round_trip_writes_the_old_consumer_layout_as_text(store, raw, chroot):
    before = now_ms()
    store.save_batch(BatchOffsets("orders", "billing", 1_700_000_000_000, {0: 10, 1: 20, 12: 7}))
    after = now_ms()
    for partition, text in [(0, b"10"), (1, b"20"), (12, b"7")]:
        data, _ = raw.get(f"{chroot}/consumers/billing/offsets/orders/{partition}")
        assert data == text
    # Nothing but the partition nodes: the batch time is not stored anywhere.
    assert sorted(raw.get_children(f"{chroot}/consumers/billing/offsets/orders")) == ["0", "1", "12"]
    assert raw.get_children(f"{chroot}/consumers/billing") == ["offsets"]
    latest = store.load_latest("orders", "billing")
    assert latest.offsets == {0: 10, 1: 20, 12: 7}
    assert (latest.topic, latest.group) == ("orders", "billing")
    # The batch time is the nodes' mtime (when the save committed), not the batch's own time.
    assert before <= latest.batch_time_ms <= after
    assert store.load_latest("orders", "nobody") is None


def test_a_later_batch_overwrites_and_one_transaction_gives_one_mtime(store, raw, chroot):
    store.save_batch(BatchOffsets("orders", "billing", 1, {0: 10, 1: 20}))
    time.sleep(0.1)
    store.save_batch(BatchOffsets("orders", "billing", 2, {0: 15, 1: 26, 2: 3}))  # partition 2 is new
    latest = store.load_latest("orders", "billing")
    assert latest.offsets == {0: 15, 1: 26, 2: 3}
    mtimes = {raw.get(f"{chroot}/consumers/billing/offsets/orders/{p}")[1].mtime for p in range(3)}
    assert mtimes == {latest.batch_time_ms}
    page = store.history("orders", "billing")
    assert page.batches == [latest] and page.problems == [] and not page.truncated


def test_history_is_the_current_state_within_the_window(store):
    assert store.history("orders", "billing").batches == []
    store.save_batch(BatchOffsets("orders", "billing", 1, {0: 10}))
    t = store.load_latest("orders", "billing").batch_time_ms
    assert [b.offsets for b in store.history("orders", "billing", start_ms=t, end_ms=t).batches] == [{0: 10}]
    assert store.history("orders", "billing", start_ms=t + 1).batches == []
    assert store.history("orders", "billing", end_ms=t - 1).batches == []
    assert store.history("orders", "billing", limit=0).truncated


def test_list_pipelines_walks_groups_and_topics(store, raw, chroot):
    assert store.list_pipelines() == ([], [])
    store.save_batch(BatchOffsets("orders", "billing", 1, {0: 1}))
    store.save_batch(BatchOffsets("clicks", "billing", 1, {0: 1, 1: 2}))
    store.save_batch(BatchOffsets("orders", "audit", 1, {3: 4}))
    # A group that merely exists (old consumers register ids/owners), and an empty topic node.
    raw.create(f"{chroot}/consumers/idle/ids/consumer-1", makepath=True)
    raw.create(f"{chroot}/consumers/fresh/offsets/empty", makepath=True)
    pipelines, problems = store.list_pipelines()
    assert pipelines == [PipelineKey("clicks", "billing"), PipelineKey("orders", "audit"), PipelineKey("orders", "billing")]
    assert problems == []
    assert store.load_latest("empty", "fresh") is None


def test_torn_state_from_a_per_partition_writer_is_a_warning(store, raw, chroot):
    base = f"{chroot}/consumers/billing/offsets/orders"
    raw.create(f"{base}/0", b"100", makepath=True)
    time.sleep(0.2)
    raw.create(f"{base}/1", b"200")
    raw.create(f"{base}/2", b"300")
    newest = raw.get(f"{base}/2")[1].mtime
    latest = store.load_latest("orders", "billing")
    assert latest.offsets == {0: 100, 1: 200, 2: 300}
    assert latest.batch_time_ms == newest
    page = store.history("orders", "billing")
    assert page.batches == [latest]
    [problem] = page.problems
    assert problem.store == store.name and problem.key == "/consumers/billing/offsets/orders"
    assert problem.problem.startswith("torn write: partitions 0 behind the others (1, 2), written more than ")
    assert "others (1, 2)" in problem.problem
    # Our own save writes every node in one transaction: the torn state is gone.
    store.save_batch(BatchOffsets("orders", "billing", 2, {0: 101, 1: 201, 2: 301}))
    assert store.history("orders", "billing").problems == []


@pytest.mark.parametrize(
    "child, value, problem",
    [
        ("1", b"abc", "'abc' is not a 64-bit decimal number"),
        ("1", b"-3", "offset -3 is negative"),
        ("x", b"5", "child 'x' is not a partition id"),
        ("1", b"\xff", "not UTF-8"),
    ],
)
def test_malformed_nodes(store, raw, chroot, child, value, problem):
    base = "/consumers/billing/offsets/orders"
    raw.create(f"{chroot}{base}/0", b"10", makepath=True)
    raw.create(f"{chroot}{base}/{child}", value)
    with pytest.raises(MalformedRecord) as err:
        store.load_latest("orders", "billing")
    assert (err.value.store, err.value.key) == (store.name, f"{base}/{child}")
    assert problem in err.value.problem
    page = store.history("orders", "billing")
    assert [(p.key, problem in p.problem) for p in page.problems] == [(f"{base}/{child}", True)]
    # The readable partition still makes a batch; the dashboard shows it with the problem.
    assert [b.offsets for b in page.batches] == [{0: 10}]


def test_history_without_a_readable_partition_has_no_batch(store, raw, chroot):
    raw.create(f"{chroot}/consumers/billing/offsets/orders/0", b"oops", makepath=True)
    page = store.history("orders", "billing")
    assert page.batches == [] and len(page.problems) == 1


@pytest.mark.parametrize("bad", ["", ".", "..", "a/b", "nul\x00", "/abs"])
def test_hostile_names_are_rejected(store, raw, chroot, bad):
    with pytest.raises(ValueError, match="cannot be a ZooKeeper path component"):
        store.save_batch(BatchOffsets(bad, "billing", 1, {0: 1}))
    with pytest.raises(ValueError, match="cannot be a ZooKeeper path component"):
        store.save_batch(BatchOffsets("orders", bad, 1, {0: 1}))
    assert not raw.exists(f"{chroot}/consumers")


def test_bad_offsets_are_rejected_before_writing(store, raw, chroot):
    for offsets in ({}, {0: -1}, {-1: 5}):
        with pytest.raises(ValueError):
            store.save_batch(BatchOffsets("orders", "billing", 1, offsets))
    assert not raw.exists(f"{chroot}/consumers")


def test_unreachable_server_fails_within_the_timeout():
    store = ZooKeeperOffsetStore(f"127.0.0.1:{free_port()}", "/x", timeout_s=1)
    t0 = time.monotonic()
    with pytest.raises(StoreUnreachable) as err:
        store.load_latest("orders", "billing")
    assert time.monotonic() - t0 < 3
    assert err.value.store == store.name and err.value.key == "/consumers/billing/offsets/orders"
    with pytest.raises(StoreUnreachable):
        store.save_batch(BatchOffsets("orders", "billing", 1, {0: 1}))
    store.close()


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    value=st.binary(max_size=40)
    | st.text(max_size=30).map(str.encode)
    | st.integers(-10, 2**64).map(lambda i: f" {i}\n".encode())
)
def test_any_node_value_gives_a_batch_or_malformed_record(store, raw, chroot, value):
    path = f"{chroot}/consumers/g/offsets/t/0"
    if raw.exists(path):
        raw.set(path, value)
    else:
        raw.create(path, value, makepath=True)
    try:
        batch = store.load_latest("t", "g")
    except MalformedRecord as exc:
        assert exc.key == "/consumers/g/offsets/t/0"
        return
    assert batch is not None and batch.key == PipelineKey("t", "g")
    assert batch.offsets == {0: int(value.decode().strip())}
    assert 0 <= batch.offsets[0] < 2**63


def test_a_save_is_all_or_nothing(store, raw, chroot):
    """One refused node (here read-only by ACL) rolls the whole transaction back."""
    base = f"{chroot}/consumers/billing/offsets/orders"
    raw.create(f"{base}/0", b"10", makepath=True)
    raw.create(f"{base}/1", b"20", acl=[make_acl("world", "anyone", read=True, delete=True, admin=True)])
    with pytest.raises(OffsetStoreError) as err:
        store.save_batch(BatchOffsets("orders", "billing", 1, {0: 11, 1: 21, 2: 31}))
    assert err.value.key == "/consumers/billing/offsets/orders/1"
    assert "rolled back, nothing saved: NoAuthError" in err.value.problem
    assert raw.get(f"{base}/0")[0] == b"10" and not raw.exists(f"{base}/2")


def test_a_chroot_whose_parent_is_missing_is_named(stack, chroot):
    with ZooKeeperOffsetStore(stack.zookeeper_hosts, f"{chroot}/missing/deeper", timeout_s=5) as s:
        with pytest.warns(UserWarning, match="chroot"):  # kazoo's own warning on connect
            assert s.load_latest("orders", "billing") is None
        with pytest.raises(OffsetStoreError, match="create the chroot first") as err:
            s.save_batch(BatchOffsets("orders", "billing", 1, {0: 1}))
        assert err.value.key == f"{chroot}/missing/deeper"


def test_a_poll_reads_every_pipeline_pipelined_and_a_refused_one_is_its_own_problem(store, raw, chroot):
    """read_store reads a ZooKeeper store's pipelines in pipelined rounds (histories): the same
    batches and problems as history() one by one; a pipeline whose node the server refuses
    (NoAuth) is that pipeline's problem, the others are still read."""
    for i in range(30):
        raw.create(f"{chroot}/consumers/g{i}/offsets/t{i}/0", str(i).encode(), makepath=True)
        raw.create(f"{chroot}/consumers/g{i}/offsets/t{i}/1", b"7")
    raw.create(f"{chroot}/consumers/g3/offsets/t3/x", b"1")  # malformed child
    locked = f"{chroot}/consumers/locked/offsets/orders"
    raw.create(f"{locked}/0", b"5", makepath=True)
    # Nobody may list it; anyone may change its ACL back (so the chroot can be deleted after).
    raw.set_acls(locked, [make_acl("world", "anyone", write=True, create=True, delete=True, admin=True)])
    try:
        _pipelined_read_checks(store, chroot)
    finally:
        raw.set_acls(locked, [make_acl("world", "anyone", all=True)])


def _pipelined_read_checks(store, chroot):
    from streamoffsets.stores.reading import ReadPlan, read_store

    keys, _ = store.list_pipelines()
    assert PipelineKey("orders", "locked") in keys and len(keys) == 31
    pages = store.histories(keys, chunk=7)
    refused = pages.pop(PipelineKey("orders", "locked"))
    assert isinstance(refused, OffsetStoreError) and "NoAuth" in refused.problem
    assert refused.key == "/consumers/locked/offsets/orders"
    for key, page in pages.items():
        one = store.history(key.topic, key.group)
        assert (page.batches, page.problems) == (one.batches, one.problems)
    assert pages[PipelineKey("t5", "g5")].batches[0].offsets == {0: 5, 1: 7}
    assert [p.key for p in pages[PipelineKey("t3", "g3")].problems] == ["/consumers/g3/offsets/t3/x"]
    reading = read_store(f"zk://{store.hosts}{chroot}", ReadPlan(now_ms=now_ms()), timeout_s=5)
    assert len(reading.batches) == 30 and PipelineKey("orders", "locked") not in reading.batches
    assert any(p.key == "/consumers/locked/offsets/orders" and "NoAuth" in p.problem for p in reading.problems)
