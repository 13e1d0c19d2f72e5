"""Thin Celery tasks: take ids, hold the source's lock, call one cycle function.

Task names are part of the deployment (queued messages and beat entries name them): keep them."""
from __future__ import annotations

import logging

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from collectors import cycle, fanout
from collectors.locks import queued_clear, source_lock
from dashboard.monitoring import shards
from dashboard.monitoring.pruning import history_prune
from dashboard.rewinds.services import rewinds_expire

log = logging.getLogger(__name__)

# A poll may take a few I/O timeouts; the hard limit bounds a stuck one (OFFSETWATCH_POLL_TIME_LIMIT).
SOFT_LIMIT_S = settings.POLL_SOFT_TIME_LIMIT_S
HARD_LIMIT_S = settings.POLL_HARD_TIME_LIMIT_S


@shared_task(name="collectors.tasks.collect_all", ignore_result=True)
def collect_all() -> None:
    fanout.cycle_fan_out(now=timezone.now(), enqueue=_enqueue)


def _enqueue(source: str, probe: bool = False) -> None:
    kwargs = {"probe": True} if probe else {}
    if source.startswith("store:"):
        task, pk = poll_store, int(source.split(":", 1)[1])
    else:
        task, (pk, shard) = poll_cluster, shards.source_parse(source)
        if shard is not None:
            kwargs["shard"] = shard
    # Expires with its queued mark: a poll still waiting then is dropped and its source sent afresh.
    task.apply_async((pk,), kwargs, expires=settings.POLL_QUEUED_TTL_S)


def _poll_alone(source: str, poll, pk: int, probe: bool = False, **kwargs) -> None:
    """Run one source's poll unless another poll of it is still running."""
    with source_lock(source) as acquired:
        queued_clear(source)  # taken off the queue: collect_all may send it again after this poll
        if not acquired:
            log.info("%s: previous poll still running, skipped", source)
            return
        try:
            poll(pk, timeout_s=settings.POLL_PROBE_TIMEOUT_S if probe else settings.IO_TIMEOUT_S, **kwargs)
        except cycle.SourceFailed:
            pass  # recorded in SourceHealth; the next cycle retries (after its backoff)


@shared_task(name="collectors.tasks.poll_store", ignore_result=True, soft_time_limit=SOFT_LIMIT_S, time_limit=HARD_LIMIT_S)
def poll_store(store_id: int, probe: bool = False) -> None:
    _poll_alone(f"store:{store_id}", cycle.poll_store, store_id, probe)


@shared_task(name="collectors.tasks.poll_cluster", ignore_result=True, soft_time_limit=SOFT_LIMIT_S, time_limit=HARD_LIMIT_S)
def poll_cluster(cluster_id: int, probe: bool = False, shard: int | None = None) -> None:
    """The cluster's poll, or one shard's (`shard`: 1 to the cluster's shard count) when it is
    polled in shards (dashboard.monitoring.shards)."""
    # After this cycle's store polls (bounded): their offsets, not the previous cycle's (#13).
    # Waited before taking the lock: the queued mark stays, so the cluster is not sent twice.
    # Every shard waits for the same stores: its pipelines are theirs.
    source = shards.cluster_source(cluster_id, shard)
    fanout.cluster_stores_wait(cluster_id, source=source)
    _poll_alone(source, cycle.poll_cluster, cluster_id, probe, shard=shard)


@shared_task(name="collectors.tasks.expire_rewinds", ignore_result=True, soft_time_limit=60, time_limit=90)
def expire_rewinds() -> None:
    rewinds_expire()


@shared_task(name="collectors.tasks.prune", ignore_result=True, soft_time_limit=600, time_limit=660)
def prune() -> None:
    with source_lock("prune", ttl_s=660) as acquired:
        if acquired:
            history_prune(now=timezone.now())
