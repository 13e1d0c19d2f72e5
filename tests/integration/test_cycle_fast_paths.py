"""The collection cycle's faster database paths write and read exactly what the plain Django
ones did (#16): the incidents' VALUES update against bulk_update, the read plan's late-row
windows against an OR'ed Q per pipeline, `field__any` against `field__in`, each pipeline's
newest batch and each topic's oldest watermarks by a LATERAL probe against correlated subqueries
and a grouped MIN, and the evaluation's newest-n lag samples against every sample of the
window's span cut to its last n."""
from __future__ import annotations

from datetime import datetime, timedelta
from datetime import timezone as dt_timezone

import pytest
from django.db.models import Q

from dashboard.models import Batch, Incident, LagSample, Pipeline, WatermarkSample
from dashboard.monitoring import evaluation as monitoring_evaluation
from dashboard.monitoring.read_plan import _committed_batch_times, store_read_plan
from dashboard.monitoring.selectors import _newest_batches_lateral, _newest_batches_subqueries, newest_batches
from offsetwatch.lib.pgupdate import values_update
from streamoffsets.kafka import WatermarkResult
from streamoffsets.types import Watermarks
from tests.factories import pipeline_row, samples_bulk

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=dt_timezone.utc)
FIELDS = ["closed_at", "worst_status", "reasons", "status", "ok_samples", "notified_status", "notified_at"]


def _incidents(pipeline, count: int) -> list[Incident]:
    return Incident.objects.bulk_create([
        Incident(pipeline=pipeline, partition=p, opened_at=T0, worst_status=2, reasons=[f"partition {p} stalled"],
                 status=2, notified_status=None if p % 2 else 2, notified_at=None if p % 3 else T0)
        for p in range(count)
    ])


def _changed(incidents: list[Incident]) -> list[Incident]:
    # Every kind of value the cycle writes: a time set and cleared, None and numbers, JSON with quotes.
    for i, incident in enumerate(incidents):
        incident.closed_at = T0 + timedelta(seconds=i) if i % 4 == 0 else None
        incident.worst_status = 3 + i % 3
        incident.reasons = [f'no batch for {i} s; "quoted" \\ and ünïcode', {"nested": [i, None]}] if i % 5 else []
        incident.status = None if i % 7 == 0 else i % 6
        incident.ok_samples = i % 4
        incident.notified_status = None if i % 2 == 0 else 5
        incident.notified_at = None if i % 3 == 0 else T0 + timedelta(minutes=i)
    return incidents


def _stored(pipeline) -> list[tuple]:
    return list(Incident.objects.filter(pipeline=pipeline).order_by("partition").values_list("partition", *FIELDS))


def test_values_update_writes_what_bulk_update_writes():
    a, b = pipeline_row("upd-a"), pipeline_row("upd-b")
    Incident.objects.bulk_update(_changed(_incidents(a, 23)), FIELDS)
    # More rows than one batch, so the batching is crossed too.
    assert values_update(Incident, _changed(_incidents(b, 23)), FIELDS, batch_size=10) == 23
    assert [row[1:] for row in _stored(b)] == [row[1:] for row in _stored(a)]
    assert {row[4] for row in _stored(b)} == {None, 0, 1, 2, 3, 4, 5}  # the cases were reached


def test_values_update_leaves_the_other_fields_and_rows_alone():
    pipeline = pipeline_row("upd-c")
    first, second = _incidents(pipeline, 2)
    first.reasons, first.ack_note = ["changed"], "not listed: not written"
    values_update(Incident, [first], ["reasons"])
    first.refresh_from_db()
    second.refresh_from_db()
    assert first.reasons == ["changed"] and first.ack_note == ""
    assert second.reasons == ["partition 1 stalled"]
    assert values_update(Incident, [], ["reasons"]) == 0


def test_the_late_row_windows_read_what_an_ored_q_reads():
    pipelines = [pipeline_row(f"late-{i}") for i in range(4)]
    Batch.objects.bulk_create([
        Batch(pipeline=p, batch_time_ms=t, offsets={"0": t}, committed=t % 3 != 0)
        for i, p in enumerate(pipelines) for t in range(1000 * i, 1000 * i + 60, 7)
    ])
    windows = [(p.pk, 1000 * i + 10, 1000 * i + 40 + i) for i, p in enumerate(pipelines)]
    q = Q(pk__in=[])
    for pk, lo, hi in windows:
        q |= Q(pipeline_id=pk, batch_time_ms__gte=lo, batch_time_ms__lte=hi)
    expected = sorted(Batch.objects.filter(q, committed=True).values_list("pipeline_id", "batch_time_ms"))
    assert sorted(_committed_batch_times(windows)) == expected
    assert len(expected) > 8  # windows of several batches each, the uncommitted ones left out
    assert _committed_batch_times([]) == []


def test_the_newest_batches_probe_reads_what_the_subqueries_read():
    pipelines = [pipeline_row(f"newest-{i}") for i in range(4)]  # the last one has no batch
    Batch.objects.bulk_create([
        # Pipeline 0's newest batch is planned (not committed): the committed read takes the one before.
        Batch(pipeline=p, batch_time_ms=t, offsets={"0": t, "1": i}, committed=not (i == 0 and t == 1000 + 50))
        for i, p in enumerate(pipelines[:3]) for t in range(1000 + i, 1000 + 51 + i, 10 - i)
    ])
    ids = [p.pk for p in pipelines]
    for committed_only in (False, True):
        lateral = _newest_batches_lateral(ids, committed_only)
        assert lateral == _newest_batches_subqueries(ids, committed_only) == newest_batches(
            pipeline_ids=ids, committed_only=committed_only)
        assert set(lateral) == set(ids[:3])
    assert newest_batches(pipeline_ids=ids)[ids[0]] == (1050, {"0": 1050, "1": 0})
    assert newest_batches(pipeline_ids=ids, committed_only=True)[ids[0]] == (1040, {"0": 1040, "1": 0})
    assert newest_batches(pipeline_ids=[]) == {}


def test_any_reads_what_in_reads():
    pipelines = [pipeline_row(f"any-{i}", topic=f"any-topic-{i % 3}") for i in range(6)]
    Incident.objects.bulk_create([Incident(pipeline=p, opened_at=T0, worst_status=2, status=2) for p in pipelines])
    ids, topics = [p.pk for p in pipelines], ["any-topic-0", "any-topic-2", "none such"]
    cases = [
        (Pipeline.objects, "pk", ids[1:4]),
        (Pipeline.objects, "topic", topics),  # text
        (Incident.objects, "pipeline", ids[::2]),  # a foreign key, by its name and by its column
        (Incident.objects, "pipeline_id", set(ids[1::2])),  # any iterable
        (Incident.objects, "pipeline_id", []),  # nothing, as __in=[] matches
    ]
    for manager, field, values in cases:
        expected = sorted(manager.filter(**{f"{field}__in": values}).values_list("pk", flat=True))
        assert sorted(manager.filter(**{f"{field}__any": values}).values_list("pk", flat=True)) == expected
        assert len(expected) == len(values) if field != "topic" else len(expected) == 4
    # One parameter for the whole list, not one per value.
    sql, params = Pipeline.objects.filter(pk__any=ids).query.sql_with_params()
    assert "= ANY(" in sql and list(params) == [ids]


def test_the_oldest_watermarks_probe_reads_what_the_grouped_query_reads():
    first = pipeline_row("oldest-0")
    pipelines = [first] + [Pipeline.objects.create(store=first.store, topic=f"oldest-topic-{i}") for i in (1, 2)]
    cluster = first.store.cluster
    for i, p in enumerate(pipelines):  # three topics of one cluster, their samples starting apart
        samples_bulk(p, start=T0 + timedelta(seconds=15 * i), step_s=10, count=8,
                     highs=lambda k, i=i: [100 * i + k, 7], committed=lambda k: [k, 7])
    assert WatermarkSample.objects.filter(cluster=cluster).count() == 24
    topics = [p.topic for p in pipelines] + ["no such topic"]
    for since in (T0 - timedelta(minutes=1), T0 + timedelta(seconds=25), T0 + timedelta(minutes=5)):
        lateral = monitoring_evaluation._oldest_watermarks_lateral(cluster, topics, since)
        grouped = monitoring_evaluation._oldest_watermarks_grouped(cluster, topics, since)
        assert {t: (at, m.marks()) for t, (at, m) in lateral.items()} == {
            t: (at, m.marks()) for t, (at, m) in grouped.items()}
    lateral = monitoring_evaluation._oldest_watermarks_lateral(cluster, topics, T0 + timedelta(seconds=25))
    assert {t: at for t, (at, _) in lateral.items()} == {  # each topic's first sample at or after since
        pipelines[0].topic: T0 + timedelta(seconds=30), pipelines[1].topic: T0 + timedelta(seconds=25),
        pipelines[2].topic: T0 + timedelta(seconds=30)}
    assert lateral[pipelines[2].topic][1].marks() == {0: (0, 200), 1: (0, 7)}
    assert monitoring_evaluation._oldest_watermarks_lateral(cluster, [], T0) == {}


def test_the_read_plan_lists_the_imported_batch_times_behind_each_position(settings):
    settings.LATE_BATCH_WINDOW_S = 30
    pipeline = pipeline_row("late-plan")
    now_ms = int(T0.timestamp() * 1000)
    Batch.objects.bulk_create([Batch(pipeline=pipeline, batch_time_ms=now_ms - s * 1000, offsets={"0": s})
                               for s in (5, 20, 29, 31, 90)])
    Pipeline.objects.filter(pk=pipeline.pk).update(last_batch_ms=now_ms - 5000)
    plan = store_read_plan(store=pipeline.store, now=T0)
    (key, recent), = plan.recent.items()
    assert key.topic == pipeline.topic
    # From the position (5 s ago) back 30 s: the batch 90 s ago is not in the window.
    assert recent == {now_ms - 5000, now_ms - 20000, now_ms - 29000, now_ms - 31000}


def test_the_window_is_each_pipelines_newest_samples(settings, monkeypatch):
    settings.EVALUATION_WINDOW_SAMPLES = 4
    pipelines = [pipeline_row(f"win-{i}") for i in range(3)]
    for i, p in enumerate(pipelines):  # 10, 7 and 4 samples, 10 s apart: all in the window's span
        samples_bulk(p, start=T0 + timedelta(seconds=i), step_s=10, count=10 - 3 * i,
                     highs=lambda k: [100 + k, 50], committed=lambda k: [90 + k, 50])
    seen = {}
    real = monitoring_evaluation._pipeline_evaluation

    def record(pipeline, committed, marks, recent, *args, **kwargs):
        seen[pipeline.pk] = [(s.sampled_at, s.at_s, s.committed, s.total_lag) for s in recent]
        return real(pipeline, committed, marks, recent, *args, **kwargs)

    monkeypatch.setattr(monitoring_evaluation, "_pipeline_evaluation", record)
    result = WatermarkResult(by_topic={p.topic: {0: Watermarks(0, 0, 110), 1: Watermarks(1, 0, 50)} for p in pipelines})
    for p in pipelines:
        monitoring_evaluation.pipelines_evaluate(p.store.cluster, [p], {}, result, T0 + timedelta(seconds=100), {}, {})
    for p in pipelines:
        every = list(LagSample.objects.filter(pipeline=p).order_by("sampled_at"))[-4:]
        assert seen[p.pk] == [(s.sampled_at, s.sampled_at.timestamp(), s.committed_offsets(), s.total_lag)
                              for s in every]
    assert [len(seen[p.pk]) for p in pipelines] == [4, 4, 4]
    assert seen[pipelines[0].pk][0][0] == T0 + timedelta(seconds=60)  # the newest 4 of 10, not the first


@pytest.mark.parametrize("shape", ["idle", "behind", "retention", "low moves, caught up", "grown"])
def test_reading_only_the_walked_topics_watermarks_changes_no_number(shape, monkeypatch):
    """The evaluation reads a topic's watermark samples of the window only when a rule walks
    them (_topics_walked); the numbers are the same as when every topic's are read."""
    from dashboard.models import PipelineEvaluation
    from dashboard.monitoring.selectors import Committed
    from dashboard.monitoring.services import watermarks_record

    p = pipeline_row(f"walk-{shape.replace(' ', '-').replace(',', '')}")

    def marks(i):
        low = {"retention": 3_000 * i, "low moves, caught up": 10 * i}.get(shape, 0)
        parts = {0: (low, 20_000 + 2_000 * i), 1: (0, 5_000 + 500 * i)}
        if shape == "grown" and i >= 5:
            parts[2] = (0, 10)
        return parts

    def committed(i):
        high = {q: hi for q, (_, hi) in marks(i).items()}
        if shape in ("behind", "retention"):
            return {0: high[0] - 9_000 - 300 * i, 1: high[1] - 700}
        return high

    for i in range(8):
        at = T0 + timedelta(seconds=10 * i)
        result = WatermarkResult(by_topic={p.topic: {q: Watermarks(q, lo, hi) for q, (lo, hi) in marks(i).items()}})
        watermarks_record(cluster=p.store.cluster, result=result, sampled_at=at,
                          committed={p.pk: Committed(int(at.timestamp() * 1000), committed(i))})
    now = T0 + timedelta(seconds=75)
    result = WatermarkResult(by_topic={p.topic: {q: Watermarks(q, lo, hi) for q, (lo, hi) in marks(7).items()}})

    def evaluated():
        monitoring_evaluation.pipelines_evaluate(p.store.cluster, [p], {p.pk: committed(7)}, result, now, {}, {})
        e = PipelineEvaluation.objects.get(pipeline=p)
        return e.status, e.reasons, e.partitions, e.lag_seconds, e.lag_seconds_method, e.retention_seconds_left

    walked_seen = []
    real_walked = monitoring_evaluation._topics_walked

    def spy(*args):
        walked = real_walked(*args)
        walked_seen.append(walked)
        return walked

    monkeypatch.setattr(monitoring_evaluation, "_topics_walked", spy)
    lazily = evaluated()
    monkeypatch.setattr(monitoring_evaluation, "_topics_walked", lambda pipelines, *_: {q.topic for q in pipelines})
    assert evaluated() == lazily
    assert walked_seen[-1] == (set() if shape == "idle" else {p.topic})  # the idle topic's are not read
    if shape == "retention":
        assert lazily[5] is not None  # a deadline: the walk mattered and was made
    if shape == "behind":
        assert lazily[3] is not None and lazily[4] == "interpolated"
