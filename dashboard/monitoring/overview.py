"""The overview and /metrics reads: pipelines filtered as the overview and the API list them, the
overview's rows, and the per-pipeline numbers /metrics exports."""
from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Exists, F, OuterRef, Q

from dashboard.models import Incident, Pipeline


def pipelines_filtered(
    *, statuses: list[int] | None = None, store: str | None = None, cluster: str | None = None, q: str | None = None
) -> list[Pipeline]:
    """Pipelines with their evaluation, ordered as the overview; each filter is optional:
    statuses (Status values, OR), store and cluster names (exact), q (text in topic or group)."""
    rows = _pipelines_query(statuses=statuses, store=store, cluster=cluster, q=q)
    return list(rows.select_related("store", "store__cluster", "evaluation"))


# The overview's orders, by the name its `sort` parameter gives; every one ends on the primary key
# so a page boundary never moves between two requests of the same data.
_LAST = ("topic", "group", "pk")
OVERVIEW_SORTS = {
    "worst": (F("evaluation__status").desc(nulls_last=True), F("evaluation__total_lag").desc(nulls_last=True)),
    "lag": (F("evaluation__total_lag").desc(nulls_last=True),),
    "lag_seconds": (F("evaluation__lag_seconds").desc(nulls_last=True),),
    "last_batch": (F("last_batch_ms").asc(nulls_first=True),),  # the longest silent first
    "name": (),
    "owner": (F("owner").asc(),),
}
OVERVIEW_PAGE_SIZE = 100


def overview_rows(
    *, statuses: list[int] | None = None, store: str | None = None, cluster: str | None = None, q: str | None = None,
    archived: bool = False, sort: str = "worst", offset: int = 0, limit: int | None = None,
) -> list[dict]:
    """The overview table: the pipelines the filters match, in the `sort` order (OVERVIEW_SORTS;
    worst first by default, as the API lists them), rows `offset` to `offset + limit` as plain
    rows of the shown columns only (model instances and their per-partition JSON cost more than
    the page may). Archived pipelines only with `archived` (then with the others). One query."""
    rows = _pipelines_query(statuses=statuses, store=store, cluster=cluster, q=q, archived=None if archived else False,
                            sort=sort)
    open_acknowledged = Incident.objects.filter(pipeline=OuterRef("pk"), partition=None, closed_at=None,
                                                acknowledged_at__isnull=False)
    rows = rows.values(
        "pk", "topic", "group", "last_batch_ms", "owner", "archived_at", store_name=F("store__name"),
        status=F("evaluation__status"),
        reasons=F("evaluation__reasons"), total_lag=F("evaluation__total_lag"),
        lag_seconds=F("evaluation__lag_seconds"), lag_seconds_method=F("evaluation__lag_seconds_method"),
        retention_seconds_left=F("evaluation__retention_seconds_left"),
        sparkline_svg=F("evaluation__sparkline_svg"), sparkline_max=F("evaluation__sparkline_max"), worst_partition=F("evaluation__worst_partition"),
        worst_partition_lag=F("evaluation__worst_partition_lag"), acknowledged=Exists(open_acknowledged),
    )
    return list(rows[offset:offset + limit] if limit is not None else rows[offset:])


def overview_count(
    *, statuses: list[int] | None = None, store: str | None = None, cluster: str | None = None, q: str | None = None,
    archived: bool = False,
) -> int:
    """How many rows overview_rows has for these filters (its pages). One query."""
    return _pipelines_query(statuses=statuses, store=store, cluster=cluster, q=q,
                            archived=None if archived else False).count()


def archived_count(
    *, statuses: list[int] | None = None, store: str | None = None, cluster: str | None = None, q: str | None = None,
) -> int:
    """How many archived pipelines the overview's filters match (its "show N archived" link). One query."""
    return _pipelines_query(statuses=statuses, store=store, cluster=cluster, q=q, archived=True).count()


def _pipelines_query(*, statuses: list[int] | None, store: str | None, cluster: str | None, q: str | None,
                     archived: bool | None = None, sort: str = "worst"):
    """`archived`: None every pipeline, False those not archived, True the archived ones only.
    `sort`: a key of OVERVIEW_SORTS (an unknown one is the default)."""
    rows = Pipeline.objects.all()
    if archived is not None:
        rows = rows.filter(archived_at__isnull=not archived)
    if statuses is not None:
        rows = rows.filter(evaluation__status__in=statuses)
    if store is not None:
        rows = rows.filter(store__name=store)
    if cluster is not None:
        rows = rows.filter(store__cluster__name=cluster)
    if q:
        rows = rows.filter(Q(topic__icontains=q) | Q(group__icontains=q))
    return rows.order_by(*OVERVIEW_SORTS.get(sort, OVERVIEW_SORTS["worst"]), *_LAST)


@dataclass(frozen=True)
class PipelineMetrics:
    """What /metrics says of one pipeline: plain values, so dashboard.api.metrics stays pure."""

    store: str
    topic: str
    group: str
    cluster: str
    status: int | None  # streamoffsets.evaluation.Status; None before the first evaluation
    total_lag: int | None
    lag_seconds: float | None
    retention_seconds_left: float | None
    retention_margin_min: int | None
    evaluated: bool
    partition_lags: tuple[tuple[int, int | None], ...] = ()


def pipelines_metrics() -> list[PipelineMetrics]:
    """Every pipeline's metric values, in one query."""
    out = []
    for p in Pipeline.objects.select_related("store", "store__cluster", "evaluation").order_by("pk"):
        e = getattr(p, "evaluation", None)
        rows = e.partitions if e else []
        margins = [r["retention_margin"] for r in rows if r.get("retention_margin") is not None]
        out.append(PipelineMetrics(
            store=p.store.name, topic=p.topic, group=p.group, cluster=p.store.cluster.name,
            status=e.status if e else None, total_lag=e.total_lag if e else None,
            lag_seconds=e.lag_seconds if e else None,
            retention_seconds_left=e.retention_seconds_left if e else None,
            retention_margin_min=min(margins) if margins else None, evaluated=e is not None,
            partition_lags=tuple((r["partition"], r.get("lag")) for r in rows),
        ))
    return out
