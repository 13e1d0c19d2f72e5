"""Rewinds from the job's side, against the real dashboard over HTTP (pytest-django's live
server), the real stores and broker of the session's stack, and the reference PySpark job.

The whole path, per writable store and for a kept checkpoint: the job runs a few batches and
stops; the collectors read them; olga (operator) requests a rewind to batch K, amir (approver)
approves it; the job restarts with its pipeline token, claims the rewind, saves the target as
the marker batch, starts exactly at K's offsets and re-processes exactly the records after K;
the collectors then verify the rewind from the store, and the audit chain holds.

Fast tests (no Spark): an unreachable dashboard (a closed port) under both policies, two
instances racing for one claim, a target that went out of range by the time it was claimed.
"""
from __future__ import annotations

import logging
import socket
import threading
from collections import Counter

import pytest
from django.db import connections

from collectors.cycle import collect_once, poll_store
from dashboard.accounts.tokens import pipeline_token_issue
from dashboard.audit.services import audit_verify
from dashboard.models import AuditEvent, Pipeline, RewindRequest
from dashboard.monitoring.services import cluster_get_or_create, store_get_or_create
from dashboard.rewinds.services import rewind_decide, rewind_request
from reference_job.job import JobConfig, ReferenceJob
from reference_job.output import OutputSink
from reference_job.producer import ensure_topic, produce
from streamoffsets.dashboard_client import DashboardClient
from streamoffsets.kafka import KafkaWatermarkReader
from streamoffsets.restart import StartRefused, restart
from streamoffsets.stores.checkpoint import ASIDE_MARK, START_FILE, CheckpointStore
from streamoffsets.stores.offsetfile import OffsetFileStore
from streamoffsets.stores.registry import open_store
from streamoffsets.types import BatchOffsets, Watermarks
from tests.factories import approved_replay, writable_store_url

STORE_KINDS = ["hbase", "zookeeper", "kafka", "file"]
# Stores that keep only their current offsets: the collectors' samples are their history, so
# the first run is sampled after every batch (as a poll per batch would) to give K a row.
SAMPLE_ONLY = {"zookeeper", "kafka", "file"}
PARTITIONS, RECORDS, PER_BATCH = 2, 40, 5  # 20 records per partition: 4 batches of 5 + 5


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released): a dashboard that is down."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- the whole path, with Spark -------------------------------------------------------------------


def run_until_caught_up(spark, config: JobConfig, on_batch=None) -> ReferenceJob:
    job = ReferenceJob(spark, config, on_batch=on_batch)
    job.start()
    try:
        job.query.processAllAvailable()
    finally:
        job.stop()
    return job


def sample_store(store_id: int):
    """A collectors' poll of one store after each batch; in Spark's callback thread, whose
    database connection is closed again (the test database must be droppable at the end)."""
    def poll(batch: BatchOffsets) -> None:
        try:
            poll_store(store_id)
        finally:
            connections.close_all()
    return poll


@pytest.mark.spark
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("kind", STORE_KINDS + ["checkpoint"])
def test_an_approved_rewind_is_applied_by_the_restarted_job_and_verified(
    kind, spark, stack, live_server, tmp_path, unique_name, olga, amir,
):
    topic = unique_name("replay")
    ensure_topic(stack.kafka_bootstrap, topic, PARTITIONS)
    produce(stack.kafka_bootstrap, topic, PARTITIONS, RECORDS)
    cluster = cluster_get_or_create(name=unique_name("cluster"), bootstrap_servers=stack.kafka_bootstrap)
    if kind == "checkpoint":
        root = tmp_path / "checkpoints"
        group, url = unique_name("job"), f"checkpoint://{root}"  # the group is the checkpoint's name
        job_store = {"store_url": None, "checkpoint_dir": root / group}
    else:
        group, url = unique_name("job"), writable_store_url(kind, stack, tmp_path, unique_name)
        job_store = {"store_url": url}
    store = store_get_or_create(name=unique_name(kind), kind=kind, url=url, cluster=cluster)
    output = tmp_path / "out.sqlite3"
    base = dict(bootstrap=stack.kafka_bootstrap, topic=topic, group=group, output_path=output, trigger_seconds=0.5,
                max_offsets_per_partition=PER_BATCH, idempotent_output=False, **job_store)  # append: count re-writes

    first = run_until_caught_up(spark, JobConfig(**base), on_batch=sample_store(store.pk) if kind in SAMPLE_ONLY else None)
    assert first.run_state.records_written == RECORDS
    collect_once()
    pipeline = Pipeline.objects.get(store=store, topic=topic, group=group)
    seen = []  # the distinct positions the dashboard recorded, oldest first
    for offsets in pipeline.batches.order_by("batch_time_ms").values_list("offsets", flat=True):
        if not seen or seen[-1] != offsets:
            seen.append(offsets)
    assert seen == [{"0": n, "1": n} for n in (5, 10, 15, 20)]  # one batch per 5 records a partition
    k = pipeline.batches.filter(offsets={"0": 10, "1": 10}).order_by("batch_time_ms").first()  # batch K: the second

    rewind = rewind_request(pipeline=pipeline, user=olga, kind="batch", spec={"batch_time_ms": k.batch_time_ms},
                            reason="bad deploy between batches 2 and 4: replay them")
    rewind = rewind_decide(rewind=rewind, user=amir, approve=True, comment="ok")
    token = pipeline_token_issue(pipeline=pipeline, name="job")[1]

    # Sampled per batch again: a sample equal to the previous one records nothing, and the
    # replay ends where the first run did ({20, 20}), so a poll only after the replay would
    # never show the collectors that the store moved (see the README, "Rewinds from the job's side").
    second = run_until_caught_up(spark, JobConfig(**base, dashboard_url=live_server.url, dashboard_token=token),
                                 on_batch=sample_store(store.pk) if kind in SAMPLE_ONLY else None)

    plan = second.run_state.plan
    assert plan.offsets == {0: 10, 1: 10}  # exactly batch K's offsets
    assert plan.rewind.id == rewind.pk and plan.rewind.before == {0: 20, 1: 20}
    assert f"rewind #{rewind.pk} applied" in plan.decisions[0] and "partition 0: 20 → 10 (10 messages read again)" in plan.decisions[0]
    written = Counter(OutputSink(output, idempotent=False).offsets(topic))
    assert second.run_state.records_written == 20
    assert {key for key, n in written.items() if n == 2} == {(p, o) for p in range(PARTITIONS) for o in range(10, 20)}
    assert set(written) == {(p, o) for p in range(PARTITIONS) for o in range(20)} and max(written.values()) == 2
    rewind.refresh_from_db()
    # Stores with history are verified by the next collection; the per-batch polls of the others did it already.
    assert rewind.status == ("verified" if kind in SAMPLE_ONLY else "applied")
    assert rewind.applied_offsets == {"0": 10, "1": 10}
    assert rewind.marker_batch_ms == plan.rewind.marker_batch_ms and rewind.claimed_by == second.config.instance
    if kind == "hbase":  # the marker is a row of its own, before the replayed batches
        rows = open_store(url).history(topic, group, start_ms=plan.rewind.marker_batch_ms).batches
        assert rows[0].batch_time_ms == plan.rewind.marker_batch_ms and rows[0].offsets == {0: 10, 1: 10}
    if kind == "checkpoint":
        kept = [d for d in root.iterdir() if ASIDE_MARK in d.name]
        assert [d.name.split(ASIDE_MARK)[0] for d in kept] == [group] and (kept[0] / "commits").is_dir()
        assert (root / group / START_FILE).is_file()
        history = CheckpointStore(root).history(topic, group).batches
        assert (history[0].batch_time_ms, history[0].offsets) == (plan.rewind.marker_batch_ms, {0: 10, 1: 10})

    collect_once()
    rewind.refresh_from_db()
    assert rewind.status == "verified", rewind.outcome
    # With history the marker batch itself is read; the others' first sample after it is past it.
    assert ("continues from the target" if kind in SAMPLE_ONLY else "starts at the target") in rewind.outcome
    assert list(AuditEvent.objects.filter(subject__startswith=f"rewind #{rewind.pk} ").order_by("id").values_list(
        "action", flat=True)) == ["rewind.requested", "rewind.approved", "rewind.claimed", "rewind.applied", "rewind.verified"]
    assert audit_verify().ok
    if kind == "checkpoint":  # the checkpoint kept aside is not a pipeline of its own
        assert list(Pipeline.objects.filter(store=store).values_list("group", flat=True)) == [group]


# --- fast: no Spark --------------------------------------------------------------------------------


T0 = 1_700_000_000_000


@pytest.fixture
def replay(stack, unique_name, tmp_path):
    """A topic with 10 records per partition; the job's offset file holds {0: 10, 1: 10}; the
    dashboard knows two batches ({4, 4} then {10, 10}) and the watermarks; rewind to the first
    one requested by olga and approved by amir. Yields what the tests need."""
    world = approved_replay(stack, unique_name, tmp_path)
    return {**world, "watermarks": KafkaWatermarkReader(stack.kafka_bootstrap).topic_watermarks}


@pytest.mark.parametrize("policy", ["proceed", "wait"])
def test_an_unreachable_dashboard_proceeds_or_refuses_by_policy(policy, stack, unique_name, tmp_path, caplog):
    topic = unique_name("orders")
    ensure_topic(stack.kafka_bootstrap, topic, 2)
    produce(stack.kafka_bootstrap, topic, 2, 20)
    store = OffsetFileStore(tmp_path)
    store.save_batch(BatchOffsets(topic, "etl", T0, {0: 7, 1: 8}))
    url = f"http://127.0.0.1:{closed_port()}"
    down = DashboardClient(url, "owp_unused", timeout_s=2)
    watermarks = KafkaWatermarkReader(stack.kafka_bootstrap).topic_watermarks
    caplog.set_level(logging.WARNING, logger="offsetwatch.restart")

    if policy == "wait":
        with pytest.raises(StartRefused) as err:
            restart(store, topic, "etl", watermarks, dashboard=down, instance="a", rewind_policy="wait")
        assert f"the dashboard at {url} could not be asked" in str(err.value) and "unreachable" in str(err.value)
        return
    plan = restart(store, topic, "etl", watermarks, dashboard=down, instance="a", rewind_policy="proceed")
    assert plan.offsets == {0: 7, 1: 8} and plan.rewind is None  # the stored offsets
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(url in m and "Connection refused" in m and "starting from the stored offsets" in m for m in warnings), warnings


class ReadThenWait(DashboardClient):
    """A real client that, once it has read the pending rewind, waits at a barrier: so both
    racing instances have seen the rewind before either claims it (the race, made certain)."""

    def __init__(self, *args, barrier: threading.Barrier, **kwargs):
        super().__init__(*args, **kwargs)
        self.barrier = barrier

    def pending_rewind(self):
        found = super().pending_rewind()
        self.barrier.wait(timeout=30)
        return found


@pytest.mark.django_db(transaction=True)
def test_two_instances_race_for_one_claim_the_loser_starts_from_the_stored_offsets(replay, live_server):
    barrier = threading.Barrier(2)
    plans, errors = {}, []

    def start(instance: str) -> None:
        try:
            client = ReadThenWait(live_server.url, replay["token"], barrier=barrier)
            with OffsetFileStore(replay["root"]) as store:
                plans[instance] = restart(store, replay["topic"], replay["group"], replay["watermarks"],
                                          dashboard=client, instance=instance)
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=start, args=(name,)) for name in ("host-a:1:aaaa", "host-b:2:bbbb")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    rewind = RewindRequest.objects.get(pk=replay["rewind"].pk)
    winner, loser = rewind.claimed_by, ({"host-a:1:aaaa", "host-b:2:bbbb"} - {rewind.claimed_by}).pop()
    assert rewind.status == "applied"
    assert plans[winner].offsets == {0: 4, 1: 4} and plans[winner].rewind.id == rewind.pk
    assert plans[loser].offsets == {0: 10, 1: 10} and plans[loser].rewind is None
    assert f"rewind #{rewind.pk} was not claimed by this instance" in plans[loser].decisions[0]
    assert f"{winner} claimed it" in plans[loser].decisions[0]
    # The winner's marker is what the store holds now, and what the collectors verify.
    marker = OffsetFileStore(replay["root"]).load_latest(replay["topic"], replay["group"])
    assert (marker.batch_time_ms, marker.offsets) == (plans[winner].rewind.marker_batch_ms, {0: 4, 1: 4})
    collect_once()
    rewind.refresh_from_db()
    assert rewind.status == "verified", rewind.outcome
    assert audit_verify().ok


@pytest.mark.django_db(transaction=True)
def test_a_target_out_of_range_at_claim_time_is_reported_failed_and_the_job_refuses(replay, live_server):
    # Retention moved partition 0's low watermark past the target after the approval. Tansu
    # cannot delete records (delete_records crashes it), so the broker is played at the
    # watermark seam here: the real topic's watermarks with partition 0's low raised to 6.
    def after_retention(topic: str) -> dict[int, Watermarks]:
        marks = replay["watermarks"](topic)
        return {**marks, 0: Watermarks(0, 6, marks[0].high)}

    client = DashboardClient(live_server.url, replay["token"])
    with OffsetFileStore(replay["root"]) as store, pytest.raises(StartRefused) as err:
        restart(store, replay["topic"], replay["group"], after_retention, dashboard=client, instance="host-a:1:aaaa")
    assert "partition 0: target 4 is below the low watermark 6" in str(err.value)
    rewind = RewindRequest.objects.get(pk=replay["rewind"].pk)
    assert rewind.status == "failed" and "partition 0: target 4 is below the low watermark 6" in rewind.outcome
    # Nothing was written: the next start (no rewind pending any more) is from the stored offsets.
    assert OffsetFileStore(replay["root"]).load_latest(replay["topic"], replay["group"]).offsets == {0: 10, 1: 10}
    assert client.pending_rewind() is None
    with OffsetFileStore(replay["root"]) as store:
        again = restart(store, replay["topic"], replay["group"], replay["watermarks"], dashboard=client, instance="b")
    assert again.offsets == {0: 10, 1: 10} and again.rewind is None
    assert audit_verify().ok


def test_a_fresh_checkpoint_marker_is_the_position_until_the_first_commit(tmp_path):
    """A checkpoint job that crashed right after applying a rewind (marker written, no batch
    committed yet) restarts from the target; a kept-aside checkpoint is no pipeline; a damaged
    marker is reported, not guessed."""
    from streamoffsets.stores.checkpoint import start_fresh_checkpoint

    old = tmp_path / "job-a"
    (old / "offsets").mkdir(parents=True)
    (old / "commits").mkdir()
    moved = start_fresh_checkpoint(old, BatchOffsets("orders", "job-a", T0, {0: 4, 1: 4}), rewind_id=9,
                                   aside_suffix="20240101T000000Z")
    assert moved == tmp_path / "job-a.before-rewind-9-20240101T000000Z" and (moved / "offsets").is_dir()
    with pytest.raises(FileExistsError, match="not overwriting a kept checkpoint"):
        start_fresh_checkpoint(old, BatchOffsets("orders", "job-a", T0 + 1, {0: 1}), rewind_id=9,
                               aside_suffix="20240101T000000Z")
    assert (moved / "offsets").is_dir() and (old / START_FILE).is_file()  # both left as they were
    root = tmp_path / "root"
    start_fresh_checkpoint(root / "job-b", BatchOffsets("orders", "job-b", T0, {0: 4, 1: 4}), rewind_id=3, aside_suffix="x")
    store = CheckpointStore(root)
    assert store.load_latest("orders", "job-b") == BatchOffsets("orders", "job-b", T0, {0: 4, 1: 4})
    assert store.load_latest("other-topic", "job-b") is None
    assert [b.offsets for b in store.history("orders", "job-b").batches] == [{0: 4, 1: 4}]
    (root / "job-b.before-rewind-2-x").mkdir()
    (root / "job-b.before-rewind-2-x" / "offsets").mkdir()
    keys, problems = store.list_pipelines()
    assert [(k.topic, k.group) for k in keys] == [("orders", "job-b")] and problems == []
    (root / "job-b" / START_FILE).write_text('{"batch_time_ms": 1, "topic": "orders", "offsets": {"0": -4}}')
    keys, problems = store.list_pipelines()
    assert "offsets: partition 0: offset -4 is negative" in problems[0].problem and START_FILE in problems[0].key


def test_the_job_refuses_configurations_it_cannot_honour(tmp_path):
    base = {"bootstrap": "127.0.0.1:1", "topic": "orders", "output_path": tmp_path / "out.sqlite3"}
    cases = [
        # 1. Neither a store nor a checkpoint (or both): nowhere to keep the position.
        ({"group": "g", "store_url": None}, "exactly one"),
        ({"group": "g", "store_url": f"file://{tmp_path}", "checkpoint_dir": tmp_path / "g"}, "exactly one"),
        # 2. A checkpoint job's group is the directory's name, as the dashboard names the pipeline.
        ({"group": "other", "store_url": None, "checkpoint_dir": tmp_path / "g"}, "group is its checkpoint directory's name"),
        # 3. A checkpoint cannot be clamped: Spark resumes from its offsets whatever startingOffsets says.
        ({"group": "g", "store_url": None, "checkpoint_dir": tmp_path / "g", "out_of_range": "clamp"}, "cannot clamp"),
        # 4. A read-only store for a job that must save its offsets.
        ({"group": "g", "store_url": f"checkpoint://{tmp_path}"}, "read-only"),
    ]
    for number, (config, message) in enumerate(cases, start=1):
        with pytest.raises(ValueError, match=message):
            ReferenceJob(None, JobConfig(**base, **config))
        assert not (tmp_path / "out.sqlite3").exists(), number  # refused before anything was made
