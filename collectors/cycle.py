"""One collection cycle: read each source, hand the result to a service, record the source's health.

Used by the Celery tasks and by `manage.py collect_once`. A failing source is recorded as
unreachable with its error and never stops the others.
"""
from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime

from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.utils import timezone

from collectors.record_times import cycle_record_times
from dashboard.models import Cluster, Store
from dashboard.monitoring import shards
from dashboard.monitoring.read_plan import store_read_plan
from dashboard.monitoring.selectors import cluster_committed, cluster_topics, kafka_client_config
from dashboard.monitoring.services import source_health_record, store_reading_record, watermarks_record
from dashboard.rewinds import services as rewinds
from streamoffsets.errors import OffsetStoreError
from streamoffsets.stores.reading import read_store, read_watermarks
from streamoffsets.urls import mask_secrets, mask_url

log = logging.getLogger(__name__)


@dataclass
class CycleSummary:
    batches_added: int = 0
    lag_samples: int = 0
    errors: list[str] = field(default_factory=list)


def _describe(exc: Exception) -> str:
    return str(exc) if isinstance(exc, OffsetStoreError) else f"{type(exc).__name__}: {exc}"


class SourceFailed(Exception):
    """A source's poll failed; its health row already says why."""


@dataclass
class PollOutcome:
    started_at: datetime
    # A partial failure (e.g. one missing topic) that does not stop the poll but must be shown.
    warning: str | None = None


def source_label(kind: str, name: str, url: str) -> str:
    """How a source is named in its health row, logs, pages and metrics: its URL masked
    (`zk://user:***@host`), since every viewer sees the label."""
    return f"{kind} {name} ({mask_url(url)})"


@contextmanager
def _polling(source: str, label: str, secret_urls: tuple[str, ...]):
    """Record the poll of one source in SourceHealth; a failure becomes SourceFailed. A poll cut
    by the worker's soft time limit is recorded as the collector's failure, not the source's.
    Errors and warnings are stored with the secrets of `secret_urls` masked: a client library's
    message may quote the URL or its password."""
    outcome, t0 = PollOutcome(timezone.now()), time.monotonic()
    try:
        yield outcome
    except SoftTimeLimitExceeded as exc:
        # The worker's own limit stopped the poll: the collector is named, not the source.
        took = time.monotonic() - t0
        error = (f"the poll was cut by the worker's time limit after {took:.0f} s "
                 f"(soft limit {settings.POLL_SOFT_TIME_LIMIT_S} s, OFFSETWATCH_POLL_TIME_LIMIT): "
                 "the collector stopped it before the source answered")
        log.warning("%s: %s", label, error)
        source_health_record(
            source=source, label=label, started_at=outcome.started_at, duration_ms=int(took * 1000),
            error=error, error_by="collector",
        )
        raise SourceFailed(error) from exc
    except Exception as exc:  # any failure of one source is recorded and the cycle goes on
        error = mask_secrets(_describe(exc), secret_urls)
        log.warning("%s failed: %s", label, error)
        source_health_record(
            source=source, label=label, started_at=outcome.started_at,
            duration_ms=int((time.monotonic() - t0) * 1000), error=error,
        )
        raise SourceFailed(error) from exc
    source_health_record(
        source=source, label=label, started_at=outcome.started_at,
        duration_ms=int((time.monotonic() - t0) * 1000), warning=mask_secrets(outcome.warning or "", secret_urls),
    )


def poll_store(store_id: int, timeout_s: float | None = None) -> int:
    """Read one store's new batches. Returns batches added; a failure raises SourceFailed."""
    store = Store.objects.select_related("cluster").get(pk=store_id)
    with _polling(f"store:{store.pk}", source_label("store", store.name, store.url), (store.url,)):
        plan = store_read_plan(store=store, now=timezone.now())
        reading = read_store(
            store.url, plan, timeout_s=timeout_s or settings.IO_TIMEOUT_S, ping_timeout_s=settings.POLL_PROBE_TIMEOUT_S,
            kafka_config=kafka_client_config(cluster_name=store.cluster.name),
        )
        added = store_reading_record(store=store, reading=reading, now_ms=plan.now_ms)
    # Rewinds applied to this store's pipelines are verified from the batches just recorded.
    rewinds.rewinds_verify(store_id=store.pk)
    return added


def poll_cluster(cluster_id: int, timeout_s: float | None = None, shard: int | None = None) -> int:
    """Sample the watermarks of every topic tracked on a cluster and record lag. Returns lag samples.
    A cluster polled in shards (dashboard.monitoring.shards) is polled one `shard` at a time: the
    topics of that shard only, recorded and evaluated as the whole cluster's would be. A poll for
    a shard the cluster no longer has (its count changed while the poll was queued) does nothing."""
    cluster = Cluster.objects.get(pk=cluster_id)
    if (shard is None) != (cluster.shards <= 1) or (shard is not None and shard > cluster.shards):
        log.info("cluster:%s: poll of shard %s skipped: the cluster is now polled as %d shard(s)",
                 cluster.pk, shard, cluster.shards)
        return 0
    label = shards.shard_label(source_label("cluster", cluster.name, cluster.bootstrap_servers), shard, cluster.shards)
    with _polling(shards.cluster_source(cluster.pk, shard), label, (cluster.bootstrap_servers,)) as outcome:
        topics = shards.shard_topics(topics=cluster_topics(cluster=cluster), shard=shard, shards=cluster.shards)
        timeout_s = timeout_s or settings.IO_TIMEOUT_S
        result = read_watermarks(cluster.bootstrap_servers, topics, timeout_s=timeout_s,
                                 chunk_size=settings.KAFKA_LIST_OFFSETS_CHUNK, ping_timeout_s=settings.POLL_PROBE_TIMEOUT_S,
                                 config=kafka_client_config(cluster_name=cluster.name))
        shards.topic_partitions_record(cluster=cluster, result=result, topics=topics)
        warnings = [f"topic {t!r}: {why}" for t, why in sorted(result.missing.items())]
        pipelines, committed = cluster_committed(cluster=cluster, topics=list(result.by_topic))
        topics_of = {p.pk: p.topic for p in pipelines}
        # The records at the committed positions are read after the watermarks, in a thread with
        # no database access, while the samples are stored and the history loaded; the evaluation
        # waits for them (at most the read's budget). A failure there is a warning.
        marks = {t: {p: (w.low, w.high) for p, w in parts.items()} for t, parts in result.by_topic.items()}
        with ThreadPoolExecutor(1, thread_name_prefix="record-times") as pool:
            reading = pool.submit(cycle_record_times, cluster, marks, topics_of,
                                  {pk: c.offsets for pk, c in committed.items()}, timeout_s, shard)

            def records_later():
                records = reading.result()
                return records.found, records.missing

            added = watermarks_record(cluster=cluster, result=result, sampled_at=outcome.started_at,
                                               records_later=records_later, committed=committed, pipelines=pipelines)
            records = reading.result()  # read already, unless there was no pipeline to evaluate
        if records.warning:
            warnings.append(records.warning)
        outcome.warning = "; ".join(warnings) or None
        # Which process polled which shard, in the worker's log (and the cross-process test's proof).
        log.info("%s: %d topic(s) read, %d lag sample(s)", shards.cluster_source(cluster.pk, shard), len(topics), added)
        return added


def collect_once() -> CycleSummary:
    """Every enabled store, then every cluster, synchronously (debugging and tests); rewinds
    past their deadlines expire first, as beat does every poll."""
    summary = CycleSummary()
    rewinds.rewinds_expire()
    for store_id in Store.objects.filter(enabled=True).values_list("pk", flat=True):
        try:
            summary.batches_added += poll_store(store_id)
        except SourceFailed as exc:
            summary.errors.append(str(exc))
    shards.cluster_shards_refresh()
    for cluster_id, count in Cluster.objects.values_list("pk", "shards"):
        for shard in ([None] if count <= 1 else range(1, count + 1)):
            try:
                summary.lag_samples += poll_cluster(cluster_id, shard=shard)
            except SourceFailed as exc:
                summary.errors.append(str(exc))
    return summary
