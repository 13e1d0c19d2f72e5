"""Thin Celery tasks: take ids, hold the source's lock, call one cycle function."""
from __future__ import annotations

import logging

from celery import shared_task
from django.conf import settings

from collectors import cycle
from collectors.locks import source_lock
from dashboard.models import Cluster, Store

log = logging.getLogger(__name__)

# A poll may take a few I/O timeouts; the hard limit bounds a stuck one (OFFSETWATCH_POLL_TIME_LIMIT).
SOFT_LIMIT_S = settings.POLL_SOFT_TIME_LIMIT_S
HARD_LIMIT_S = settings.POLL_HARD_TIME_LIMIT_S


@shared_task(name="collectors.tasks.collect_all", ignore_result=True)
def collect_all() -> None:
    for store_id in Store.objects.filter(enabled=True).values_list("pk", flat=True):
        poll_store.delay(store_id)
    for cluster_id in Cluster.objects.values_list("pk", flat=True):
        poll_cluster.delay(cluster_id)


def _poll_alone(source: str, poll, pk: int) -> None:
    """Run one source's poll unless another poll of it is still running."""
    with source_lock(source, ttl_s=HARD_LIMIT_S) as acquired:
        if not acquired:
            log.info("%s: previous poll still running, skipped", source)
            return
        try:
            poll(pk)
        except cycle.SourceFailed:
            pass  # recorded in SourceHealth; the next cycle retries


@shared_task(name="collectors.tasks.poll_store", ignore_result=True, soft_time_limit=SOFT_LIMIT_S, time_limit=HARD_LIMIT_S)
def poll_store(store_id: int) -> None:
    _poll_alone(f"store:{store_id}", cycle.poll_store, store_id)


@shared_task(name="collectors.tasks.poll_cluster", ignore_result=True, soft_time_limit=SOFT_LIMIT_S, time_limit=HARD_LIMIT_S)
def poll_cluster(cluster_id: int) -> None:
    _poll_alone(f"cluster:{cluster_id}", cycle.poll_cluster, cluster_id)


@shared_task(name="collectors.tasks.expire_rewinds", ignore_result=True, soft_time_limit=60, time_limit=90)
def expire_rewinds() -> None:
    from dashboard import rewinds

    rewinds.rewinds_expire()


@shared_task(name="collectors.tasks.prune", ignore_result=True, soft_time_limit=600, time_limit=660)
def prune() -> None:
    from django.utils import timezone

    from dashboard import services

    with source_lock("prune", ttl_s=660) as acquired:
        if acquired:
            services.history_prune(now=timezone.now())
