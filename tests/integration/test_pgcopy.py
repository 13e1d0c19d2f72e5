"""The COPY writes of the collection cycle (offsetwatch.lib.pgcopy) store what Django's own
bulk_create stores: copy_insert as bulk_create, copy_upsert as bulk_create's upsert (replacing
the listed columns, or leaving the stored row alone), on the real PostgreSQL."""
from __future__ import annotations

from datetime import datetime, timedelta
from datetime import timezone as dt_timezone

import pytest
from django.db import transaction

from dashboard.models import ChartRollup, LagSample, PipelineEvaluation
from offsetwatch.lib.pgcopy import copy_insert, copy_rows, copy_upsert
from tests.factories import pipeline_row

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=dt_timezone.utc)
COLUMNS = ("pipeline_id", "resolution_s", "bucket", "partitions", "lags", "total_lag", "lag_seconds", "samples")
KEY = ("pipeline_id", "resolution_s", "bucket")
FIELDS = ("partitions", "lags", "total_lag", "lag_seconds", "samples")


def _rollups(pipeline) -> list[tuple]:
    rows = ChartRollup.objects.filter(pipeline=pipeline).order_by("resolution_s", "bucket").values_list(*COLUMNS[1:])
    return [tuple(bytes(v) if isinstance(v, memoryview) else v for v in row) for row in rows]


def _rows(pipeline, n: int, *, lag: int) -> list[tuple]:
    # Every kind of value the roll-ups write: bytes (empty and not), None and numbers, times.
    return [(pipeline.pk, 60 if i % 2 else 3600, T0 + timedelta(minutes=i), b"" if i % 3 else bytes([i, 0, 255]),
             bytes([lag % 256, i]), None if i == 4 else lag + i, None if i % 4 == 0 else lag / 7 + i, 1 + i + lag // 10)
            for i in range(n)]


def test_copy_insert_writes_what_bulk_create_writes():
    a, b = pipeline_row("copy-a"), pipeline_row("copy-b")

    def evaluations(pipeline):  # JSON with quotes and unicode, nulls, a float, a time
        return [PipelineEvaluation(pipeline=pipeline, evaluated_at=T0, status=3, reasons=['"stalled" \\ ünï'],
                                   partitions=[{"partition": 0, "lag": None, "lag_seconds": 1.5}],
                                   total_lag=None, lag_seconds=2.25, worst_partition=0)]

    PipelineEvaluation.objects.bulk_create(evaluations(a))
    assert copy_insert(PipelineEvaluation, evaluations(b)) == 1
    fields = ["evaluated_at", "status", "reasons", "partitions", "total_lag", "lag_seconds", "worst_partition",
              "worst_partition_lag", "sparkline"]
    assert (list(PipelineEvaluation.objects.filter(pipeline=b).values_list(*fields))
            == list(PipelineEvaluation.objects.filter(pipeline=a).values_list(*fields)))
    assert copy_insert(PipelineEvaluation, []) == 0


def test_copy_upsert_inserts_and_replaces_what_bulk_creates_upsert_does():
    a, b = pipeline_row("upsert-a"), pipeline_row("upsert-b")
    for pipeline, write in ((a, "django"), (b, "copy")):
        for rows in (_rows(pipeline, 6, lag=10), _rows(pipeline, 9, lag=500)):  # 6 stored, then 6 replaced and 3 new
            if write == "django":
                ChartRollup.objects.bulk_create([ChartRollup(**dict(zip(COLUMNS, row))) for row in rows],
                                                update_conflicts=True, unique_fields=["pipeline", "resolution_s", "bucket"],
                                                update_fields=list(FIELDS))
            else:
                assert copy_upsert(ChartRollup, COLUMNS, rows, conflict=KEY, update=FIELDS) == len(rows)
    assert _rollups(b) == _rollups(a)
    assert len(_rollups(b)) == 9 and {row[4] for row in _rollups(b)} == {None, 500, 501, 502, 503, 505, 506, 507, 508}


def test_copy_upsert_without_update_columns_keeps_the_stored_rows():
    pipeline = pipeline_row("upsert-keep")
    copy_upsert(ChartRollup, COLUMNS, _rows(pipeline, 3, lag=10), conflict=KEY)
    assert copy_upsert(ChartRollup, COLUMNS, _rows(pipeline, 5, lag=900), conflict=KEY) == 5
    # Minutes (odd i), then hours (even i): i = 0, 1, 2 kept from the first write, 3 and 4 new.
    assert [(row[4], row[6]) for row in _rollups(pipeline)] == [(11, 3), (903, 94), (10, 2), (12, 4), (None, 95)]


def test_copy_upsert_twice_in_one_transaction_and_only_the_listed_columns():
    pipeline = pipeline_row("upsert-twice")
    with transaction.atomic():  # the staging table is emptied after each use, not only at commit
        copy_upsert(ChartRollup, COLUMNS, _rows(pipeline, 4, lag=10), conflict=KEY, update=FIELDS)
        copy_upsert(ChartRollup, COLUMNS, _rows(pipeline, 4, lag=20), conflict=KEY, update=["samples"])
    stored = _rollups(pipeline)
    assert [row[4] for row in stored] == [11, 13, 10, 12]  # total_lag: the first write's (minutes, then hours)
    assert [row[6] for row in stored] == [4, 6, 3, 5]  # samples: the second write's
    assert copy_upsert(ChartRollup, COLUMNS, [], conflict=KEY, update=FIELDS) == 0


def test_copy_rows_writes_what_bulk_create_writes():
    a, b = pipeline_row("rows-a"), pipeline_row("rows-b")
    columns = ["pipeline_id", "sampled_at", "total_lag", "partitions", "committed", "last_batch_ms", "went_back"]
    values = [(T0, 7, b"", bytes([1, 2, 3]), None, None), (T0 + timedelta(seconds=10), 0, bytes([9]), b"", 5, True),
              (T0 + timedelta(seconds=20), 2**40, b"", b"\x00\xff", 2**50, False)]
    assert copy_rows(LagSample, columns, [(a.pk, *v) for v in values]) == 3
    LagSample.objects.bulk_create([LagSample(pipeline=b, sampled_at=at, total_lag=lag, partitions=ids, committed=c,
                                             last_batch_ms=ms, went_back=back) for at, lag, ids, c, ms, back in values])

    def stored(pipeline):
        rows = LagSample.objects.filter(pipeline=pipeline).order_by("sampled_at").values_list(*columns[1:])
        return [tuple(bytes(v) if isinstance(v, memoryview) else v for v in row) for row in rows]

    assert stored(a) == stored(b) == list(values)
    assert copy_rows(LagSample, columns, []) == 0
