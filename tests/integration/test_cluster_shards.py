"""A large cluster's poll in shards of its topics (issue #16), against Tansu, the HBase stand-in,
PostgreSQL and Redis: every pipeline sampled and evaluated once a cycle by its own shard, one
failing shard leaves the others evaluated and is shown failing, shards that no longer exist leave
no health row, and shards of one cluster run on two separate `celery worker` processes.

The shard setting is set low (5 partitions a shard) so a cluster of 7 pipelines on topics of 2
partitions (14 partitions evaluated) is 3 shards. Pure assignment: tests/unit/test_cluster_shards.py."""
from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import uuid
from collections import defaultdict

import pytest
from django.db import connection
from django.utils import timezone

from collectors import cycle, fanout, locks, tasks
from collectors.cycle import collect_once
from dashboard.models import ClusterTopic, LagSample, Pipeline, PipelineEvaluation, SourceHealth, WatermarkSample
from dashboard.monitoring.selectors import pipeline_freshness, unreachable_sources
from dashboard.monitoring.services import cluster_get_or_create, store_get_or_create
from dashboard.monitoring.shards import cluster_shards_refresh
from offsetwatch.lib.shards import shard_of
from reference_job.producer import ensure_topic, produce
from streamoffsets.errors import OffsetStoreError
from streamoffsets.stores.hbase import HBaseOffsetStore
from streamoffsets.types import BatchOffsets
from tests.paths import ROOT

SHARDS, PARTITIONS = 3, 2
# OFFSETWATCH_CLUSTER_SHARD_PARTITIONS: 7 pipelines (6 topics, one read by 2 stores) x 2 partitions
# = 14 partitions evaluated -> 3 shards.
PER_SHARD = 5


def _topics_in_every_shard(base: str) -> dict[str, int]:
    """Two topic names per shard (names are random per run: pick them so no shard is empty)."""
    chosen: dict[str, int] = {}
    per_shard: dict[int, int] = defaultdict(int)
    for i in range(1000):
        name, shard = f"{base}-{i}", shard_of(f"{base}-{i}", SHARDS)
        if per_shard[shard] < 2:
            chosen[name], per_shard[shard] = shard, per_shard[shard] + 1
        if len(chosen) == 2 * SHARDS:
            return chosen
    raise AssertionError("no names found for every shard")


def _hbase(stack, unique_name):
    table = unique_name("shards").replace("-", "_")
    url = f"hbase://{stack.hbase_host}:{stack.hbase_port}/{table}"
    store = HBaseOffsetStore.from_url(url)
    store.ensure_table()
    return url, store


@pytest.fixture
def fleet(stack, unique_name, settings):
    """A cluster of 6 topics (2 in each of 3 shards), a pipeline per topic in one HBase store, and a
    twin of the first topic's pipeline (same topic and group, another offset) in a second store."""
    settings.CLUSTER_SHARD_PARTITIONS = PER_SHARD
    topics = _topics_in_every_shard(unique_name("sharded"))
    cluster = cluster_get_or_create(name=unique_name("big"), bootstrap_servers=stack.kafka_bootstrap)
    url, hbase = _hbase(stack, unique_name)
    twin_url, twin_hbase = _hbase(stack, unique_name)
    store = store_get_or_create(name=unique_name("jobs"), kind="hbase", url=url, cluster=cluster)
    twin_store = store_get_or_create(name=unique_name("jobs-copy"), kind="hbase", url=twin_url, cluster=cluster)
    for topic in topics:
        ensure_topic(stack.kafka_bootstrap, topic, PARTITIONS)
        produce(stack.kafka_bootstrap, topic, PARTITIONS, 4)  # high watermark 2 per partition
        hbase.save_batch(BatchOffsets(topic, "etl", 1_700_000_000_000, {0: 1, 1: 1}))
    first = next(iter(topics))
    twin_hbase.save_batch(BatchOffsets(first, "etl", 1_700_000_000_000, {0: 0, 1: 0}))
    return cluster, store, twin_store, topics


def _shard_sources(cluster) -> list[str]:
    return [f"cluster:{cluster.pk}/{k}" for k in range(1, SHARDS + 1)]


def _sharded(cluster) -> None:
    """Two cycles: the first polls the cluster whole (no partition counts yet) and counts its
    partitions; from the second on, it is polled in shards."""
    assert collect_once().errors == []
    assert dict(ClusterTopic.objects.filter(cluster=cluster).values_list("topic", "partitions")) == {
        t: PARTITIONS for t in Pipeline.objects.filter(store__cluster=cluster).values_list("topic", flat=True)}
    assert SourceHealth.objects.filter(source=f"cluster:{cluster.pk}").exists()
    assert collect_once().errors == []
    cluster.refresh_from_db()
    assert cluster.shards == SHARDS


@pytest.mark.django_db
def test_a_large_cluster_is_polled_in_shards_each_pipeline_sampled_and_evaluated_once(fleet):
    cluster, store, twin_store, topics = fleet
    _sharded(cluster)
    pipelines = list(Pipeline.objects.filter(store__cluster=cluster))
    assert len(pipelines) == 2 * SHARDS + 1

    # The whole cluster's row stayed until every shard had polled (its pipelines' last poll meanwhile),
    # and goes with the next fan-out: one health row per shard, labelled with its part.
    assert SourceHealth.objects.filter(source=f"cluster:{cluster.pk}").exists()
    cluster_shards_refresh()
    rows = {h.source: h for h in SourceHealth.objects.filter(source__startswith=f"cluster:{cluster.pk}")}
    assert sorted(rows) == _shard_sources(cluster)
    assert [rows[s].label.rsplit(" part ", 1)[1] for s in _shard_sources(cluster)] == ["1 of 3", "2 of 3", "3 of 3"]
    assert all(h.consecutive_failures == 0 for h in rows.values())
    # Every pipeline: one lag sample a cycle (two cycles), evaluated by its own shard's poll.
    assert sorted(LagSample.objects.filter(pipeline__in=pipelines).values_list("pipeline", flat=True)) == sorted(
        2 * [p.pk for p in pipelines])
    for p in pipelines:
        shard = topics[p.topic]
        evaluation = PipelineEvaluation.objects.get(pipeline=p)
        assert evaluation.evaluated_at == rows[f"cluster:{cluster.pk}/{shard}"].last_attempt_at, (p.topic, shard)
        assert pipeline_freshness(pipeline=Pipeline.objects.select_related("store__cluster").get(pk=p.pk)).stale is False
    # Each shard's poll read its own topics' watermarks only.
    latest = defaultdict(set)
    for topic, at in WatermarkSample.objects.filter(cluster=cluster).values_list("topic", "sampled_at"):
        latest[at].add(topic)
    by_shard = {rows[f"cluster:{cluster.pk}/{k}"].last_attempt_at: {t for t, s in topics.items() if s == k}
                for k in range(1, SHARDS + 1)}
    assert {at: latest[at] for at in by_shard} == by_shard
    # Twins (same topic and group in two stores) are evaluated together: the drift rule compared them.
    first = next(iter(topics))
    twin_reasons = PipelineEvaluation.objects.get(pipeline__store=twin_store, pipeline__topic=first).reasons
    assert any(store.name in r for r in twin_reasons), twin_reasons


@pytest.mark.django_db
def test_the_shard_count_follows_the_partitions_evaluated_and_old_shards_leave_no_row(fleet, settings):
    cluster, store, twin_store, topics = fleet
    _sharded(cluster)
    # 14 partitions evaluated (the twin's topic counts twice), 12 in the topics: 13 a shard is 2 shards.
    settings.CLUSTER_SHARD_PARTITIONS = 13
    assert cluster_shards_refresh()[cluster.pk] == 2
    assert sorted(SourceHealth.objects.filter(source__startswith=f"cluster:{cluster.pk}").values_list(
        "source", flat=True)) == _shard_sources(cluster)[:2]
    settings.CLUSTER_SHARD_PARTITIONS = 14
    assert cluster_shards_refresh()[cluster.pk] == 1
    # Until the whole cluster has polled, its shards' rows are its last poll: a pipeline is not
    # shown "never collected" for the cycle after the change.
    assert sorted(SourceHealth.objects.filter(source__startswith=f"cluster:{cluster.pk}").values_list(
        "source", flat=True)) == _shard_sources(cluster)[:2]
    pipeline = Pipeline.objects.select_related("store__cluster").filter(store=store).first()
    assert pipeline_freshness(pipeline=pipeline).stale is False
    cycle.poll_cluster(cluster.pk)
    cluster_shards_refresh()
    assert list(SourceHealth.objects.filter(source__startswith=f"cluster:{cluster.pk}").values_list(
        "source", flat=True)) == [f"cluster:{cluster.pk}"]
    # Its pipelines removed, a topic counts no more.
    settings.CLUSTER_SHARD_PARTITIONS = 11
    assert cluster_shards_refresh()[cluster.pk] == 2
    Pipeline.objects.filter(store=twin_store).delete()
    Pipeline.objects.filter(store=store, topic__in=list(topics)[:1]).delete()
    assert cluster_shards_refresh()[cluster.pk] == 1  # 5 pipelines x 2 partitions


@pytest.mark.django_db
def test_the_fan_out_sends_the_stores_then_each_shard(fleet):
    cluster, store, twin_store, topics = fleet
    _sharded(cluster)
    client = locks.redis_client()
    sent: list[str] = []
    ours = [f"store:{store.pk}", f"store:{twin_store.pk}", *_shard_sources(cluster)]
    for source in ours:
        locks.queued_clear(source, client)
    try:
        fanout.cycle_fan_out(now=timezone.now(), enqueue=lambda source, probe: sent.append(source))
    finally:
        for source in ours:
            locks.queued_clear(source, client)
    assert [s for s in sent if s in ours] == ours
    assert f"cluster:{cluster.pk}" not in sent
    # A poll queued for a shard the cluster no longer has does nothing (no row for it).
    assert cycle.poll_cluster(cluster.pk, shard=SHARDS + 1) == 0
    assert cycle.poll_cluster(cluster.pk) == 0  # the whole cluster, now polled in shards
    assert not SourceHealth.objects.filter(source__in=[f"cluster:{cluster.pk}", f"cluster:{cluster.pk}/4"]).exists()


@pytest.mark.django_db
def test_one_failing_shard_leaves_the_others_evaluated_and_is_shown_failing(fleet, monkeypatch, vera_client):
    cluster, store, twin_store, topics = fleet
    _sharded(cluster)
    before = dict(PipelineEvaluation.objects.filter(pipeline__store__cluster=cluster)
                  .values_list("pipeline__topic", "evaluated_at").filter(pipeline__store=store))
    broken = {t for t, s in topics.items() if s == 2}
    real = cycle.read_watermarks

    def broker_failing_for_shard_2(bootstrap, wanted, **kwargs):  # the broker's answer: the outgoing seam
        if broken & set(wanted):
            raise OffsetStoreError(bootstrap, "ListOffsets", "timed out (the broker of shard 2's partitions is down)")
        return real(bootstrap, wanted, **kwargs)
    monkeypatch.setattr(cycle, "read_watermarks", broker_failing_for_shard_2)

    summary = collect_once()

    assert len(summary.errors) == 1 and "shard 2's partitions" in summary.errors[0]
    rows = {h.source: h for h in SourceHealth.objects.filter(source__in=_shard_sources(cluster))}
    assert [rows[s].consecutive_failures for s in _shard_sources(cluster)] == [0, 1, 0]
    after = dict(PipelineEvaluation.objects.filter(pipeline__store=store).values_list("pipeline__topic", "evaluated_at"))
    assert {t for t in topics if after[t] > before[t]} == set(topics) - broken  # the others evaluated this cycle
    assert {t for t in topics if after[t] == before[t]} == broken
    assert sorted(LagSample.objects.filter(pipeline__store=store).values_list("pipeline__topic", flat=True)) == sorted(
        [t for t in topics for _ in range(2 if t in broken else 3)])
    # The failing shard is named where on-call looks: its pipelines' freshness, the collectors page.
    failing_pipeline = Pipeline.objects.select_related("store__cluster").get(store=store, topic=next(iter(broken)))
    freshness = pipeline_freshness(pipeline=failing_pipeline)
    assert freshness.stale and any("part 2 of 3" in r and "shard 2's partitions" in r for r in freshness.reasons)
    fine = Pipeline.objects.select_related("store__cluster").get(store=store, topic=next(t for t in topics if t not in broken))
    assert pipeline_freshness(pipeline=fine).stale is False
    page = vera_client.get("/collectors/").content.decode()
    assert re.search(r'data-source="cluster:%d/2">\s*<td>cluster [^<]* part 2 of 3</td>' % cluster.pk, page), page[:3000]

    # Fewer shards (here: sharding off): the shards' rows, the failing one too, do not linger.
    monkeypatch.setattr(cycle, "read_watermarks", real)
    from django.conf import settings
    settings.CLUSTER_SHARD_PARTITIONS = 0
    assert collect_once().errors == []
    # The failing shard's row went at once; the others were the cluster's last poll until it had
    # polled whole, and go with the next fan-out.
    assert not [h for h in unreachable_sources() if h.source.startswith(f"cluster:{cluster.pk}")]
    assert not SourceHealth.objects.filter(source=f"cluster:{cluster.pk}/2").exists()
    cluster_shards_refresh()
    assert list(SourceHealth.objects.filter(source__startswith=f"cluster:{cluster.pk}").values_list("source", flat=True)) == [
        f"cluster:{cluster.pk}"]


# --- two separate worker processes share one cluster's shards ---------------------------------------

def _worker(name: str, log_path, env: dict) -> subprocess.Popen:
    node = f"{name}-{uuid.uuid4().hex[:6]}@{socket.gethostname()}"
    log = open(log_path, "wb")
    return subprocess.Popen([sys.executable, "-m", "celery", "-A", "offsetwatch.celery", "worker", "-n", node,
                             "--concurrency", "1", "--loglevel", "INFO", "-Q", "collect"],
                            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


@pytest.mark.django_db(transaction=True)
def test_shards_of_one_cluster_are_polled_by_two_worker_processes(fleet, tmp_path):
    """Two `celery worker` processes (one process each, queue collect) and collect_all's fan-out
    (run here, as beat's task would): the cluster's shards are polled by both processes."""
    cluster, store, twin_store, topics = fleet
    client = locks.redis_client()
    client.delete("collect", "default")  # no other test's messages ahead of ours
    for source in [f"store:{store.pk}", f"store:{twin_store.pk}", f"cluster:{cluster.pk}", *_shard_sources(cluster)]:
        locks.queued_clear(source, client)  # nor a mark left queued by an earlier run on this Redis
    db = connection.settings_dict
    env = {**os.environ, "OFFSETWATCH_CLUSTER_SHARD_PARTITIONS": str(PER_SHARD), "OFFSETWATCH_LOG_FORMAT": "plain",
           "OFFSETWATCH_LOG_LEVEL": "INFO",
           "DATABASE_URL": f"postgres://{db['USER']}:{db['PASSWORD']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"}
    logs = [tmp_path / "worker-a.log", tmp_path / "worker-b.log"]
    workers = [_worker("shards-a", logs[0], env), _worker("shards-b", logs[1], env)]
    pattern = re.compile(r"cluster:%d/(\d+): \d+ topic\(s\) read" % cluster.pk)

    def polled() -> list[set[int]]:
        return [{int(k) for k in pattern.findall(path.read_text(errors="replace"))} for path in logs]
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            tasks.collect_all()  # beat's tick: the fan-out enqueues each due, idle source
            a, b = polled()
            if a and b and a | b == set(range(1, SHARDS + 1)):
                break
            time.sleep(1.0)
    finally:
        for w in workers:
            w.terminate()
        for w in workers:
            try:
                # A warm shutdown lets a running poll finish (up to its time limit): not what
                # this test is about, so a worker still busy after 20 s is stopped hard.
                w.wait(20)
            except subprocess.TimeoutExpired:
                w.kill()
                w.wait(10)
        client.delete("collect", "default")
    a, b = polled()
    detail = "\n".join(path.read_text(errors="replace")[-3000:] for path in logs)
    assert a and b, f"shards polled by worker a: {a}, by worker b: {b}\n{detail}"
    assert a | b == set(range(1, SHARDS + 1)), detail
    rows = SourceHealth.objects.filter(source__in=_shard_sources(cluster))
    assert sorted(h.source for h in rows if h.consecutive_failures == 0 and h.last_success_at) == _shard_sources(cluster)


@pytest.mark.django_db
def test_a_shard_waits_for_its_stores_queued_before_it_not_for_a_later_cycles(fleet):
    """With few worker processes, beat's next tick queues the stores again behind the shards
    still waiting in the queue: a shard that waited for those would hold its process for the
    whole bound, once per shard. It waits for the stores of its own cycle (queued before it)."""
    cluster, store, twin_store, topics = fleet
    client = locks.redis_client()
    stores = [f"store:{store.pk}", f"store:{twin_store.pk}"]
    shard = f"cluster:{cluster.pk}/1"
    for source in [*stores, shard]:
        locks.queued_clear(source, client)
    try:
        assert locks.queued_mark(client, stores[0])  # this cycle's store, queued first
        assert locks.queued_mark(client, shard)
        assert locks.queued_mark(client, stores[1])  # the next tick's, behind the shard
        assert fanout.cluster_stores_wait(cluster.pk, bound_s=0.3, source=shard) == [stores[0]]
        locks.queued_clear(stores[0], client)  # its poll started... and ended
        assert fanout.cluster_stores_wait(cluster.pk, bound_s=30, source=shard) == []
        # Without its own mark (a poll run directly), every queued store is waited for, as before.
        assert fanout.cluster_stores_wait(cluster.pk, bound_s=0.3) == [stores[1]]
    finally:
        for source in [*stores, shard]:
            locks.queued_clear(source, client)
