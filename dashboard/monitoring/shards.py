"""A large cluster's poll in shards of its topics (issue #16): their source names and labels, the
topics of one shard, and the shard counts the fan-out keeps.

A cluster whose poll evaluates more than CLUSTER_SHARD_PARTITIONS partitions (each tracked topic's
partitions once per pipeline reading it: the evaluation's work) is polled as N shards, "cluster:<id>/1" to "cluster:<id>/N", each its own task, lock, backoff and health row; a
smaller one stays the single source "cluster:<id>". Which topic is in which shard, and N from the
partition count: offsetwatch.lib.shards (pure).

N is `Cluster.shards`, written by the fan-out only (`cluster_shards_refresh`, each cycle, from
the `ClusterTopic` rows: each poll keeps the partition count of the topics it read), so the fan-out, the
polls and the pages read one number. A poll sent for a shard that no longer exists (N changed
while it was queued) does nothing; the health rows of such shards are deleted by the fan-out: a
failing one at once, the others once every new source of the cluster has polled (until then a
pipeline shows the cluster's last poll, not "never collected").
"""
from __future__ import annotations

import logging

from django.conf import settings
from django.db import connection
from django.db.models import Q

from dashboard.models import Cluster, ClusterTopic, Pipeline, SourceHealth, Store
from offsetwatch.lib.shards import shard_count, shard_of
from streamoffsets.kafka import WatermarkResult

log = logging.getLogger(__name__)


def cluster_source(cluster_id: int, shard: int | None = None) -> str:
    """The source name of a cluster's poll, or of one shard of it."""
    return f"cluster:{cluster_id}" if shard is None else f"cluster:{cluster_id}/{shard}"


def cluster_sources(cluster_id: int, shards: int) -> list[str]:
    """Every source of one cluster: itself when it is one shard, else each shard."""
    if shards <= 1:
        return [cluster_source(cluster_id)]
    return [cluster_source(cluster_id, k) for k in range(1, shards + 1)]


def source_parse(source: str) -> tuple[int, int | None]:
    """(cluster id, shard or None) of a cluster source name."""
    rest = source.split(":", 1)[1]
    pk, _, shard = rest.partition("/")
    return int(pk), int(shard) if shard else None


def pipeline_cluster_source(*, cluster: Cluster, topic: str) -> str:
    """The source whose poll samples and evaluates the pipelines of `topic` on `cluster`."""
    if cluster.shards <= 1:
        return cluster_source(cluster.pk)
    return cluster_source(cluster.pk, shard_of(topic, cluster.shards))


def shard_label(label: str, shard: int | None, shards: int) -> str:
    """A cluster's label, with the part it is when polled in shards ("... part 2 of 5")."""
    return label if shard is None else f"{label} part {shard} of {shards}"


def shard_topics(*, topics: list[str], shard: int | None, shards: int) -> list[str]:
    """The topics among `topics` that the poll of `shard` reads (all of them when not sharded)."""
    if shard is None:
        return topics
    return [t for t in topics if shard_of(t, shards) == shard]


def topic_partitions_record(*, cluster: Cluster, result: WatermarkResult, topics: list[str]) -> None:
    """Keep the partition count of each topic this poll read; a topic of `topics` the cluster
    no longer has is forgotten. One read, and a write only for counts that changed: an upsert
    per topic row, so shards polled at once never overwrite one another's topics."""
    counts = {t: len(result.by_topic[t]) for t in topics if result.by_topic.get(t)}
    known = dict(ClusterTopic.objects.filter(cluster=cluster, topic__any=topics).values_list("topic", "partitions"))
    changed = [ClusterTopic(cluster=cluster, topic=t, partitions=n) for t, n in counts.items() if known.get(t) != n]
    if changed:
        ClusterTopic.objects.bulk_create(changed, update_conflicts=True, unique_fields=["cluster", "topic"],
                                         update_fields=["partitions"])
    gone = [t for t in known if t not in counts]
    if gone:
        ClusterTopic.objects.filter(cluster=cluster, topic__in=gone).delete()


def cluster_shards_refresh() -> dict[int, int]:
    """Set each cluster's shard count from its tracked topics' partitions (as its polls last read
    them), and delete the health rows of the cluster sources that no longer exist (a cluster now
    in more or fewer shards; a poll of an old shard that finished after the change), so none
    lingers as a failing source. Returns cluster id -> shard count. Run by the fan-out each cycle:
    three queries, plus one UPDATE per cluster whose count changed."""
    # The partitions each poll evaluates: a topic's partitions once per pipeline reading it (the
    # evaluation, most of a poll's time, is per pipeline and partition; 5 groups on a topic of 20
    # partitions are 100). A topic no pipeline reads any more counts nothing.
    partitions_of = _tracked_partitions()
    counts = {}
    for cluster in Cluster.objects.only("pk", "shards"):
        partitions = partitions_of.get(cluster.pk) or 0  # None: no topic counted yet
        counts[cluster.pk] = shard_count(partitions, settings.CLUSTER_SHARD_PARTITIONS)
        if counts[cluster.pk] != cluster.shards:
            log.info("cluster:%s: %d tracked partitions, polled as %d shard(s) (was %d)",
                     cluster.pk, partitions, counts[cluster.pk], cluster.shards)
            Cluster.objects.filter(pk=cluster.pk).update(shards=counts[cluster.pk])
    current = {s for pk, n in counts.items() for s in cluster_sources(pk, n)}
    rows_of: dict[int, list[tuple[int, str, bool, bool]]] = {}
    for pk, source, attempted, failures in SourceHealth.objects.filter(source__startswith="cluster:").values_list(
            "pk", "source", "last_attempt_at", "consecutive_failures"):
        try:
            cluster_id, _ = source_parse(source)
        except ValueError:
            continue
        rows_of.setdefault(cluster_id, []).append((pk, source, attempted is not None, failures > 0))
    stale = []
    for cluster_id, rows in rows_of.items():
        if cluster_id not in counts:
            continue  # a removed cluster's row is left as it was before shards existed (shown idle)
        # The healthy old rows of a cluster whose count changed stay until each of its new sources
        # has polled: until then they are its last poll (pipeline_freshness reads them), not "never
        # collected". A failing old row goes at once: it no longer describes any poll.
        polled = {source for _, source, attempted, _ in rows if attempted}
        all_polled = all(s in polled for s in cluster_sources(cluster_id, counts[cluster_id]))
        stale += [pk for pk, source, _, failing in rows if source not in current and (all_polled or failing)]
    if stale:
        SourceHealth.objects.filter(pk__in=stale).delete()
    return counts


def _tracked_partitions() -> dict[int, int]:
    """cluster id -> its pipelines' topics' partitions, summed in the database by one join (this
    runs at every beat tick, over every pipeline of the fleet; a subquery per pipeline cost a
    probe each: 8 ms for 500)."""
    pipeline, store, topic = (connection.ops.quote_name(m._meta.db_table) for m in (Pipeline, Store, ClusterTopic))
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT s.cluster_id, SUM(t.partitions) FROM {pipeline} p JOIN {store} s ON s.id = p.store_id "
                       f"JOIN {topic} t ON t.cluster_id = s.cluster_id AND t.topic = p.topic GROUP BY s.cluster_id")
        return {cluster_id: int(total) for cluster_id, total in cursor.fetchall()}


def cluster_last_poll(cluster_id: int) -> SourceHealth | None:
    """The newest health row of any of a cluster's sources (its whole poll or a shard's): what a
    pipeline shows while its own shard has not polled yet, just after the shard count changed."""
    rows = SourceHealth.objects.filter(Q(source=cluster_source(cluster_id)) | Q(source__startswith=f"cluster:{cluster_id}/"))
    return rows.exclude(last_attempt_at=None).order_by("-last_attempt_at").first()
