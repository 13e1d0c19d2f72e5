"""The Celery tasks through a real worker and the real Redis broker."""
from __future__ import annotations

import time

import pytest
from celery.contrib.testing.worker import start_worker

from collectors import tasks
from collectors.celery_app import app
from collectors.locks import source_lock
from dashboard.models import Batch, LagSample, SourceHealth
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
