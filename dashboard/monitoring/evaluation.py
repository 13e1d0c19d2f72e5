"""Statuses from the collected numbers: evaluates every pipeline of a cluster after a poll (the
rules themselves are the job library's, streamoffsets.rules/evaluation), stores the evaluation and
opens or resolves incidents (per pipeline and per partition)."""
from __future__ import annotations

import logging
from datetime import datetime, timedelta
from operator import itemgetter

from django.conf import settings
from django.db import connection
from django.db.models import F, Min, Window
from django.db.models.functions import RowNumber

from dashboard.alerting import lifecycle
from dashboard.alerting.outbox import notifications_enqueue
from dashboard.alerting.services import CycleAlerting
from dashboard.charts.rollups import rollups_record
from dashboard.models import (
    Cluster,
    Incident,
    LagSample,
    Pipeline,
    PipelineEvaluation,
    Store,
    WatermarkSample,
)
from dashboard.monitoring import partition_writes
from dashboard.monitoring.history import NewSample, PackedMarks, TopicSeries, WindowSample
from offsetwatch.lib import sparkline
from offsetwatch.lib.packing import unpack_map
from offsetwatch.lib.pgcopy import copy_insert
from offsetwatch.lib.pgupdate import values_update
from streamoffsets import evaluation, partition_rules, rules
from streamoffsets.evaluation import Sample
from streamoffsets.kafka import WatermarkResult

log = logging.getLogger(__name__)

_partition_of, _lag_of = itemgetter(0), itemgetter(4)  # PartitionEvaluation's partition and lag


def pipelines_evaluate(
    cluster: Cluster, pipelines: list[Pipeline], committed: dict[int, dict[int, int]], result: WatermarkResult,
    now: datetime, record_times: dict[tuple[str, int, int], int], record_misses: dict[tuple[str, int, int], str],
    records_later=None, new_samples: dict[int, NewSample] | None = None,
) -> None:
    """Evaluate every pipeline of a cluster poll with the pure rules of streamoffsets.evaluation.
    `new_samples`: this cycle's lag samples (pipeline id -> NewSample at `now`, offsets in
    `committed`), the newest of each window, read from memory rather than back from the table;
    each gets its `went_back` here (against the pipeline's sample before it) and the caller then
    stores them."""
    if not pipelines:
        return
    n = settings.EVALUATION_WINDOW_SAMPLES
    window_since = now - timedelta(seconds=max(120.0, 3 * n * settings.POLL_INTERVAL_S))
    lookback_since = now - timedelta(seconds=settings.LAG_SECONDS_LOOKBACK_S)
    topics = sorted({p.topic for p in pipelines})

    # Plain tuples, not model instances: thousands of rows per cycle, and model __init__ is the
    # larger part of their cost.
    recent: dict[int, list[WindowSample]] = {}
    epoch: dict[datetime, float] = {}  # every pipeline's samples share the cycles' few times
    # Each pipeline's newest n samples in the window, ranked in the database: the window's time
    # span holds about three times n (missed cycles), and every row read is a datetime parsed
    # and an array unpacked.
    pipeline_ids = [p.pk for p in pipelines]  # `__any`: one array parameter (offsetwatch.lib.pgarray)
    samples = LagSample.objects.filter(pipeline_id__any=pipeline_ids, sampled_at__gte=window_since,
                                       sampled_at__lt=now)
    stored = n - 1 if new_samples is not None else n  # this cycle's sample is the window's newest
    if n > 0:  # (a window setting of 0 or less keeps every sample of the span, as [-n:] below does)
        newest_first = Window(RowNumber(), partition_by=F("pipeline_id"), order_by=F("sampled_at").desc())
        samples = samples.annotate(newest_first=newest_first).filter(newest_first__lte=stored)
    for pk, at, ids, values, last_ms, lag, back in samples.order_by("sampled_at").values_list(
        "pipeline_id", "sampled_at", "partitions", "committed", "last_batch_ms", "total_lag", "went_back"
    ):
        offsets = unpack_map(ids, values)
        if None in offsets.values():
            offsets = {p: c for p, c in offsets.items() if c is not None}
        at_s = epoch.get(at)
        if at_s is None:
            at_s = epoch[at] = at.timestamp()
        recent.setdefault(pk, []).append(WindowSample(at, at_s, offsets, last_ms, lag, back))
    now_s = epoch[now] = now.timestamp()
    for pk, sample in (new_samples or {}).items():
        offsets = {p: c for p, c in committed.get(pk, {}).items() if c is not None}
        before = recent.get(pk)
        # Stored with the sample: the window rules then never compare this pair again (rule 2).
        sample.went_back = evaluation.went_back(before[-1].committed, offsets) if before else None
        recent.setdefault(pk, []).append(WindowSample(now, now_s, offsets, sample.last_batch_ms, sample.total_lag,
                                                      sample.went_back))
    # Each topic's watermarks now, and its first sample of the lookback (the far end of its rates).
    marks_of = {topic: {p: (w.low, w.high) for p, w in parts.items()} for topic, parts in result.by_topic.items()}
    oldest = _oldest_watermarks(cluster, topics, lookback_since)
    # A topic's watermark samples of the window's span, unpacked when a rule reads them; read only
    # for the topics a rule walks (_topics_walked). The others need their first and newest
    # samples alone, both known here.
    walked = _topics_walked(pipelines, committed, marks_of, oldest)
    marks_at: dict[str, dict[datetime, PackedMarks]] = {
        topic: {now: PackedMarks.unpacked(marks_of[topic])} for topic in topics if topic not in walked}
    for topic, at, ids, lows, highs in WatermarkSample.objects.filter(
        cluster=cluster, topic__any=sorted(walked), sampled_at__gte=window_since
    ).values_list("topic", "sampled_at", "partitions", "lows", "highs"):
        marks_at.setdefault(topic, {})[at] = PackedMarks(ids, lows, highs)

    # Lag older than the window needs the topic's earlier watermarks: fetched only for those topics.
    # Only a partition behind now has a lag in seconds to look up (a caught-up one is rule 1).
    deep_topics = set()
    for pipeline in pipelines:
        window_marks = marks_at.get(pipeline.topic, {})
        behind = _behind(committed.get(pipeline.pk, {}), marks_of[pipeline.topic])
        if window_marks and behind:
            first = window_marks[min(window_marks)].marks()
            if any(p in first and c < first[p][1] for p, c in behind):
                deep_topics.add(pipeline.topic)
    for topic, at, ids, lows, highs in WatermarkSample.objects.filter(
        cluster=cluster, topic__in=deep_topics, sampled_at__gte=lookback_since, sampled_at__lt=window_since
    ).values_list("topic", "sampled_at", "partitions", "lows", "highs"):
        marks_at.setdefault(topic, {})[at] = PackedMarks(ids, lows, highs)

    # Open incidents: the pipelines' own, and their partitions' by pipeline.
    open_incidents: dict[int, Incident] = {}
    open_partition_incidents: dict[int, dict[int, Incident]] = {}
    for i in Incident.objects.filter(pipeline_id__any=pipeline_ids, closed_at=None):
        if i.partition is None:
            open_incidents[i.pipeline_id] = i
        else:
            open_partition_incidents.setdefault(i.pipeline_id, {})[i.partition] = i
    written = partition_writes.read([(p.pk, p.store_id) for p in pipelines])
    sparklines = dict(PipelineEvaluation.objects.filter(pipeline_id__any=pipeline_ids).values_list("pipeline", "sparkline"))
    # One job's offsets visible in two stores (same topic and group): compare them.
    twins: dict[tuple[str, str], list[Pipeline]] = {}
    for pipeline in pipelines:
        twins.setdefault((pipeline.topic, pipeline.group), []).append(pipeline)
    store_names = dict(Store.objects.filter(pk__in={p.store_id for p in pipelines}).values_list("pk", "name"))
    evaluations, incidents_new, incidents_changed = [], [], []
    alerting = CycleAlerting(now=now, store_names=store_names)
    archived: dict[Pipeline, str | None] = {}
    series_of: dict[str, TopicSeries] = {}  # built once per topic, shared by its pipelines
    if records_later is not None:
        record_times, record_misses = records_later()
    for pipeline in pipelines:
        marks = marks_of[pipeline.topic]
        series = series_of.get(pipeline.topic)
        if series is None:
            history = dict(marks_at.get(pipeline.topic, {}))
            if pipeline.topic in oldest:
                history.setdefault(*oldest[pipeline.topic])
            series = series_of[pipeline.topic] = TopicSeries(history, epoch)
        evaluated = _pipeline_evaluation(pipeline, committed.get(pipeline.pk, {}), marks,
                                         recent.get(pipeline.pk, [])[-n:], series, now, record_times,
                                         written.get(pipeline.pk), record_misses)
        if pipeline.topic in result.compacted:  # offsets with gaps: the lag counts offsets, not messages
            for row in evaluated.partitions:
                row["lag_is_upper_bound"] = row["lag"] is not None
        for twin in twins[(pipeline.topic, pipeline.group)]:  # rule 8: one job's offsets in two stores differ
            if twin.pk != pipeline.pk:
                rules.apply_drift(evaluated, f"store {store_names[pipeline.store_id]}", committed.get(pipeline.pk, {}),
                                  f"store {store_names[twin.store_id]}", committed.get(twin.pk, {}))
        evaluated.status = int(evaluated.status)
        # A retired job silent for long is archived (dashboard.alerting.lifecycle): OK, no incident.
        archived[pipeline] = why = lifecycle.archive_reason(pipeline, now, topic_gone=False)
        if why:
            evaluated.status, evaluated.reasons = int(evaluation.Status.OK), [why]
        evaluated.sparkline = sparkline.push(sparklines.get(pipeline.pk) or [], now.timestamp(), evaluated.total_lag or 0)
        evaluated.sparkline_svg = sparkline.svg_points(evaluated.sparkline)
        evaluated.sparkline_max = max(v for _, v in evaluated.sparkline)
        evaluations.append(evaluated)
        if why:
            continue  # its open incidents are closed by lifecycle.archived_record, silently
        change = _incident_change(pipeline, None, evaluated.status, evaluated.reasons, open_incidents.get(pipeline.pk), now)
        incident = change or open_incidents.get(pipeline.pk)
        if incident is not None and alerting.decide(pipeline, incident) and change is None:
            change = incident  # a reminder: its notified time changed
        changes = [change]
        changes += _partition_incident_changes(pipeline, evaluated, open_partition_incidents.get(pipeline.pk, {}), now)
        for change in changes:
            if change is not None:
                (incidents_new if change.pk is None else incidents_changed).append(change)
    # An evaluation is derived and replaced every cycle: delete and insert (in this transaction)
    # costs two statements, where bulk_update builds a CASE per row and field.
    PipelineEvaluation.objects.filter(pipeline_id__any=pipeline_ids).delete()
    copy_insert(PipelineEvaluation, evaluations)
    rollups_record(evaluations, now)  # the charts' minute and hour roll-ups, from these numbers
    Incident.objects.bulk_create(incidents_new, batch_size=1000)
    # Every open incident at its worst status is written each cycle (its reasons say how long):
    # one UPDATE from arrays, where bulk_update's CASE per row and field took seconds.
    values_update(Incident, incidents_changed, ["closed_at", "worst_status", "reasons", "status", "ok_samples",
                                                "notified_status", "notified_at"])
    lifecycle.archived_record(archived, now)
    # Written in this transaction, sent after it commits: a cycle never waits on a channel.
    notifications_enqueue(alerting.notifications({e.pipeline_id: e for e in evaluations}))


def _topics_walked(pipelines: list[Pipeline], committed: dict[int, dict[int, int]],
                   marks_of: dict[str, dict[int, tuple[int, int]]],
                   oldest: dict[str, tuple[datetime, PackedMarks]]) -> set[str]:
    """The topics whose watermark samples a rule walks this cycle: one with a partition behind
    now (its lag in seconds may interpolate in them), or whose low watermark is not the same in
    its first sample of the lookback and now (retention rates), or whose first sample lacks a
    partition it has now (its lows are walked). A topic with every pipeline caught up and its low
    watermarks standing still needs only those two samples (TopicSeries.low_moved)."""
    walked = {p.topic for p in pipelines if _behind(committed.get(p.pk, {}), marks_of[p.topic])}
    for topic, now_marks in marks_of.items():
        if topic in walked:
            continue
        first = oldest[topic][1].marks() if topic in oldest else {}
        if any(p not in first or first[p][0] != low for p, (low, _) in now_marks.items()):
            walked.add(topic)
    return walked


def _behind(committed: dict[int, int], now_marks: dict[int, tuple[int, int]]) -> list[tuple[int, int]]:
    """(partition, committed) of the partitions behind their high watermark now."""
    return [(p, c) for p, c in committed.items() if p in now_marks and c < now_marks[p][1]]


def _oldest_watermarks(cluster: Cluster, topics: list[str], since: datetime) -> dict[str, tuple[datetime, PackedMarks]]:
    """Each topic's oldest watermark sample since `since` (the far end of its rates)."""
    if connection.vendor == "postgresql":
        return _oldest_watermarks_lateral(cluster, topics, since)
    return _oldest_watermarks_grouped(cluster, topics, since)


def _oldest_watermarks_lateral(cluster: Cluster, topics: list[str], since: datetime) -> dict[str, tuple[datetime, PackedMarks]]:
    """On PostgreSQL: one query, one probe of the (cluster, topic, sampled_at) key per topic. The
    grouped form's MIN read every sample of the lookback (an hour: 360 per topic at a 10 s
    interval) to keep one."""
    if not topics:
        return {}
    table = connection.ops.quote_name(WatermarkSample._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT t.topic, w.sampled_at, w.partitions, w.lows, w.highs FROM unnest(%s::text[]) AS t(topic) "
            f"CROSS JOIN LATERAL (SELECT sampled_at, partitions, lows, highs FROM {table} "
            "WHERE cluster_id = %s AND topic = t.topic AND sampled_at >= %s ORDER BY sampled_at LIMIT 1) AS w",
            [list(topics), cluster.pk, since],
        )
        return {topic: (at, PackedMarks(ids, lows, highs)) for topic, at, ids, lows, highs in cursor.fetchall()}


def _oldest_watermarks_grouped(cluster: Cluster, topics: list[str], since: datetime) -> dict[str, tuple[datetime, PackedMarks]]:
    """In Django's terms (the demo's SQLite), in two queries."""
    firsts = dict(WatermarkSample.objects.filter(cluster=cluster, topic__any=topics, sampled_at__gte=since)
                  .values("topic").annotate(first=Min("sampled_at")).values_list("topic", "first"))
    # All topics of a cluster (or of one shard of its poll) are sampled in the same cycles, so the
    # distinct first times are few.
    rows = WatermarkSample.objects.filter(
        cluster=cluster, topic__any=list(firsts), sampled_at__in=set(firsts.values()),
    ).values_list("topic", "sampled_at", "partitions", "lows", "highs")
    return {topic: (at, PackedMarks(ids, lows, highs)) for topic, at, ids, lows, highs in rows if firsts.get(topic) == at}


CAUGHT_UP = evaluation.TimeLag(0.0, "caught up")


def _pipeline_evaluation(
    pipeline: Pipeline, committed: dict[int, int], marks: dict[int, tuple[int, int]], recent: list[WindowSample],
    series: TopicSeries, now: datetime, record_times: dict[tuple[str, int, int], int],
    written_ms: dict[int, int] | None = None,
    record_misses: dict[tuple[str, int, int], str] | None = None,
) -> PipelineEvaluation:
    """One pipeline's evaluation from data already in memory (no queries). `written_ms`: when
    each partition was last written, where the store says (dashboard.monitoring.partition_writes)."""
    # A stored sample carries its total lag, so its high watermarks are not needed (Sample.high).
    window = [
        Sample(s.at_s, s.committed, series.highs_at(s.sampled_at) if s.total_lag is None else None,
               s.last_batch_ms / 1000 if s.last_batch_ms else None, s.total_lag, s.went_back)
        for s in recent
    ]
    partitions = evaluation.evaluate_partitions(committed, marks)
    interval = evaluation.batch_interval_s([t / 1000 for t in pipeline.recent_batch_ms])
    status = evaluation.evaluate_status(
        window, partitions, interval, now.timestamp(),
        stop_after_intervals=settings.STOP_AFTER_INTERVALS, min_stale_s=settings.STALE_AFTER_S,
    )
    # A partition stuck while the others of its pipeline move (partition_rules): its status and
    # reason on its row, the worst of them on the pipeline (and so on its incident).
    # Only the few flagged partitions are checked for their state (an out-of-range partition's
    # own state is the news there, not a stall).
    def lags():  # called only when some partition may be stuck
        return dict(zip(map(_partition_of, partitions), map(_lag_of, partitions)))

    flagged = partition_rules.partition_status(window, lags, interval, written_ms,
                                               stop_after_intervals=settings.STOP_AFTER_INTERVALS)
    if flagged:
        states = {e.partition: e.state for e in partitions}
        flagged = [ps for ps in flagged if states[ps.partition] is evaluation.PartitionState.LAGGING]
    stuck = {ps.partition: ps for ps in flagged}
    status = partition_rules.merge_into(status, list(stuck.values()))
    # One row per partition, every cycle: the partition's fields are read once (tuple unpacking),
    # a caught-up partition takes no record lookup, and the history of a partition is walked
    # only where a rule needs it (lag in seconds of a lagging partition without its record,
    # retention rates where the low watermark moves).
    now_s, topic, misses = now.timestamp(), pipeline.topic, record_misses or {}
    rows, time_lags, soonest_loss = [], [], None
    known, total, worst, worst_lag = False, 0, None, 0
    for e in partitions:
        p, c, low, high, lag, state, lost = e
        lag_s, method, margin, left, absent = None, "", None, None, None
        if lag is not None:  # in range (ok or lagging): committed and high are known
            known = True
            if lag == 0:
                # At the high watermark of this cycle (the newest sample): caught up, rule 1 of
                # lag_seconds, without walking its history.
                tl = CAUGHT_UP
            else:
                total += lag
                if lag > worst_lag:
                    worst, worst_lag = p, lag
                position = (topic, p, c)
                record_ms = record_times.get(position)
                if record_ms is not None:
                    tl = evaluation.lag_seconds_from_record(record_ms, now_s)
                else:
                    # The record's own time is not known (gone, or not read this cycle): estimated
                    # from the high watermark samples, with the reason beside it.
                    tl = evaluation.lag_seconds_without_record(c, series.highs(p), now_s, misses.get(position))
            lag_s, method = tl.seconds, tl.method
            time_lags.append((p, lag, tl))
            if series.low_moved(p):
                commits = [(sample.at_s, sample.committed[p]) for sample in window if p in sample.committed]
                risk = evaluation.retention_risk(c, series.lows(p), commits)
                margin, left = risk.margin, risk.seconds_left
                if left is not None:
                    soonest_loss = left if soonest_loss is None else min(soonest_loss, left)
                    rules.apply_retention_deadline(status, p, risk, settings.RETENTION_WARN_S)  # rule 7
            else:
                margin = c - low  # rules 1 and 2 of retention_risk, without the rates
        else:
            absent = e.lag_absent
            if c is not None and high is not None:
                # Out of range: the state wins; no number derived from a position that does not exist.
                # Below the low watermark the margin stays: negative, it is the data lost (metrics).
                time_lags.append((p, None, evaluation.TimeLag(None, absent)))
                if state is evaluation.PartitionState.LOW_OUT_OF_RANGE:
                    margin = c - low
        flag = stuck.get(p)
        rows.append({"partition": p, "committed": c, "low": low, "high": high, "lag": lag, "state": state._value_,
                     "messages_lost": lost, "lag_seconds": lag_s, "lag_method": method, "retention_margin": margin,
                     "retention_seconds_left": left, "lag_absent": absent,
                     "status": flag.status.name if flag else "OK", "status_reason": flag.reason if flag else ""})
    pipeline_time_lag = evaluation.pipeline_lag_seconds(time_lags)
    return PipelineEvaluation(
        pipeline=pipeline, evaluated_at=now, status=int(status.status), reasons=status.reasons, partitions=rows,
        # No partition with a lag number (all out of range or unknown): no total either, not 0.
        total_lag=total if known else None, lag_seconds=pipeline_time_lag.seconds,
        lag_seconds_method=pipeline_time_lag.method[:100],
        batch_interval_s=interval, retention_seconds_left=soonest_loss,
        # The partition with the largest lag (the first of equals), None when none lags.
        worst_partition=worst, worst_partition_lag=worst_lag if worst is not None else None,
    )


def _incident_change(
    pipeline: Pipeline, partition: int | None, status: int, reasons: list[str], open_incident: Incident | None,
    now: datetime,
) -> Incident | None:
    """A status above OK opens an incident (or raises the open one's worst); OK held for
    RESOLVE_AFTER_SAMPLES evaluations in a row closes it, and a relapse before that is the same
    incident (no flapping). For the pipeline (`partition` None) or one of its partitions. Returns
    the incident to save (new when its pk is None), or None when nothing changes."""
    if status == evaluation.Status.OK:
        if open_incident is None:
            return None
        open_incident.status = status
        open_incident.ok_samples += 1
        if open_incident.ok_samples >= settings.RESOLVE_AFTER_SAMPLES:
            open_incident.closed_at = now
        return open_incident
    if open_incident is None:
        return Incident(pipeline=pipeline, partition=partition, opened_at=now, worst_status=status, reasons=reasons,
                        status=status)
    changed = open_incident.status != status or open_incident.ok_samples != 0
    open_incident.status, open_incident.ok_samples = status, 0
    if status >= open_incident.worst_status:
        open_incident.worst_status = status
        open_incident.reasons = reasons
        changed = True
    return open_incident if changed else None


def _partition_incident_changes(
    pipeline: Pipeline, evaluated: PipelineEvaluation, open_incidents: dict[int, Incident], now: datetime
) -> list[Incident | None]:
    """A partition flagged by the partition rules (STALLED, STOPPED) has its own incident, with
    its own reason, beside the pipeline's (which names it too); it closes when the partition is
    OK again or gone from the evaluation."""
    if evaluated.status < evaluation.Status.STALLED and not open_incidents:
        return []  # the pipeline takes its worst partition's status: none is flagged (the usual case)
    statuses = {row["partition"]: (evaluation.Status[row.get("status") or "OK"], row.get("status_reason") or "")
                for row in evaluated.partitions}
    flagged = {p for p, (status, _) in statuses.items() if status != evaluation.Status.OK}
    changes = []
    for p in sorted(flagged | set(open_incidents)):
        status, reason = statuses.get(p, (evaluation.Status.OK, ""))
        changes.append(_incident_change(pipeline, p, int(status), [reason] if reason else [],
                                        open_incidents.get(p), now))
    return changes
