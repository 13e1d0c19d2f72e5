"""Collector cycles against the real HBase Thrift server (stand-in), Tansu, PostgreSQL and Redis."""
from __future__ import annotations

import happybase
import pytest

from collectors.cycle import collect_once
from dashboard.models import Batch, LagSample, Pipeline, PipelineEvaluation, SourceHealth, StoreProblem
from dashboard.monitoring.services import cluster_get_or_create, source_health_record, store_get_or_create
from devstack.components import free_port
from streamoffsets.types import BatchOffsets
from tests.factories import hbase_store_setup, save

pytestmark = pytest.mark.django_db


def test_cycle_stores_exactly_the_batches_in_hbase_and_lag_per_partition(stack, unique_name):
    s = hbase_store_setup(stack, unique_name, partitions=3, records=30)  # 10 per partition
    save(s, "billing", 1_700_000_000_000, {0: 2, 1: 3, 2: 4})
    save(s, "billing", 1_700_000_005_000, {0: 6, 1: 7, 2: 8})

    summary = collect_once()

    assert summary.errors == []
    pipeline = Pipeline.objects.get(store=s.store, topic=s.topic, group="billing")
    batches = list(pipeline.batches.order_by("batch_time_ms").values_list("batch_time_ms", "offsets", "records"))
    assert batches == [
        (1_700_000_000_000, {"0": 2, "1": 3, "2": 4}, None),  # first batch seen: its start is unknown
        (1_700_000_005_000, {"0": 6, "1": 7, "2": 8}, 12),
    ]
    sample = LagSample.objects.get(pipeline=pipeline)
    assert sample.committed_offsets() == {0: 6, 1: 7, 2: 8} and sample.total_lag == 9
    rows = PipelineEvaluation.objects.get(pipeline=pipeline).partitions
    assert {r["partition"]: (r["lag"], r["high"]) for r in rows} == {0: (4, 10), 1: (3, 10), 2: (2, 10)}


def test_cycles_are_incremental_and_idempotent(stack, unique_name):
    s = hbase_store_setup(stack, unique_name, partitions=1, records=5)
    save(s, "g", 1_700_000_000_000, {0: 1})
    assert collect_once().batches_added == 1
    assert collect_once().batches_added == 0
    save(s, "g", 1_700_000_001_000, {0: 4})
    assert collect_once().batches_added == 1
    pipeline = Pipeline.objects.get(store=s.store)
    assert list(pipeline.batches.order_by("batch_time_ms").values_list("records", flat=True)) == [None, 3]
    assert pipeline.last_batch_ms == 1_700_000_001_000


def test_malformed_row_is_skipped_with_a_visible_problem(stack, unique_name):
    s = hbase_store_setup(stack, unique_name, partitions=1)
    save(s, "g", 1_700_000_000_000, {0: 1})
    conn = happybase.Connection(stack.hbase_host, stack.hbase_port)
    conn.table(s.hbase.table_name).put(f"{s.topic}:g:1700000000500".encode(), {b"offsets:0": b"twelve"})
    conn.close()
    save(s, "g", 1_700_000_001_000, {0: 2})

    summary = collect_once()

    assert summary.errors == []
    assert Batch.objects.filter(pipeline__store=s.store).count() == 2
    problem = StoreProblem.objects.get(store=s.store)
    assert problem.key == f"{s.topic}:g:1700000000500"
    assert "offset 'twelve' is not a number" in problem.problem


def test_unreachable_store_is_recorded_others_go_on_and_it_recovers(stack, unique_name):
    good = hbase_store_setup(stack, unique_name, partitions=1, records=2)
    save(good, "g", 1_700_000_000_000, {0: 1})
    bad = hbase_store_setup(stack, unique_name, partitions=1)
    real_url = bad.store.url
    bad.store.url = f"hbase://127.0.0.1:{free_port()}/nowhere"
    bad.store.save()

    summary = collect_once()

    assert len(summary.errors) == 1 and "nowhere" in summary.errors[0]
    health = SourceHealth.objects.get(source=f"store:{bad.store.pk}")
    assert health.consecutive_failures == 1 and "cannot reach the HBase Thrift server" in health.last_error
    assert Batch.objects.filter(pipeline__store=good.store).count() == 1

    bad.store.url = real_url
    bad.store.save()
    assert collect_once().errors == []
    health.refresh_from_db()
    assert health.consecutive_failures == 0 and health.last_success_at >= health.last_error_at


def test_unreachable_cluster_is_recorded_without_losing_batches(stack, unique_name):
    s = hbase_store_setup(stack, unique_name, partitions=1)
    save(s, "g", 1_700_000_000_000, {0: 1})
    s.cluster.bootstrap_servers = f"127.0.0.1:{free_port()}"
    s.cluster.save()
    summary = collect_once()
    assert len(summary.errors) == 1 and "kafka://127.0.0.1" in summary.errors[0]
    assert Batch.objects.filter(pipeline__store=s.store).count() == 1
    assert SourceHealth.objects.get(source=f"cluster:{s.cluster.pk}").consecutive_failures == 1


def test_a_deleted_topic_is_reported_and_other_topics_keep_their_lag(stack, unique_name):
    s = hbase_store_setup(stack, unique_name, partitions=1, records=3)
    save(s, "g", 1_700_000_000_000, {0: 1})
    s.hbase.save_batch(BatchOffsets("never-created-topic", "g", 1_700_000_000_000, {0: 5}))

    summary = collect_once()

    assert len(summary.errors) == 0  # the cluster was read; the missing topic is a warning on its health
    health = SourceHealth.objects.get(source=f"cluster:{s.cluster.pk}")
    assert health.consecutive_failures == 0
    assert "topic 'never-created-topic'" in health.warning and "does not exist" in health.warning
    assert LagSample.objects.get(pipeline__topic=s.topic).total_lag == 2
    assert not LagSample.objects.filter(pipeline__topic="never-created-topic").exists()


def test_a_store_without_history_becomes_history_through_samples(stack, unique_name):
    """Kafka group offsets keep only the current position: unchanged samples add no batch."""
    from dashboard.monitoring.services import store_get_or_create
    from streamoffsets.stores.registry import open_store

    s = hbase_store_setup(stack, unique_name, partitions=2, records=10)
    store = store_get_or_create(
        name=unique_name("groups"), kind="kafka", url=f"kafka://{stack.kafka_bootstrap}", cluster=s.cluster
    )
    group = unique_name("g")
    with open_store(store.url) as kafka:
        kafka.save_batch(BatchOffsets(s.topic, group, 1, {0: 1, 1: 2}))
        collect_once()
        collect_once()
        kafka.save_batch(BatchOffsets(s.topic, group, 2, {0: 4, 1: 5}))
        collect_once()
    pipeline = Pipeline.objects.get(store=store, group=group)
    assert list(pipeline.batches.order_by("batch_time_ms").values_list("offsets", "records")) == [
        ({"0": 1, "1": 2}, None), ({"0": 4, "1": 5}, 6)
    ]
    assert LagSample.objects.filter(pipeline=pipeline).latest("sampled_at").total_lag == (5 - 4) + (5 - 5)


@pytest.mark.parametrize(
    "kind, url, message",
    [
        ("hbase", "hbase://thrift:9090/offsets", None),
        ("zookeeper", "zk://zk1:2181,zk2:2181/kafka", None),
        ("checkpoint", "checkpoint:///data/ckpt", None),
        ("hbase", "zk://zk1:2181", "needs a hbase URL"),
        ("file", "file://relative/dir", "must be an absolute local path"),
        ("kafka", "kafka:///", "names no server"),
        ("hbase", "mysql://db", "unknown offset store URL"),
    ],
)
def test_store_urls_are_validated_with_a_message_that_says_what_is_wrong(kind, url, message, settings):
    from django.core.exceptions import ValidationError

    from dashboard.models import Cluster, Store

    settings.FILE_STORE_ROOTS = ["/data"]  # local stores only under a configured root

    store = Store(name="s", kind=kind, url=url, cluster=Cluster(name="c", bootstrap_servers="b:9092"))
    if message is None:
        store.clean()
    else:
        with pytest.raises(ValidationError, match=message):
            store.clean()


@pytest.mark.parametrize("kind", ["kafka", "zookeeper", "hbase", "file", "checkpoint"])
def test_every_store_kind_whose_server_is_away_is_a_failed_poll(stack, unique_name, tmp_path, settings, kind):
    """Issue #11, observation 4: a store that cannot be read is a failure of its poll, never a
    successful poll that found nothing (the Kafka group store's was)."""
    from collectors import cycle

    settings.IO_TIMEOUT_S = 1.0
    url = {
        "kafka": f"kafka://127.0.0.1:{free_port()}",
        "zookeeper": f"zk://127.0.0.1:{free_port()}",
        "hbase": f"hbase://127.0.0.1:{free_port()}/offsets",
        "file": f"file://{tmp_path}/unmounted",
        "checkpoint": f"checkpoint://{tmp_path}/unmounted",
    }[kind]
    cluster = cluster_get_or_create(name=unique_name("c"), bootstrap_servers=stack.kafka_bootstrap)
    store = store_get_or_create(name=unique_name(kind), kind=kind, url=url, cluster=cluster)
    with pytest.raises(cycle.SourceFailed):
        cycle.poll_store(store.pk)
    health = SourceHealth.objects.get(source=f"store:{store.pk}")
    assert health.consecutive_failures == 1 and health.last_success_at is None
    assert health.last_error


# --- the collectors' own health, derived when read (issue #11, observation 4) ----------------------

def collectors_answers(client):
    from django.urls import reverse

    api = client.get(reverse("api_collectors")).json()
    healthz = client.get(reverse("healthz"))
    metrics = client.get(reverse("metrics")).content.decode()
    page = client.get(reverse("collectors")).content.decode()
    return api, healthz, metrics, page


def ago(seconds: float):
    from datetime import timedelta

    from django.utils import timezone

    return timezone.now() - timedelta(seconds=seconds)


def beat_ran(at) -> None:
    from dashboard.monitoring import health as collector_health

    source_health_record(source=collector_health.BEAT_SOURCE, label=collector_health.BEAT_LABEL,
                                  started_at=at, duration_ms=0)


def beat_sent(at) -> None:
    import redis
    from django.conf import settings

    from dashboard.monitoring.redis_keys import BEAT_SENT_KEY

    client = redis.Redis.from_url(settings.REDIS_URL)
    if at is None:
        client.delete(BEAT_SENT_KEY)
    else:
        client.set(BEAT_SENT_KEY, repr(at.timestamp()))


def a_source(unique_name, tmp_path) -> str:
    """A real (enabled) file store's source name: only sources still polled can go stale."""

    cluster = cluster_get_or_create(name=unique_name("c"), bootstrap_servers="127.0.0.1:1")
    store = store_get_or_create(name=unique_name("f"), kind="file", url=f"file://{tmp_path}", cluster=cluster)
    return f"store:{store.pk}"


@pytest.fixture
def short_intervals(settings):
    settings.POLL_INTERVAL_S = 2.0
    settings.COLLECTOR_STALE_AFTER_S = 4.0  # two intervals
    yield
    beat_sent(None)


def test_with_the_collectors_running_everything_reads_healthy(client, vera_logged_in, short_intervals, unique_name, tmp_path):

    source = a_source(unique_name, tmp_path)
    beat_sent(ago(1))
    beat_ran(ago(1))
    source_health_record(source=source, label="store s", started_at=ago(1), duration_ms=20)
    api, healthz, metrics, page = collectors_answers(client)
    assert (api["healthy"], api["down"]) == (True, [])
    assert [p["source"] for p in api["collectors"]] == ["collector:broker", "collector:beat", "collector:workers"]
    assert all(p["up"] for p in api["collectors"])
    assert api["sources"][0]["source"] == source and api["sources"][0]["state"] == "ok"
    assert (healthz.status_code, healthz.json()) == (200, {"status": "ok"})
    for part in ("broker", "beat", "workers"):
        assert f'offsetwatch_collector_up{{part="{part}"}} 1' in metrics
    assert "COLLECTORS DOWN" not in page


def test_with_beat_stopped_no_source_reads_healthy_and_beat_is_named(client, vera_logged_in, short_intervals, unique_name,
                                                                    tmp_path):
    """Nothing is written while beat is down: the last tick and the last poll, 30 s old with a
    2 s interval, say it. The source's own row, whose last poll worked, is not healthy either."""

    name = a_source(unique_name, tmp_path)
    beat_sent(ago(30))
    beat_ran(ago(30))
    source_health_record(source=name, label="store s", started_at=ago(30), duration_ms=20)
    api, healthz, metrics, page = collectors_answers(client)

    assert api["healthy"] is False and api["down"] == ["beat"]
    beat = next(p for p in api["collectors"] if p["source"] == "collector:beat")
    assert beat["up"] is False and "no tick for 30 s" in beat["detail"] and beat["seconds_since_last_seen"] >= 30
    source = api["sources"][0]
    assert (source["healthy"], source["state"]) == (False, "stale")
    assert source["problem"].startswith("not polled for 30 s: the collectors are not running")
    assert healthz.status_code == 503
    assert healthz.json()["failed"] == ["beat"] and "no tick for 30 s" in healthz.json()["beat"]
    assert 'offsetwatch_collector_up{part="beat"} 0' in metrics
    assert f'offsetwatch_source_up{{source="{name}",label="store s"}} 0' in metrics
    assert "COLLECTORS DOWN" in page and "STALE" in page


def test_with_no_worker_running_what_beat_sends_the_workers_are_named(client, vera_logged_in, short_intervals):
    beat_sent(ago(1))  # beat ticks ...
    beat_ran(ago(30))  # ... but collect_all last ran 30 s ago
    api, healthz, metrics, _ = collectors_answers(client)
    assert api["down"] == ["workers"]
    workers = next(p for p in api["collectors"] if p["source"] == "collector:workers")
    assert "beat sends collect_all but no worker has run it for 30 s" in workers["detail"]
    assert healthz.status_code == 503 and healthz.json()["failed"] == ["workers"]
    assert 'offsetwatch_collector_up{part="workers"} 0' in metrics and 'offsetwatch_collector_up{part="beat"} 1' in metrics


def test_a_failing_source_is_failing_while_polled_and_stale_when_not(client, vera_logged_in, short_intervals, unique_name,
                                                                      tmp_path):
    """A failing source is polled every cycle (probes between its backed-off full attempts), so
    a failing source not polled for longer than the stale limit is stale too."""

    name = a_source(unique_name, tmp_path)
    beat_sent(ago(1))
    beat_ran(ago(1))
    for _ in range(3):
        source_health_record(source=name, label="s", started_at=ago(1), duration_ms=5, error="down")
    source = collectors_answers(client)[0]["sources"][0]
    assert (source["state"], source["last_error_by"]) == ("failing", "source")
    source_health_record(source=name, label="s", started_at=ago(60), duration_ms=5, error="down")
    source = collectors_answers(client)[0]["sources"][0]
    assert source["state"] == "stale" and "the last poll failed: down" in source["problem"]


def test_a_disabled_store_is_idle_not_stale(client, vera_logged_in, short_intervals, stack, unique_name, tmp_path):

    beat_sent(ago(1))
    beat_ran(ago(1))
    cluster = cluster_get_or_create(name=unique_name("c"), bootstrap_servers=stack.kafka_bootstrap)
    store = store_get_or_create(name=unique_name("f"), kind="file", url=f"file://{tmp_path}", cluster=cluster)
    source_health_record(source=f"cluster:{cluster.pk}", label="c", started_at=ago(1), duration_ms=5)
    source_health_record(source=f"store:{store.pk}", label="f", started_at=ago(60), duration_ms=5)
    store.enabled = False
    store.save()
    api = collectors_answers(client)[0]
    assert api["healthy"] is True
    assert {s["source"]: s["state"] for s in api["sources"]} == {f"store:{store.pk}": "idle", f"cluster:{cluster.pk}": "ok"}
