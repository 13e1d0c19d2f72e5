"""A pipeline's evaluation built in one pass over its partitions (dashboard.monitoring.evaluation.
_pipeline_evaluation since #16: each partition's fields read once, no record lookup for a caught-up
partition, a partition's history read only where a rule needs it) equals the field-by-field way it
was built before, kept below as the reference, on random pipelines: partitions missing, unknown,
out of range, caught up and lagging; records found, missed and absent; low watermarks moving or
not; partitions flagged by the partition rules."""
from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from operator import itemgetter

from django.conf import settings as django_settings
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dashboard.models import Pipeline, PipelineEvaluation
from dashboard.monitoring.evaluation import CAUGHT_UP, _pipeline_evaluation
from dashboard.monitoring.history import PackedMarks, TopicSeries, WindowSample
from offsetwatch.lib.packing import pack, pack_partitions
from streamoffsets import evaluation, partition_rules, rules
from streamoffsets.evaluation import Sample

T0 = datetime(2026, 3, 1, tzinfo=dt_timezone.utc)
NOW = T0 + timedelta(seconds=60)
_partition_of, _lag_of = itemgetter(0), itemgetter(4)


def _reference(pipeline, committed, marks, recent, series, now, record_times, written_ms, record_misses):
    """The evaluation as main built it before #16 (its series given as plain dicts)."""
    window = [Sample(s.at_s, s.committed, series.highs_at(s.sampled_at),
                     s.last_batch_ms / 1000 if s.last_batch_ms else None, s.total_lag) for s in recent]
    partitions = evaluation.evaluate_partitions(committed, marks)
    interval = evaluation.batch_interval_s([t / 1000 for t in pipeline.recent_batch_ms])
    status = evaluation.evaluate_status(window, partitions, interval, now.timestamp(),
                                        stop_after_intervals=django_settings.STOP_AFTER_INTERVALS,
                                        min_stale_s=django_settings.STALE_AFTER_S)
    flagged = partition_rules.partition_status(
        window, lambda: dict(zip(map(_partition_of, partitions), map(_lag_of, partitions))), interval, written_ms,
        stop_after_intervals=django_settings.STOP_AFTER_INTERVALS)
    if flagged:
        states = {e.partition: e.state for e in partitions}
        flagged = [ps for ps in flagged if states[ps.partition] is evaluation.PartitionState.LAGGING]
    stuck = {ps.partition: ps for ps in flagged}
    status = partition_rules.merge_into(status, list(stuck.values()))
    every = range(8)
    highs = {p: series.highs(p) for p in every if series.highs(p)}
    lows = {p: series.lows(p) for p in every if series.lows(p)}
    moving_lows = {p for p in every if series.low_moved(p)}
    commits: dict[int, list[tuple[float, int]]] = {}
    for sample in window:
        for p, c in sample.committed.items():
            commits.setdefault(p, []).append((sample.at_s, c))
    rows, time_lags, soonest_loss = [], [], None
    for e in partitions:
        row = {"partition": e.partition, "committed": e.committed, "low": e.low, "high": e.high, "lag": e.lag,
               "state": e.state.value, "messages_lost": e.messages_lost, "lag_seconds": None,
               "lag_method": "", "retention_margin": None, "retention_seconds_left": None,
               "lag_absent": e.lag_absent,
               "status": stuck[e.partition].status.name if e.partition in stuck else "OK",
               "status_reason": stuck[e.partition].reason if e.partition in stuck else ""}
        if e.lag is None and e.committed is not None and e.high is not None:
            time_lags.append((e.partition, None, evaluation.TimeLag(None, e.lag_absent)))
            if e.state is evaluation.PartitionState.LOW_OUT_OF_RANGE:
                row["retention_margin"] = e.committed - e.low
        elif e.committed is not None and e.high is not None:
            position = (pipeline.topic, e.partition, e.committed)
            record_ms = record_times.get(position)
            if e.lag == 0:
                tl = CAUGHT_UP
            elif record_ms is not None:
                tl = evaluation.lag_seconds_from_record(record_ms, now.timestamp())
            elif e.lag > 0:
                no_record = "record deleted by retention" if e.state is evaluation.PartitionState.LOW_OUT_OF_RANGE else (
                    (record_misses or {}).get(position))
                tl = evaluation.lag_seconds_without_record(e.committed, highs.get(e.partition, []), now.timestamp(),
                                                           no_record)
            else:
                tl = evaluation.lag_seconds(e.committed, highs.get(e.partition, []), now.timestamp())
            row["lag_seconds"], row["lag_method"] = tl.seconds, tl.method
            time_lags.append((e.partition, e.lag, tl))
            if e.partition in moving_lows:
                risk = evaluation.retention_risk(e.committed, lows.get(e.partition, []), commits.get(e.partition, []))
            else:
                risk = evaluation.RetentionRisk(e.committed - e.low, None)
            row["retention_margin"], row["retention_seconds_left"] = risk.margin, risk.seconds_left
            if risk.seconds_left is not None:
                soonest_loss = risk.seconds_left if soonest_loss is None else min(soonest_loss, risk.seconds_left)
                rules.apply_retention_deadline(status, e.partition, risk, django_settings.RETENTION_WARN_S)
        rows.append(row)
    pipeline_time_lag = evaluation.pipeline_lag_seconds(time_lags)
    total = evaluation.total_lag(partitions) if any(e.lag is not None for e in partitions) else None
    worst = max((e for e in partitions if e.lag is not None and e.lag > 0), key=lambda e: e.lag, default=None)
    return PipelineEvaluation(
        pipeline=pipeline, evaluated_at=now, status=int(status.status), reasons=status.reasons, partitions=rows,
        total_lag=total, lag_seconds=pipeline_time_lag.seconds, lag_seconds_method=pipeline_time_lag.method[:100],
        batch_interval_s=interval, retention_seconds_left=soonest_loss,
        worst_partition=worst.partition if worst else None, worst_partition_lag=worst.lag if worst else None,
    )


FIELDS = ["status", "reasons", "partitions", "total_lag", "lag_seconds", "lag_seconds_method", "batch_interval_s",
          "retention_seconds_left", "worst_partition", "worst_partition_lag"]
small = st.integers(min_value=0, max_value=30)


@st.composite
def pipelines(draw):
    ids = st.integers(min_value=0, max_value=4)
    marks = draw(st.dictionaries(ids, st.tuples(st.integers(0, 8), small).map(lambda t: (min(t), max(t))), max_size=4))
    # Mostly near the high watermark (caught up, a little behind, out of range), some anywhere,
    # some partitions only in the store or only in the topic.
    committed = {p: draw(st.sampled_from([high, max(0, high - 3), max(0, low - 1), high + 2, high - 1]))
                 for p, (low, high) in marks.items() if draw(st.integers(0, 5))}
    committed.update(draw(st.dictionaries(ids, small, max_size=2)))
    n = draw(st.integers(0, 5))
    times = [T0 + timedelta(seconds=10 * i) for i in range(n)]
    history = {}
    # The topic's past: high watermarks rising to this cycle's (so a lag interpolates), low ones
    # rising or still (so retention has a rate or not), now and then a sample of its own.
    rise, low_rise = draw(st.sampled_from([0, 1, 2, 5])), draw(st.sampled_from([0, 0, 1, 3]))
    for i, at in enumerate(times):
        back = n - 1 - i
        sample = {p: (max(0, low - low_rise * back), max(0, high - rise * back)) for p, (low, high) in marks.items()}
        if draw(st.integers(0, 5)) == 0:
            sample = draw(st.dictionaries(ids, st.tuples(st.integers(0, 8), small).map(lambda t: (min(t), max(t))),
                                          max_size=4))
        ps = sorted(sample)
        history[at] = PackedMarks(pack_partitions(ps), pack([sample[p][0] for p in ps]), pack([sample[p][1] for p in ps]))
    # The window: each partition frozen at its offset, moving up to it, or jumping about.
    window_times = sorted(draw(st.sets(st.sampled_from(times), min_size=min(2, n), max_size=4)) if times else [])
    steps = {p: draw(st.sampled_from([0, 0, 1, 3, -1])) for p in committed}
    recent = []
    for i, at in enumerate(window_times):
        back = len(window_times) - 1 - i
        offsets = {p: max(0, c - back * steps[p]) if steps[p] >= 0 else draw(small) for p, c in committed.items()}
        recent.append(WindowSample(at, at.timestamp(), offsets, draw(st.sampled_from([None, 1, 5, 45_000])),
                                   draw(st.integers(0, 40))))
    positions = [("t", p, c) for p, c in committed.items()]
    record_times = {pos: draw(st.integers(0, 70)) * 1000 + int(T0.timestamp() * 1000)
                    for pos in positions if draw(st.booleans())}
    record_misses = {pos: draw(st.sampled_from(["record gone", "not read this cycle"]))
                     for pos in positions if draw(st.booleans())}
    # When the store says when each partition was written: some long ago (a stopped consumer), some now.
    written = None if draw(st.booleans()) else {
        p: int(T0.timestamp() * 1000) + draw(st.sampled_from([0, 10_000, 50_000, 60_000])) for p in committed}
    batches = draw(st.sampled_from([[], [50], [40, 45, 50], [20, 30, 40, 50], [0, 60]]))
    pipeline = Pipeline(topic="t", group="g", recent_batch_ms=[int(T0.timestamp() * 1000) + s * 1000 for s in batches])
    return pipeline, committed, marks, recent, TopicSeries(history), record_times, written, record_misses


def _check(case) -> set[str]:
    """Both ways on one case; returns the kinds of rows it had (for the coverage check below)."""
    pipeline, committed, marks, recent, series, record_times, written, misses = case
    got = _pipeline_evaluation(pipeline, committed, marks, recent, series, NOW, record_times, written, misses)
    want = _reference(pipeline, committed, marks, recent, series, NOW, record_times, written, misses)
    assert {f: getattr(got, f) for f in FIELDS} == {f: getattr(want, f) for f in FIELDS}
    kinds = {row["state"] for row in got.partitions}
    kinds |= {row["lag_method"].split(" (")[0] for row in got.partitions if row["lag_method"]}
    kinds |= {"retention deadline" for row in got.partitions if row["retention_seconds_left"] is not None}
    kinds |= {f"partition {row['status']}" for row in got.partitions if row["status"] != "OK"}
    return kinds


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pipelines())
def test_the_one_pass_evaluation_equals_the_field_by_field_one(case):
    _check(case)


_SEEN: Counter = Counter()  # kind of row -> examples that had it


@settings(max_examples=300, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow],
          database=None)
@given(pipelines())
def _equal_on_a_fixed_set(case):
    _SEEN.update(_check(case))


def test_the_examples_reach_every_kind_of_row():
    _SEEN.clear()
    _equal_on_a_fixed_set()
    wanted = {"ok", "lagging", "low out-of-range", "high out-of-range", "missing in store", "unknown partition",
              "caught up", "record timestamp", "interpolated", "retention deadline", "partition STALLED",
              "partition STOPPED"}
    assert all(_SEEN[kind] >= 3 for kind in wanted), sorted(_SEEN.items())
