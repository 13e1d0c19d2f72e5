"""Writes: everything that changes the database goes through these functions."""
from __future__ import annotations

import contextlib
import hashlib
import logging
import secrets
from datetime import datetime, timedelta
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.db.models import F, JSONField, Min, OuterRef, Subquery
from django.db.models.functions import TruncHour, TruncMinute
from django.utils import timezone

from collectors.readers import StoreReading
from dashboard import charts, exports, selectors
from dashboard.models import (
    Batch,
    Cluster,
    ExportJob,
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
from dashboard.params import ChartParams, TimeRange, time_zone
from streamoffsets import evaluation
from streamoffsets.evaluation import Sample
from streamoffsets.kafka import WatermarkResult
from streamoffsets.types import BatchOffsets, RowProblem

log = logging.getLogger(__name__)


def cluster_get_or_create(*, name: str, bootstrap_servers: str) -> Cluster:
    cluster, _ = Cluster.objects.update_or_create(name=name, defaults={"bootstrap_servers": bootstrap_servers})
    return cluster


def store_get_or_create(*, name: str, kind: str, url: str, cluster: Cluster) -> Store:
    store, _ = Store.objects.update_or_create(name=name, defaults={"kind": kind, "url": url, "cluster": cluster})
    return store


def source_health_record(
    *, source: str, label: str, started_at: datetime, duration_ms: int, error: str | None = None,
    warning: str = "",
) -> SourceHealth:
    """Record one poll of a source; an error marks it failing until the next success. A warning
    (the poll worked, something it found needs telling) is kept until a poll without one."""
    health, _ = SourceHealth.objects.get_or_create(source=source, defaults={"label": label})
    health.label = label
    health.last_attempt_at = started_at
    health.last_duration_ms = duration_ms
    if error is None:
        health.last_success_at = started_at
        health.consecutive_failures = 0
        health.warning = warning[:5000]
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

    A constant number of queries whatever the number of pipelines. Returns the number of batches
    added; re-recording the same batches adds nothing.
    """
    known = set(store.pipelines.values_list("topic", "group"))
    Pipeline.objects.bulk_create(
        [Pipeline(store=store, topic=k.topic, group=k.group) for k in reading.pipelines if (k.topic, k.group) not in known],
        ignore_conflicts=True,
    )
    with_batches = {(k.topic, k.group): b for k, b in reading.batches.items() if b}
    pipelines = [p for p in store.pipelines.all() if (p.topic, p.group) in with_batches]
    newest = _newest_batches([p.pk for p in pipelines])
    rows: list[Batch] = []
    changed: list[Pipeline] = []
    for pipeline in pipelines:
        last_ms, previous = newest.get(pipeline.pk, (None, None))
        new = _batches_new(pipeline, with_batches[(pipeline.topic, pipeline.group)], last_ms, previous,
                           reading.keeps_history)
        if new:
            rows.extend(new)
            pipeline.last_batch_ms = new[-1].batch_time_ms
            pipeline.recent_batch_ms = (pipeline.recent_batch_ms + [b.batch_time_ms for b in new])[-Pipeline.RECENT_BATCHES:]
            changed.append(pipeline)
    Batch.objects.bulk_create(rows, ignore_conflicts=True, batch_size=1000)
    Pipeline.objects.bulk_update(changed, ["last_batch_ms", "recent_batch_ms"], batch_size=1000)
    _problems_record(store, reading.problems)
    return len(rows)


def _newest_batches(pipeline_ids: list[int]) -> dict[int, tuple[int, dict[str, int]]]:
    """Each pipeline's newest batch (time, offsets), in one query (an indexed subquery each)."""
    newest = Batch.objects.filter(pipeline=OuterRef("pk")).order_by("-batch_time_ms")
    rows = Pipeline.objects.filter(pk__in=pipeline_ids).annotate(
        newest_ms=Subquery(newest.values("batch_time_ms")[:1]),
        newest_offsets=Subquery(newest.values("offsets")[:1], output_field=JSONField()),
    ).values_list("pk", "newest_ms", "newest_offsets")
    return {pk: (ms, offsets) for pk, ms, offsets in rows if ms is not None}


def _batches_new(
    pipeline: Pipeline, batches: list[BatchOffsets], last_ms: int | None, previous: dict[str, int] | None,
    keeps_history: bool,
) -> list[Batch]:
    rows = []
    for batch in sorted(batches, key=lambda b: b.batch_time_ms):
        if last_ms is not None and batch.batch_time_ms <= last_ms:
            if batch.committed:  # a planned checkpoint batch re-read after Spark committed it
                pipeline.batches.filter(batch_time_ms=batch.batch_time_ms, committed=False).update(committed=True)
            continue
        offsets = _as_json_offsets(batch)
        if not keeps_history and offsets == previous:
            continue  # a store without history was sampled again and had not moved
        rows.append(Batch(
            pipeline=pipeline, batch_time_ms=batch.batch_time_ms, offsets=offsets,
            records=_records_between(previous, offsets), batch_id=batch.batch_id, committed=batch.committed,
        ))
        previous = offsets
    return rows


def _problems_record(store: Store, problems: list[RowProblem]) -> None:
    for problem in problems:
        updated = StoreProblem.objects.filter(
            store=store, key=problem.key[:500], problem=problem.problem[:1000]
        ).update(occurrences=F("occurrences") + 1, last_seen_at=timezone.now())
        if not updated:
            StoreProblem.objects.create(store=store, key=problem.key[:500], problem=problem.problem[:1000])


@transaction.atomic
def watermarks_record(*, cluster: Cluster, result: WatermarkResult, sampled_at: datetime) -> int:
    """Store the cluster's watermarks (one row per topic), then per pipeline reading its topics a
    lag sample, and evaluate them all (status, lag in seconds, retention risk, incidents).
    A constant number of queries whatever the number of pipelines."""
    rows = []
    for topic, parts in result.by_topic.items():
        ids = sorted(parts)
        rows.append(WatermarkSample(
            cluster=cluster, topic=topic, sampled_at=sampled_at, partitions=pack_partitions(ids),
            lows=pack([parts[p].low for p in ids]), highs=pack([parts[p].high for p in ids]),
        ))
    WatermarkSample.objects.bulk_create(rows, batch_size=1000)

    pipelines = list(Pipeline.objects.filter(store__cluster=cluster, topic__in=list(result.by_topic)))
    newest = {pk: {int(p): o for p, o in offsets.items()}
              for pk, (_, offsets) in _newest_batches([p.pk for p in pipelines]).items()}
    samples = []
    for pipeline in pipelines:
        committed = newest.get(pipeline.pk, {})
        highs = {p: w.high for p, w in sorted(result.by_topic[pipeline.topic].items())}
        ids, values = pack_map(committed)
        samples.append(LagSample(pipeline=pipeline, sampled_at=sampled_at, total_lag=evaluation.sample_lag(committed, highs),
                                 partitions=ids, committed=values, last_batch_ms=pipeline.last_batch_ms))
    LagSample.objects.bulk_create(samples, batch_size=1000)
    _pipelines_evaluate(cluster, pipelines, newest, result, now=sampled_at)
    return len(samples)


def _pipelines_evaluate(
    cluster: Cluster, pipelines: list[Pipeline], committed: dict[int, dict[int, int]], result: WatermarkResult,
    now: datetime,
) -> None:
    """Evaluate every pipeline of a cluster poll with the pure rules of streamoffsets.evaluation."""
    if not pipelines:
        return
    n = settings.EVALUATION_WINDOW_SAMPLES
    window_since = now - timedelta(seconds=max(120.0, 3 * n * settings.POLL_INTERVAL_S))
    lookback_since = now - timedelta(seconds=settings.LAG_SECONDS_LOOKBACK_S)
    topics = sorted({p.topic for p in pipelines})

    recent: dict[int, list[LagSample]] = {}
    for s in LagSample.objects.filter(pipeline__in=pipelines, sampled_at__gte=window_since).order_by("sampled_at"):
        recent.setdefault(s.pipeline_id, []).append(s)
    marks_at: dict[str, dict[datetime, dict[int, tuple[int, int]]]] = {}
    for w in WatermarkSample.objects.filter(cluster=cluster, topic__in=topics, sampled_at__gte=window_since):
        marks_at.setdefault(w.topic, {})[w.sampled_at] = w.watermarks()
    oldest = _oldest_watermarks(cluster, topics, lookback_since)

    # Lag older than the window needs the topic's earlier watermarks: fetched only for those topics.
    deep_topics = set()
    for pipeline in pipelines:
        window_marks = marks_at.get(pipeline.topic, {})
        if window_marks:
            first = window_marks[min(window_marks)]
            if any(p in first and c < first[p][1] for p, c in committed.get(pipeline.pk, {}).items()):
                deep_topics.add(pipeline.topic)
    for w in WatermarkSample.objects.filter(cluster=cluster, topic__in=deep_topics,
                                            sampled_at__gte=lookback_since, sampled_at__lt=window_since):
        marks_at.setdefault(w.topic, {})[w.sampled_at] = w.watermarks()

    open_incidents = {i.pipeline_id: i for i in Incident.objects.filter(pipeline__in=pipelines, closed_at=None)}
    # One job's offsets visible in two stores (same topic and group): compare them.
    twins: dict[tuple[str, str], list[Pipeline]] = {}
    for pipeline in pipelines:
        twins.setdefault((pipeline.topic, pipeline.group), []).append(pipeline)
    store_names = dict(Store.objects.filter(pk__in={p.store_id for p in pipelines}).values_list("pk", "name"))
    evaluations, incidents_new, incidents_changed = [], [], []
    for pipeline in pipelines:
        marks = {p: (w.low, w.high) for p, w in result.by_topic[pipeline.topic].items()}
        history = dict(marks_at.get(pipeline.topic, {}))
        if pipeline.topic in oldest:
            history.setdefault(*oldest[pipeline.topic])
        evaluated = _pipeline_evaluation(pipeline, committed.get(pipeline.pk, {}), marks,
                                         recent.get(pipeline.pk, [])[-n:], history, now)
        for twin in twins[(pipeline.topic, pipeline.group)]:
            mine, theirs = committed.get(pipeline.pk, {}), committed.get(twin.pk, {})
            if twin.pk != pipeline.pk and mine and theirs and evaluation.drift(mine, theirs):
                reason = evaluation.describe_drift(f"store {store_names[pipeline.store_id]}", mine,
                                                   f"store {store_names[twin.store_id]}", theirs)
                evaluated.reasons.append(reason)
                if evaluated.status < evaluation.Status.WARN:
                    evaluated.status = int(evaluation.Status.WARN)
                    evaluated.reasons = [r for r in evaluated.reasons if r not in ("caught up", "consuming normally")]
        evaluations.append(evaluated)
        change = _incident_change(pipeline, evaluated, open_incidents.get(pipeline.pk), now)
        if change is not None:
            (incidents_new if change.pk is None else incidents_changed).append(change)
    # An evaluation is derived and replaced every cycle: delete and insert (in this transaction)
    # costs two statements, where bulk_update builds a CASE per row and field.
    PipelineEvaluation.objects.filter(pipeline__in=pipelines).delete()
    PipelineEvaluation.objects.bulk_create(evaluations, batch_size=1000)
    Incident.objects.bulk_create(incidents_new, batch_size=1000)
    Incident.objects.bulk_update(incidents_changed, ["closed_at", "worst_status", "reasons"], batch_size=1000)


def _oldest_watermarks(cluster: Cluster, topics: list[str], since: datetime) -> dict[str, tuple[datetime, dict]]:
    """Each topic's oldest watermark sample since `since` (the far end of its rates), in two queries."""
    firsts = dict(WatermarkSample.objects.filter(cluster=cluster, topic__in=topics, sampled_at__gte=since)
                  .values("topic").annotate(first=Min("sampled_at")).values_list("topic", "first"))
    # All topics of a cluster are sampled in the same cycles, so the distinct first times are few.
    rows = WatermarkSample.objects.filter(cluster=cluster, topic__in=list(firsts), sampled_at__in=set(firsts.values()))
    return {w.topic: (w.sampled_at, w.watermarks()) for w in rows if firsts.get(w.topic) == w.sampled_at}


def _pipeline_evaluation(
    pipeline: Pipeline, committed: dict[int, int], marks: dict[int, tuple[int, int]], recent: list[LagSample],
    history: dict[datetime, dict[int, tuple[int, int]]], now: datetime,
) -> PipelineEvaluation:
    """One pipeline's evaluation from data already in memory (no queries)."""
    window = [
        Sample(s.sampled_at.timestamp(), s.committed_offsets(),
               {p: hi for p, (_, hi) in history.get(s.sampled_at, {}).items()},
               s.last_batch_ms / 1000 if s.last_batch_ms else None, s.total_lag)
        for s in recent
    ]
    partitions = evaluation.evaluate_partitions(committed, marks)
    interval = evaluation.batch_interval_s([t / 1000 for t in pipeline.recent_batch_ms])
    status = evaluation.evaluate_status(
        window, partitions, interval, now.timestamp(),
        stop_after_intervals=settings.STOP_AFTER_INTERVALS, min_stale_s=settings.STALE_AFTER_S,
    )
    highs: dict[int, list[tuple[float, int]]] = {}
    lows: dict[int, list[tuple[float, int]]] = {}
    for at in sorted(history):
        for p, (lo, hi) in history[at].items():
            highs.setdefault(p, []).append((at.timestamp(), hi))
            lows.setdefault(p, []).append((at.timestamp(), lo))
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
    return PipelineEvaluation(
        pipeline=pipeline, evaluated_at=now, status=int(status.status), reasons=status.reasons, partitions=rows,
        total_lag=evaluation.total_lag(partitions), lag_seconds=worst_seconds, lag_seconds_method=worst_method[:100],
        batch_interval_s=interval, retention_seconds_left=soonest_loss,
    )


def _incident_change(
    pipeline: Pipeline, evaluated: PipelineEvaluation, open_incident: Incident | None, now: datetime
) -> Incident | None:
    """A status above OK opens an incident (or raises the open one's worst); OK closes it.
    Returns the incident to save (new when its pk is None), or None when nothing changes."""
    if evaluated.status == evaluation.Status.OK:
        if open_incident is None:
            return None
        open_incident.closed_at = now
        return open_incident
    if open_incident is None:
        return Incident(pipeline=pipeline, opened_at=now, worst_status=evaluated.status, reasons=evaluated.reasons)
    if evaluated.status >= open_incident.worst_status:
        open_incident.worst_status = evaluated.status
        open_incident.reasons = evaluated.reasons
        return open_incident
    return None


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
    counts["ExportJob expired"] = export_jobs_prune(now=now)
    return counts


# --- background exports -------------------------------------------------------------------------


def export_job_create(*, user, pipeline: Pipeline, kind: str, time_range, chart_kind: str = "total",
                      chart_unit: str = "messages") -> ExportJob:
    """Record an export to run in the background and queue it once the row is committed. The
    range is frozen now: "last 30 days" means the 30 days before the request."""
    job = ExportJob.objects.create(
        user=user, pipeline=pipeline, kind=kind,
        params={"since": time_range.since.isoformat() if time_range.since else None,
                "until": time_range.until.isoformat(), "preset": time_range.preset,
                "kind": chart_kind, "unit": chart_unit},
    )
    transaction.on_commit(lambda: _export_enqueue(job.pk))
    return job


def _export_enqueue(job_id: int) -> None:
    from dashboard.tasks import export_run

    try:
        export_run.delay(job_id)
    except Exception as exc:  # the broker is away: the job says so instead of waiting forever
        log.exception("export job %s: could not be queued", job_id)
        ExportJob.objects.filter(pk=job_id, status=ExportJob.Status.QUEUED).update(
            status=ExportJob.Status.FAILED, error=f"could not be queued (is Redis running?): {exc}"[:2000],
            finished_at=timezone.now())


def export_job_time_range(job: ExportJob) -> TimeRange:
    p = job.params
    return TimeRange(datetime.fromisoformat(p["since"]) if p.get("since") else None,
                     datetime.fromisoformat(p["until"]), p.get("preset"))


def export_job_run(*, job_id: int) -> ExportJob | None:
    """Write a queued export to its file in chunks, updating its progress; None when another
    worker claimed it first (or it is not queued). Failures are recorded on the job."""
    claimed = ExportJob.objects.filter(pk=job_id, status=ExportJob.Status.QUEUED).update(
        status=ExportJob.Status.RUNNING, started_at=timezone.now())
    if not claimed:
        return None
    job = ExportJob.objects.select_related("pipeline", "pipeline__store", "pipeline__store__cluster").get(pk=job_id)
    final = settings.EXPORT_DIR / f"export-{job.pk}.csv"
    partial = settings.EXPORT_DIR / f"export-{job.pk}.csv.part"  # never downloadable half-written
    rows_of_job = ExportJob.objects.filter(pk=job.pk)
    try:
        settings.EXPORT_DIR.mkdir(parents=True, exist_ok=True)
        tz, time_range, pipeline = time_zone(), export_job_time_range(job), job.pipeline
        if job.kind == ExportJob.Kind.BATCHES_CSV:
            what = "per-batch history"
            since_ms, until_ms = exports.range_ms(time_range)
            rows_of_job.update(rows_total=selectors.batch_export_count(pipeline=pipeline, since_ms=since_ms,
                                                                       until_ms=until_ms))
            header, rows = exports.batches_table(pipeline=pipeline, time_range=time_range, tz=tz)
            name_what = "batches"
        else:
            params = ChartParams(kind=job.params.get("kind", "total"), unit=job.params.get("unit", "messages"),
                                 range=time_range)
            chart = charts.pipeline_chart(pipeline=pipeline, params=params, tz=tz)
            what = chart.title
            rows_of_job.update(rows_total=len(chart.table.times))
            header, rows = exports.chart_table_rows(chart.table, tz)
            name_what = f"{params.kind}-{params.unit}"
        preamble = exports.export_preamble(pipeline=pipeline, what=what, time_range=time_range, tz=tz,
                                           now=timezone.now())
        count = exports.csv_write(path=partial, header=header, rows=rows, preamble=preamble,
                                  progress=lambda n: rows_of_job.update(rows_done=n))
        partial.rename(final)
        rows_of_job.update(
            status=ExportJob.Status.DONE, rows_done=count, rows_total=count, file_path=str(final),
            file_name=exports.download_name(pipeline=pipeline, what=name_what, time_range=time_range, ext="csv"),
            finished_at=timezone.now())
    except Exception as exc:
        log.exception("export job %s failed", job_id)
        with contextlib.suppress(OSError):  # the reason recorded is the first failure, not this one
            partial.unlink(missing_ok=True)
        rows_of_job.update(status=ExportJob.Status.FAILED, error=f"{type(exc).__name__}: {exc}"[:2000],
                           finished_at=timezone.now())
    job.refresh_from_db()
    return job


def export_jobs_prune(*, now: datetime) -> int:
    """Delete finished exports (and their files) older than EXPORT_RETENTION_S; a job still
    "running" long after the task's hard time limit lost its worker: it is marked failed."""
    ExportJob.objects.filter(status=ExportJob.Status.RUNNING, started_at__lt=now - timedelta(hours=2)).update(
        status=ExportJob.Status.FAILED, error="the worker stopped while writing this export", finished_at=now)
    old = ExportJob.objects.filter(finished_at__lt=now - timedelta(seconds=settings.EXPORT_RETENTION_S))
    for path in old.exclude(file_path="").values_list("file_path", flat=True):
        Path(path).unlink(missing_ok=True)
    return old.delete()[0]
