"""Writes: everything that changes the database goes through these functions."""
from __future__ import annotations

import hashlib
import secrets

from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F, JSONField, Min, OuterRef, Subquery
from django.db.models.functions import TruncHour, TruncMinute
from django.utils import timezone

from collectors.readers import StoreReading
from dashboard.models import (
    Batch,
    Cluster,
    Incident,
    LagSample,
    Pipeline,
    PipelineEvaluation,
    PipelineToken,
    SourceHealth,
    StartReport,
    Store,
    StoreProblem,
    WatermarkSample,
)
from dashboard.packing import pack, pack_map, pack_partitions
from streamoffsets import evaluation
from streamoffsets.evaluation import Sample
from streamoffsets.kafka import WatermarkResult
from streamoffsets.types import BatchOffsets, RowProblem


def cluster_get_or_create(*, name: str, bootstrap_servers: str) -> Cluster:
    cluster, _ = Cluster.objects.update_or_create(name=name, defaults={"bootstrap_servers": bootstrap_servers})
    return cluster


def store_get_or_create(*, name: str, kind: str, url: str, cluster: Cluster) -> Store:
    store, _ = Store.objects.update_or_create(name=name, defaults={"kind": kind, "url": url, "cluster": cluster})
    return store


def source_health_record(
    *, source: str, label: str, started_at: datetime, duration_ms: int, error: str | None = None
) -> SourceHealth:
    """Record one poll of a source; an error marks it unreachable until the next success."""
    health, _ = SourceHealth.objects.get_or_create(source=source, defaults={"label": label})
    health.label = label
    health.last_attempt_at = started_at
    health.last_duration_ms = duration_ms
    if error is None:
        health.last_success_at = started_at
        health.consecutive_failures = 0
    else:
        health.last_error = error[:5000]
        health.last_error_at = started_at
        health.consecutive_failures += 1
    health.save()
    return health


def _records_between(previous: dict[str, int] | None, current: dict[str, int]) -> int | None:
    """Records processed by a batch: the sum of per-partition advances; None when unknowable."""
    if previous is None:
        return None
    total = 0
    for partition, offset in current.items():
        before = previous.get(partition)
        if before is None or offset < before:
            return None  # a new partition or a rewind: the batch's start is not known
        total += offset - before
    return total


def _as_json_offsets(batch: BatchOffsets) -> dict[str, int]:
    return {str(p): int(o) for p, o in sorted(batch.offsets.items())}


@transaction.atomic
def store_reading_record(*, store: Store, reading: StoreReading) -> int:
    """Register discovered pipelines, append their new batches and keep row problems visible.

    Returns the number of batches added. Re-recording the same batches adds nothing.
    """
    added = 0
    pipelines = {}
    for key in reading.pipelines:
        pipeline, _ = Pipeline.objects.get_or_create(store=store, topic=key.topic, group=key.group)
        pipelines[key] = pipeline
    for key, batches in reading.batches.items():
        if batches:
            added += _batches_append(pipelines[key], batches, reading.keeps_history)
    _problems_record(store, reading.problems)
    return added


def _batches_append(pipeline: Pipeline, batches: list[BatchOffsets], keeps_history: bool) -> int:
    last = pipeline.batches.order_by("-batch_time_ms").only("offsets", "batch_time_ms").first()
    previous = last.offsets if last else None
    rows = []
    for batch in sorted(batches, key=lambda b: b.batch_time_ms):
        if last is not None and batch.batch_time_ms <= last.batch_time_ms:
            if batch.committed:  # a planned checkpoint batch re-read after Spark committed it
                pipeline.batches.filter(batch_time_ms=batch.batch_time_ms, committed=False).update(committed=True)
            continue
        offsets = _as_json_offsets(batch)
        if not keeps_history and offsets == previous:
            continue  # a store without history was sampled again and had not moved
        rows.append(
            Batch(
                pipeline=pipeline,
                batch_time_ms=batch.batch_time_ms,
                offsets=offsets,
                records=_records_between(previous, offsets),
                batch_id=batch.batch_id,
                committed=batch.committed,
            )
        )
        previous = offsets
    Batch.objects.bulk_create(rows, ignore_conflicts=True, batch_size=1000)
    if rows:
        Pipeline.objects.filter(pk=pipeline.pk).update(last_batch_ms=rows[-1].batch_time_ms)
    return len(rows)


def _problems_record(store: Store, problems: list[RowProblem]) -> None:
    for problem in problems:
        updated = StoreProblem.objects.filter(
            store=store, key=problem.key[:500], problem=problem.problem[:1000]
        ).update(occurrences=F("occurrences") + 1, last_seen_at=timezone.now())
        if not updated:
            StoreProblem.objects.create(store=store, key=problem.key[:500], problem=problem.problem[:1000])


@transaction.atomic
def watermarks_record(*, cluster: Cluster, result: WatermarkResult, sampled_at: datetime) -> int:
    """Store the cluster's watermarks (one row per topic), then per pipeline reading its topics:
    a lag sample and an evaluation (status, lag in seconds, retention risk), and its incident."""
    rows = []
    for topic, parts in result.by_topic.items():
        ids = sorted(parts)
        rows.append(WatermarkSample(
            cluster=cluster, topic=topic, sampled_at=sampled_at, partitions=pack_partitions(ids),
            lows=pack([parts[p].low for p in ids]), highs=pack([parts[p].high for p in ids]),
        ))
    WatermarkSample.objects.bulk_create(rows, batch_size=1000)

    pipelines = list(Pipeline.objects.filter(store__cluster=cluster, topic__in=list(result.by_topic)))
    newest = _newest_offsets([p.pk for p in pipelines])
    samples = []
    for pipeline in pipelines:
        committed = newest.get(pipeline.pk, {})
        highs = {p: w.high for p, w in sorted(result.by_topic[pipeline.topic].items())}
        total = evaluation.sample_lag(committed, highs)
        ids, values = pack_map(committed)
        samples.append(LagSample(pipeline=pipeline, sampled_at=sampled_at, total_lag=total,
                                 partitions=ids, committed=values, last_batch_ms=pipeline.last_batch_ms))
    LagSample.objects.bulk_create(samples, batch_size=1000)
    for pipeline in pipelines:
        marks = {p: (w.low, w.high) for p, w in result.by_topic[pipeline.topic].items()}
        _pipeline_evaluate(pipeline, newest.get(pipeline.pk, {}), marks, now=sampled_at)
    return len(samples)


def _newest_offsets(pipeline_ids: list[int]) -> dict[int, dict[int, int]]:
    """Each pipeline's newest batch offsets, in one query (an indexed subquery per pipeline)."""
    newest = Batch.objects.filter(pipeline=OuterRef("pk")).order_by("-batch_time_ms").values("offsets")[:1]
    rows = Pipeline.objects.filter(pk__in=pipeline_ids).annotate(
        newest=Subquery(newest, output_field=JSONField())
    ).values_list("pk", "newest")
    return {pk: {int(p): o for p, o in offsets.items()} for pk, offsets in rows if offsets}


def _pipeline_evaluate(
    pipeline: Pipeline, committed: dict[int, int], marks: dict[int, tuple[int, int]], now: datetime
) -> PipelineEvaluation:
    """Evaluate one pipeline from its newest samples (pure rules in streamoffsets.evaluation)."""
    since = now - timedelta(seconds=settings.LAG_SECONDS_LOOKBACK_S)
    recent = list(pipeline.lag_samples.order_by("-sampled_at")[: settings.EVALUATION_WINDOW_SAMPLES])[::-1]
    # The topic's watermark history (lag in seconds, retention) covers the window's samples too.
    history = list(WatermarkSample.objects.filter(
        cluster_id=pipeline.store.cluster_id, topic=pipeline.topic,
        sampled_at__gte=min([since] + [s.sampled_at for s in recent]),
    ).order_by("sampled_at"))
    marks_at = {w.sampled_at: w.watermarks() for w in history}
    window = [
        Sample(s.sampled_at.timestamp(), s.committed_offsets(),
               {p: hi for p, (_, hi) in marks_at.get(s.sampled_at, {}).items()},
               s.last_batch_ms / 1000 if s.last_batch_ms else None, s.total_lag)
        for s in recent
    ]
    partitions = evaluation.evaluate_partitions(committed, marks)
    batch_times = pipeline.batches.order_by("-batch_time_ms").values_list("batch_time_ms", flat=True)[:20]
    interval = evaluation.batch_interval_s([t / 1000 for t in batch_times])
    status = evaluation.evaluate_status(
        window, partitions, interval, now.timestamp(),
        stop_after_intervals=settings.STOP_AFTER_INTERVALS, min_stale_s=settings.STALE_AFTER_S,
    )

    highs: dict[int, list[tuple[float, int]]] = {}
    lows: dict[int, list[tuple[float, int]]] = {}
    for w in history:
        if w.sampled_at < since:
            continue
        for p, (lo, hi) in marks_at[w.sampled_at].items():
            highs.setdefault(p, []).append((w.sampled_at.timestamp(), hi))
            lows.setdefault(p, []).append((w.sampled_at.timestamp(), lo))
    commits: dict[int, list[tuple[float, int]]] = {}
    for sample in window:
        for p, c in sample.committed.items():
            commits.setdefault(p, []).append((sample.at_s, c))

    rows, worst_seconds, worst_method, soonest_loss = [], None, "", None
    for e in partitions:
        row = {"partition": e.partition, "committed": e.committed, "low": e.low, "high": e.high, "lag": e.lag,
               "state": e.state.value, "messages_lost": e.messages_lost, "lag_seconds": None,
               "lag_method": "", "retention_margin": None, "retention_seconds_left": None}
        if e.committed is not None and e.high is not None:
            tl = evaluation.lag_seconds(e.committed, highs.get(e.partition, []), now.timestamp())
            row["lag_seconds"], row["lag_method"] = tl.seconds, tl.method
            if tl.seconds is not None and (worst_seconds is None or tl.seconds > worst_seconds):
                worst_seconds, worst_method = tl.seconds, tl.method
            elif worst_seconds is None and not worst_method:
                worst_method = tl.method
            risk = evaluation.retention_risk(e.committed, lows.get(e.partition, []), commits.get(e.partition, []))
            row["retention_margin"], row["retention_seconds_left"] = risk.margin, risk.seconds_left
            if risk.seconds_left is not None:
                soonest_loss = risk.seconds_left if soonest_loss is None else min(soonest_loss, risk.seconds_left)
                if risk.seconds_left < settings.RETENTION_WARN_S and status.status < evaluation.Status.WARN:
                    status.status = evaluation.Status.WARN
                    status.reasons.append(risk.describe(e.partition))
        rows.append(row)

    result, _ = PipelineEvaluation.objects.update_or_create(
        pipeline=pipeline,
        defaults=dict(
            evaluated_at=now, status=int(status.status), reasons=status.reasons, partitions=rows,
            total_lag=evaluation.total_lag(partitions), lag_seconds=worst_seconds,
            lag_seconds_method=worst_method[:100], batch_interval_s=interval, retention_seconds_left=soonest_loss,
        ),
    )
    _incident_update(pipeline, status, now)
    return result


def _incident_update(pipeline: Pipeline, status: evaluation.StatusResult, now: datetime) -> None:
    """A status above OK opens an incident (or raises the open one's worst); OK closes it."""
    open_incident = pipeline.incidents.filter(closed_at=None).first()
    if status.status == evaluation.Status.OK:
        if open_incident:
            open_incident.closed_at = now
            open_incident.save(update_fields=["closed_at"])
        return
    if open_incident is None:
        Incident.objects.create(pipeline=pipeline, opened_at=now, worst_status=int(status.status), reasons=status.reasons)
    elif status.status >= open_incident.worst_status:
        open_incident.worst_status = int(status.status)
        open_incident.reasons = status.reasons
        open_incident.save(update_fields=["worst_status", "reasons"])


# --- machine tokens and start reports -----------------------------------------------------------

TOKEN_PREFIX = "owp_"


def _token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def pipeline_token_issue(*, pipeline: Pipeline, name: str) -> tuple[PipelineToken, str]:
    """A new token for a pipeline's job. The plain token is returned once and never stored."""
    plain = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = PipelineToken.objects.create(pipeline=pipeline, name=name, token_hash=_token_hash(plain), prefix=plain[:12])
    return token, plain


def pipeline_token_revoke(*, token: PipelineToken) -> None:
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])


def pipeline_for_token(*, token: str) -> Pipeline | None:
    """The pipeline a (non-revoked) token belongs to; None for unknown or revoked tokens."""
    if not token.startswith(TOKEN_PREFIX):
        return None
    found = PipelineToken.objects.select_related("pipeline").filter(
        token_hash=_token_hash(token), revoked_at=None
    ).first()
    return found.pipeline if found else None


class InvalidReport(ValueError):
    """A start report that does not have the shape streamoffsets.restart produces."""


def start_report_record(*, pipeline: Pipeline, report: dict) -> StartReport:
    """Record where a job started; the report must be for the token's own pipeline."""
    if not isinstance(report, dict):
        raise InvalidReport("the report must be a JSON object")
    if report.get("topic") != pipeline.topic or report.get("group") != pipeline.group:
        raise InvalidReport(
            f"the report is for {report.get('topic')!r}/{report.get('group')!r} but the token belongs to "
            f"{pipeline.topic!r}/{pipeline.group!r}"
        )
    offsets = report.get("offsets")
    if not isinstance(offsets, dict) or not all(
        str(p).isdigit() and isinstance(o, int) and not isinstance(o, bool) and o >= 0 for p, o in offsets.items()
    ):
        raise InvalidReport("'offsets' must map partition ids to non-negative integers")
    clamps = report.get("clamps") or []
    if not isinstance(clamps, list) or not all(isinstance(c, dict) for c in clamps):
        raise InvalidReport("'clamps' must be a list of objects")
    try:
        lost = sum(int(c.get("messages_lost", 0)) for c in clamps)
    except (TypeError, ValueError):
        raise InvalidReport("'clamps[].messages_lost' must be integers") from None
    return StartReport.objects.create(
        pipeline=pipeline, report=report, first_start=bool(report.get("first_start")),
        clamped_partitions=len(clamps), messages_lost=lost,
    )


# --- history retention -------------------------------------------------------------------------


def _thin(queryset, key_fields: list[str], trunc) -> int:
    """Keep the first sample per key in each bucket (minute or hour); delete the others."""
    keep = (
        queryset.annotate(bucket=trunc("sampled_at"))
        .values(*key_fields, "bucket")
        .annotate(keep=Min("id"))
        .values("keep")
    )
    deleted, _ = queryset.exclude(id__in=Subquery(keep)).delete()
    return deleted


def history_prune(*, now: datetime) -> dict[str, int]:
    """Bound history: full resolution for RETENTION_RAW_S, then one sample per minute, then per
    hour, then nothing; old batches and store problems go after RETENTION_BATCHES_S."""
    raw_until = now - timedelta(seconds=settings.RETENTION_RAW_S)
    minute_until = now - timedelta(seconds=settings.RETENTION_MINUTE_S)
    hour_until = now - timedelta(seconds=settings.RETENTION_HOUR_S)
    counts = {}
    for model, key in ((WatermarkSample, ["cluster_id", "topic"]), (LagSample, ["pipeline_id"])):
        name = model.__name__
        counts[f"{name} expired"] = model.objects.filter(sampled_at__lt=hour_until).delete()[0]
        counts[f"{name} to hourly"] = _thin(
            model.objects.filter(sampled_at__lt=minute_until, sampled_at__gte=hour_until), key, TruncHour)
        counts[f"{name} to per-minute"] = _thin(
            model.objects.filter(sampled_at__lt=raw_until, sampled_at__gte=minute_until), key, TruncMinute)
    batches_until_ms = int((now - timedelta(seconds=settings.RETENTION_BATCHES_S)).timestamp() * 1000)
    counts["Batch expired"] = Batch.objects.filter(batch_time_ms__lt=batches_until_ms).delete()[0]
    counts["StoreProblem expired"] = StoreProblem.objects.filter(
        last_seen_at__lt=now - timedelta(seconds=settings.RETENTION_BATCHES_S)).delete()[0]
    return counts
