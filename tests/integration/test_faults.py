"""Servers that go away around and during a collection cycle, on a private stack of this module
(Tansu, the HBase stand-in, ZooKeeper, Redis on free ports) so the rest of the suite is unaffected.

No cycle raises, the affected source is shown as failing within that cycle, collection resumes in
the first cycle after the server is back, and nothing already stored is lost. Tansu and the HBase
stand-in keep data in memory only, so after their restart the test writes the data back, as a
real (persistent) server would still have it.
"""
from __future__ import annotations

import threading

import pytest
from django.db import connection
from django.utils import timezone

from collectors import tasks
from collectors.cycle import collect_once
from dashboard.models import Batch, SourceHealth
from dashboard.monitoring.services import cluster_get_or_create, source_health_record, store_get_or_create
from devstack.components import LOOPBACK, Component, Stack, StackPorts, free_port
from reference_job.producer import ensure_topic, produce
from streamoffsets.stores import reading as readers
from streamoffsets.stores.registry import open_store
from streamoffsets.types import BatchOffsets

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def private(tmp_path_factory):
    stack = Stack(tmp_path_factory.mktemp("faults"),
                  StackPorts(kafka=free_port(), hbase=free_port(), zookeeper=free_port(), redis=free_port()))
    stack.log_dir.mkdir(parents=True)
    stack.pid_dir.mkdir(parents=True)
    comps = {c.name: c for c in stack.components()}
    for comp in comps.values():
        comp.reuse_if_ready = False  # a Redis of our own, to stop
        stack.start_component(comp, progress=lambda line: None)
    yield stack, comps
    for name in comps:
        stack.stop_component(name)


def restart(stack: Stack, comp: Component) -> None:
    stack.start_component(comp, progress=lambda line: None)


def health(source: str) -> SourceHealth:
    return SourceHealth.objects.get(source=source)


def setup_sources(stack: Stack, unique_name):
    p = stack.ports
    topic = unique_name("orders")
    ensure_topic(f"{LOOPBACK}:{p.kafka}", topic, 2)
    produce(f"{LOOPBACK}:{p.kafka}", topic, 2, 10)
    cluster = cluster_get_or_create(name=unique_name("c"), bootstrap_servers=f"{LOOPBACK}:{p.kafka}")
    stores = {
        "hbase": store_get_or_create(name=unique_name("h"), kind="hbase",
                                              url=f"hbase://{LOOPBACK}:{p.hbase}/{topic.replace('-', '_')}",
                                              cluster=cluster),
        "zookeeper": store_get_or_create(name=unique_name("z"), kind="zookeeper",
                                                  url=f"zk://{LOOPBACK}:{p.zookeeper}", cluster=cluster),
    }
    write(stores, topic, {0: 2, 1: 3}, 1_700_000_000_000)
    return cluster, stores, topic


def write(stores, topic, offsets, at_ms):
    for store in stores.values():
        with open_store(store.url, timeout_s=2) as s:
            if hasattr(s, "ensure_table"):
                s.ensure_table()
            s.save_batch(BatchOffsets(topic, "etl", at_ms, offsets))


@pytest.mark.parametrize("server", ["hbase", "zookeeper", "kafka"])
def test_a_server_going_away_before_the_cycle_is_shown_and_collection_resumes(private, unique_name, settings, server):
    settings.IO_TIMEOUT_S = 2.0
    stack, comps = private
    cluster, stores, topic = setup_sources(stack, unique_name)
    assert collect_once().errors == []
    stored = Batch.objects.count()
    source = f"cluster:{cluster.pk}" if server == "kafka" else f"store:{stores[server].pk}"

    stack.stop_component(server, timeout_s=5)
    summary = collect_once()

    assert any(server_url_part(stack, server) in e for e in summary.errors), summary.errors
    assert health(source).consecutive_failures >= 1
    assert Batch.objects.count() >= stored  # nothing already stored is lost
    restart_and_recover(stack, comps, server, stores, topic, source, stored)


def restart_and_recover(stack, comps, server, stores, topic, source, stored):
    restart(stack, comps[server])
    if server in ("hbase", "kafka"):  # memory-only servers: put back what a real one would keep
        ensure_topic(f"{LOOPBACK}:{stack.ports.kafka}", topic, 2)
        produce(f"{LOOPBACK}:{stack.ports.kafka}", topic, 2, 10)
        write({"hbase": stores["hbase"]}, topic, {0: 2, 1: 3}, 1_700_000_000_000)
    write(stores, topic, {0: 4, 1: 5}, 1_700_000_001_000)
    assert collect_once().errors == []
    assert health(source).consecutive_failures == 0
    assert Batch.objects.count() > stored


class HeldInsideTheCall:
    """The seam that puts the cycle inside a server call when the server stops: the reader of
    one source, once it is connected and has had its first answer (a pipeline's history, the
    cluster's topic metadata), waits on `proceed` before its next request to the server."""

    def __init__(self, monkeypatch, url_part: str):
        self.inside, self.proceed = threading.Event(), threading.Event()
        held = self
        real_open_store = readers.open_store

        def open_store(url, *args, **kwargs):
            store = real_open_store(url, *args, **kwargs)
            if url_part in url:
                # Every poll reads each pipeline's history; a ZooKeeper poll lists its pipelines
                # and then reads them all at once (histories), so it is held after the listing.
                name = "list_pipelines" if hasattr(store, "histories") else "history"
                first_call = getattr(store, name)

                def held_call(*a, **kw):
                    answer = first_call(*a, **kw)
                    held.hold()
                    return answer

                setattr(store, name, held_call)
            return store

        class Reader(readers.KafkaWatermarkReader):
            def _topic_metadata(self, *args, **kwargs):
                answer = super()._topic_metadata(*args, **kwargs)
                if url_part in self.bootstrap:
                    held.hold()
                return answer

        monkeypatch.setattr(readers, "open_store", open_store)
        monkeypatch.setattr(readers, "KafkaWatermarkReader", Reader)

    def hold(self):
        self.inside.set()
        assert self.proceed.wait(60), "the test never let the held reader go on"


@pytest.mark.django_db(transaction=True)  # the cycle's thread has its own connection: it must see the rows
@pytest.mark.parametrize("server", ["hbase", "zookeeper", "kafka"])
def test_a_server_stopping_inside_the_cycles_call_fails_that_poll_and_the_cycle_goes_on(
    private, unique_name, settings, monkeypatch, server
):
    """Issue #11, observation 10: the threaded version of this test never polled anything (its
    thread could not see the test's uncommitted rows). Here the reader of the stopped server is
    held inside its call, connected and answered once, while the server is stopped; that very
    cycle records the failure with its reason and still polls every other source."""
    settings.IO_TIMEOUT_S = 2.0
    stack, comps = private
    cluster, stores, topic = setup_sources(stack, unique_name)
    assert collect_once().errors == []
    stored = Batch.objects.count()
    source = f"cluster:{cluster.pk}" if server == "kafka" else f"store:{stores[server].pk}"
    others = [f"store:{s.pk}" for name, s in stores.items() if name != server]
    url_part = server_url_part(stack, server)
    held = HeldInsideTheCall(monkeypatch, url_part)
    write(stores, topic, {0: 3, 1: 4}, 1_700_000_000_500)  # a new batch for the other store to record

    results, started_at = [], timezone.now()

    def cycle():
        try:
            results.append(collect_once())
        finally:
            connection.close()

    thread = threading.Thread(target=cycle)
    thread.start()
    try:
        assert held.inside.wait(30), "the cycle never reached the server's reader"
        stack.stop_component(server, timeout_s=5)
    finally:
        held.proceed.set()
        thread.join(60)
    assert results, "the cycle did not finish"

    errors = results[0].errors  # this cycle's own summary, not a later one's
    assert len(errors) == 1 and url_part in errors[0], errors
    failed = health(source)
    assert failed.consecutive_failures == 1 and url_part in failed.last_error and failed.last_attempt_at >= started_at
    for other in others:  # the cycle went on past the failing source and recorded the others
        row = health(other)
        assert row.consecutive_failures == 0 and row.last_success_at >= started_at, (other, row.last_error)
    if server != "kafka":
        assert health(f"cluster:{cluster.pk}").last_success_at >= started_at
    assert Batch.objects.count() == stored + len(others)  # the other store's new batch, nothing lost
    monkeypatch.undo()
    restart_and_recover(stack, comps, server, stores, topic, source, stored)


def server_url_part(stack: Stack, server: str) -> str:
    port = {"hbase": stack.ports.hbase, "zookeeper": stack.ports.zookeeper, "kafka": stack.ports.kafka}[server]
    return f"{LOOPBACK}:{port}"


def test_tasks_keep_polling_while_redis_is_down(private, unique_name, settings):
    stack, comps = private
    settings.REDIS_URL = f"redis://{LOOPBACK}:{stack.ports.redis}/0"
    settings.IO_TIMEOUT_S = 1.0
    cluster, stores, topic = setup_sources(stack, unique_name)
    stack.stop_component("redis", timeout_s=5)
    try:
        tasks.poll_store(stores["hbase"].pk)  # the lock cannot be taken: polls anyway, no crash
        tasks.poll_cluster(cluster.pk)
    finally:
        restart(stack, comps["redis"])
    assert Batch.objects.filter(pipeline__store=stores["hbase"], pipeline__topic=topic).count() == 1
    assert health(f"store:{stores['hbase'].pk}").consecutive_failures == 0
    tasks.poll_store(stores["zookeeper"].pk)  # and with Redis back, with the lock again
    assert Batch.objects.filter(pipeline__store=stores["zookeeper"], pipeline__topic=topic).count() == 1


def test_with_redis_stopped_the_broker_is_named_down(private, client, settings, collectors_ticking, vera):
    """Issue #11, observation 4: with Redis (the broker) gone no poll runs, yet
    /api/v1/collectors said every source was healthy. The private Redis is stopped here."""
    from django.urls import reverse


    stack, comps = private
    settings.REDIS_URL = f"redis://{LOOPBACK}:{stack.ports.redis}/0"
    client.force_login(vera)
    source_health_record(source="store:904", label="store s", started_at=collectors_ticking.last_success_at,
                                  duration_ms=5)
    assert client.get(reverse("api_collectors")).json()["healthy"] is True
    stack.stop_component("redis", timeout_s=5)
    try:
        api = client.get(reverse("api_collectors")).json()
        healthz = client.get(reverse("healthz"))
        metrics = client.get(reverse("metrics")).content.decode()
    finally:
        restart(stack, comps["redis"])
    assert api["healthy"] is False and api["down"] == ["broker"]
    broker = api["collectors"][0]
    assert broker["source"] == "collector:broker" and "Redis does not answer: ConnectionError" in broker["detail"]
    assert healthz.status_code == 503
    assert healthz.json()["failed"] == ["redis"] and "ConnectionError" in healthz.json()["redis"]
    assert 'offsetwatch_collector_up{part="broker"} 0' in metrics
