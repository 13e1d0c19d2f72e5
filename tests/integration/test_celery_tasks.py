"""The Celery tasks through a real worker and the real Redis broker."""
from __future__ import annotations

import time

import pytest
from celery.contrib.testing.worker import start_worker

from collectors import tasks
from collectors.locks import source_lock
from dashboard.models import Batch, LagSample, SourceHealth
from dashboard.monitoring.services import cluster_get_or_create, store_get_or_create
from offsetwatch.celery import app
from tests.factories import hbase_store_setup, save


def wait_for(predicate, timeout_s: float = 30.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return False


@pytest.mark.django_db(transaction=True)
def test_collect_all_fans_out_to_poll_tasks_on_a_real_worker(stack, unique_name):
    s = hbase_store_setup(stack, unique_name, partitions=2, records=6)
    save(s, "g", 1_700_000_000_000, {0: 1, 1: 2})
    with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=10):
        tasks.collect_all.delay()
        assert wait_for(lambda: Batch.objects.filter(pipeline__store=s.store).exists())
        # The cluster poll may run before the store poll has registered the pipeline; the
        # next beat covers that, here we enqueue it again.
        assert wait_for(lambda: SourceHealth.objects.filter(source=f"cluster:{s.cluster.pk}").exists())
        tasks.poll_cluster.delay(s.cluster.pk)
        assert wait_for(lambda: LagSample.objects.filter(pipeline__store=s.store).exists())
    sample = LagSample.objects.filter(pipeline__store=s.store).latest("sampled_at")
    assert sample.total_lag == (3 - 1) + (3 - 2)


@pytest.mark.django_db
def test_a_poll_is_skipped_while_another_holds_the_sources_lock(stack, unique_name):
    s = hbase_store_setup(stack, unique_name, partitions=1)
    save(s, "g", 1_700_000_000_000, {0: 1})
    with source_lock(f"store:{s.store.pk}", ttl_s=30) as held:
        assert held is True
        tasks.poll_store(s.store.pk)  # runs inline: finds the lock taken, does nothing
        assert not Batch.objects.filter(pipeline__store=s.store).exists()
    tasks.poll_store(s.store.pk)
    assert Batch.objects.filter(pipeline__store=s.store).count() == 1


# --- one poll per source in the queue, backoff, locks, the worker's time limit (issue #11: 5, 6) ---

def broker():
    import redis
    from django.conf import settings

    return redis.Redis.from_url(settings.REDIS_URL)


@pytest.fixture
def empty_queues():
    """The real broker's queues and marks emptied, before and after (tests share its db)."""
    def clear():
        r = broker()
        r.delete("collect", "default")
        for key in r.scan_iter("offsetwatch:queued:*"):
            r.delete(key)
        for key in r.scan_iter("offsetwatch:poll:*"):
            r.delete(key)
    clear()
    yield
    clear()


def queued_polls() -> list[str]:
    """The poll tasks waiting in the broker's `collect` queue, as sources ("store:<id>")."""
    import ast
    import json

    found = []
    for raw in broker().lrange("collect", 0, -1):
        headers = json.loads(raw)["headers"]
        kind = "store" if headers["task"] == "collectors.tasks.poll_store" else "cluster"
        found.append(f"{kind}:{ast.literal_eval(headers['argsrepr'])[0]}")
    return sorted(found)


def file_store(unique_name, cluster, root):
    from dashboard.monitoring.services import store_get_or_create

    return store_get_or_create(name=unique_name("f"), kind="file", url=f"file://{root}", cluster=cluster)


@pytest.mark.django_db
def test_collect_all_does_not_enqueue_a_source_already_queued_or_running(empty_queues, unique_name, tmp_path):
    """Issue #11, observation 5: beat enqueued every source every cycle whatever was queued."""

    cluster = cluster_get_or_create(name=unique_name("c"), bootstrap_servers="127.0.0.1:1")
    a, b = file_store(unique_name, cluster, tmp_path / "a"), file_store(unique_name, cluster, tmp_path / "b")
    everything = sorted([f"store:{a.pk}", f"store:{b.pk}", f"cluster:{cluster.pk}"])

    for _ in range(3):  # three beats while no worker runs: one poll per source waits, not three
        tasks.collect_all()
    assert queued_polls() == everything

    broker().delete("collect")  # a worker took them: each poll clears its mark as it starts
    for source in everything:
        tasks.queued_clear(source)
    with source_lock(f"store:{a.pk}") as held:  # store a's poll is running
        assert held
        tasks.collect_all()
        assert queued_polls() == sorted([f"store:{b.pk}", f"cluster:{cluster.pk}"])
    broker().delete("collect")
    for source in everything:
        tasks.queued_clear(source)
    tasks.collect_all()  # store a's poll ended: sent again
    assert queued_polls() == everything


@pytest.mark.django_db(transaction=True)
def test_a_failing_source_backs_off_while_a_healthy_one_keeps_its_cadence(stack, empty_queues, unique_name,
                                                                          tmp_path, settings):
    """Issue #11, observation 5: an unreachable source's full-timeout polls back off (failure
    counts 0-2, 4, 8, ...) and the cycles between poll it as a probe with the short timeout, while
    the healthy ones are sent every cycle; a real worker runs the polls."""
    from celery.signals import before_task_publish


    settings.POLL_INTERVAL_S = 1.0
    settings.POLL_BACKOFF_MAX_S = 60.0
    (tmp_path / "good").mkdir()
    cluster = cluster_get_or_create(name=unique_name("c"), bootstrap_servers=stack.kafka_bootstrap)
    good = file_store(unique_name, cluster, tmp_path / "good")
    bad = file_store(unique_name, cluster, tmp_path / "unmounted")  # fails at once: no root

    sent: list[tuple[str, bool]] = []

    def count(sender=None, body=None, **kwargs):
        if sender == "collectors.tasks.poll_store":
            sent.append((f"store:{body[0][0]}", bool(body[1].get("probe"))))
    before_task_publish.connect(count)
    cycles = 8
    try:
        with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=10):
            start = time.monotonic()
            for i in range(cycles):
                while time.monotonic() < start + i * settings.POLL_INTERVAL_S:
                    time.sleep(0.02)
                tasks.collect_all()  # what beat sends every interval, run here on the clock
                assert wait_for(lambda: not broker().keys("offsetwatch:queued:store:*"), timeout_s=0.9)
    finally:
        before_task_publish.disconnect(count)
    assert sent.count((f"store:{good.pk}", False)) == cycles
    # Failures 0, 1, 2 and 4 get the full timeout; failures 3, 5, 6, 7 a probe.
    assert [probe for source, probe in sent if source == f"store:{bad.pk}"] == [
        False, False, False, True, False, True, True, True]
    assert SourceHealth.objects.get(source=f"store:{bad.pk}").consecutive_failures == cycles


def test_full_timeout_attempts_back_off_up_to_the_cap(settings):
    from dashboard.monitoring.health import full_attempt_due

    settings.POLL_INTERVAL_S, settings.POLL_BACKOFF_MAX_S = 2.0, 60.0  # the cap: every 30 cycles
    assert [f for f in range(100) if full_attempt_due(f)] == [0, 1, 2, 4, 8, 16, 30, 60, 90]


LOCK_HOLDER = """
import os, sys, time
import django
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "offsetwatch.settings")
django.setup()
from collectors import tasks

def poll(pk, timeout_s=None):
    print("polling", flush=True)
    time.sleep(120)

tasks._poll_alone(sys.argv[1], poll, 0)
"""


@pytest.mark.server
def test_a_killed_workers_lock_is_free_within_the_short_ttl(unique_name):
    """Issue #11, observation 6: the lock lived as long as the hard time limit (45 s), so a
    killed worker blocked its source that long. A process that holds it is SIGKILLed here."""
    import os
    import signal
    import subprocess
    import sys

    from tests.paths import ROOT

    source = f"store:{unique_name('killed')}"
    env = {**os.environ, "OFFSETWATCH_POLL_LOCK_TTL": "2"}
    holder = subprocess.Popen([sys.executable, "-c", LOCK_HOLDER, source], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "polling"
        with source_lock(source, ttl_s=30) as held:
            assert held is False  # its poll runs: held, and renewed past the 2 s
        time.sleep(2.5)
        with source_lock(source, ttl_s=30) as held:
            assert held is False
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
        killed_at = time.monotonic()
    finally:
        if holder.poll() is None:
            holder.kill()
    freed = None
    while time.monotonic() < killed_at + 10:
        with source_lock(source, ttl_s=30) as held:
            if held:
                freed = time.monotonic() - killed_at
                break
        time.sleep(0.1)
    assert freed is not None and freed <= 2.5, freed


@pytest.mark.server
def test_the_lock_is_renewed_while_a_poll_outlasts_its_ttl(settings, unique_name):
    settings.POLL_LOCK_TTL_S = 1.0
    source = f"store:{unique_name('slow')}"
    seen = []

    def slow_poll(pk, timeout_s=None):
        for _ in range(6):  # 3 s: three TTLs
            time.sleep(0.5)
            with source_lock(source, ttl_s=30) as other:
                seen.append(other)

    tasks._poll_alone(source, slow_poll, 0)
    assert seen == [False] * 6  # never free while the poll ran
    with source_lock(source, ttl_s=30) as held:
        assert held  # released at its end


@pytest.mark.django_db
def test_a_poll_cut_by_the_workers_time_limit_names_the_collector(stack, unique_name, settings):
    """Issue #11, observation 6: SoftTimeLimitExceeded was recorded as the source failing. The
    store here is frozen (accepts, never answers) and the worker's soft limit comes first;
    billiard delivers it as a signal whose handler raises SoftTimeLimitExceeded, as here."""
    import signal
    import socket

    from celery.exceptions import SoftTimeLimitExceeded


    settings.IO_TIMEOUT_S = 20.0
    frozen = socket.socket()
    frozen.bind(("127.0.0.1", 0))
    frozen.listen(8)
    cluster = cluster_get_or_create(name=unique_name("c"), bootstrap_servers=stack.kafka_bootstrap)
    store = store_get_or_create(name=unique_name("h"), kind="hbase", cluster=cluster,
                                         url=f"hbase://127.0.0.1:{frozen.getsockname()[1]}/offsets")

    def soft_limit(signum, frame):
        raise SoftTimeLimitExceeded()
    previous = signal.signal(signal.SIGALRM, soft_limit)
    signal.setitimer(signal.ITIMER_REAL, 1.0)
    try:
        tasks.poll_store(store.pk)  # returns: the failure is recorded, the task ends quietly
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        frozen.close()
    health = SourceHealth.objects.get(source=f"store:{store.pk}")
    assert health.consecutive_failures == 1
    assert health.last_error.startswith("the poll was cut by the worker's time limit after 1 s")
    assert health.last_error_by == "collector"
    assert "SoftTimeLimitExceeded" not in health.last_error


# --- the cluster poll evaluates after the cycle's store polls (issue #13) ---

def _timed_reads(monkeypatch, store_delay_s: float) -> list[tuple[str, float]]:
    """Note when each store read ends and each watermark read starts; the store read is made
    slow (`store_delay_s`) at the reader seam, as a store with many pipelines is."""
    from collectors import cycle

    events: list[tuple[str, float]] = []
    read_store, read_watermarks = cycle.read_store, cycle.read_watermarks

    def slow_store(*args, **kwargs):
        time.sleep(store_delay_s)
        try:
            return read_store(*args, **kwargs)
        finally:
            events.append(("store read", time.monotonic()))

    def watermarks(*args, **kwargs):
        events.append(("watermarks read", time.monotonic()))
        return read_watermarks(*args, **kwargs)

    monkeypatch.setattr(cycle, "read_store", slow_store)
    monkeypatch.setattr(cycle, "read_watermarks", watermarks)
    return events


@pytest.mark.django_db(transaction=True)
def test_the_cluster_poll_evaluates_after_the_cycles_store_polls(stack, empty_queues, unique_name, monkeypatch):
    """Two worker threads take the store's and the cluster's polls at the same instant: the
    cluster's reads the watermarks only once the store's poll wrote this cycle's offsets."""
    s = hbase_store_setup(stack, unique_name, partitions=2, records=6)
    save(s, "g", 1_700_000_000_000, {0: 1, 1: 2})
    events = _timed_reads(monkeypatch, store_delay_s=1.0)
    with start_worker(app, pool="threads", concurrency=2, perform_ping_check=False, shutdown_timeout=10):
        tasks.collect_all()
        assert wait_for(lambda: LagSample.objects.filter(pipeline__store=s.store).exists(), timeout_s=15)
    assert [e for e, _ in events] == ["store read", "watermarks read"]
    # The first cycle's sample already has the store's offsets (it was sampled after them).
    sample = LagSample.objects.get(pipeline__store=s.store)
    assert sample.total_lag == (3 - 1) + (3 - 2)


@pytest.mark.django_db(transaction=True)
def test_a_slow_store_holds_the_cluster_poll_for_the_bound_only(stack, empty_queues, unique_name, monkeypatch,
                                                                settings):
    settings.CLUSTER_WAIT_FOR_STORES_S = 0.5
    s = hbase_store_setup(stack, unique_name, partitions=1, records=3)
    save(s, "g", 1_700_000_000_000, {0: 1})
    events = _timed_reads(monkeypatch, store_delay_s=4.0)
    with start_worker(app, pool="threads", concurrency=2, perform_ping_check=False, shutdown_timeout=10):
        sent = time.monotonic()
        tasks.collect_all()
        assert wait_for(lambda: SourceHealth.objects.filter(source=f"store:{s.store.pk}").exists(), timeout_s=15)
    (first, first_at), (second, second_at) = events
    assert (first, second) == ("watermarks read", "store read")
    assert 0.5 <= first_at - sent < 3.0  # waited the bound, not the store's 4 s


@pytest.mark.django_db
def test_the_wait_for_the_stores_never_depends_on_redis(unique_name, tmp_path, settings):
    """Redis away (the broker too): the cluster's poll goes on at once and records what it finds."""
    from collectors import fanout

    cluster = cluster_get_or_create(name=unique_name("c"), bootstrap_servers="127.0.0.1:1")
    file_store(unique_name, cluster, tmp_path / "a")
    settings.REDIS_URL = "redis://127.0.0.1:1/0"
    started = time.monotonic()
    assert fanout.cluster_stores_wait(cluster.pk, bound_s=5.0) == []
    assert time.monotonic() - started < 2.0
