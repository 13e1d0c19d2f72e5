"""Reads for exports: the batches in a range (count, width, partitions, rows) and a user's export jobs."""
from __future__ import annotations

from typing import Iterator

from django.db import connection

from dashboard.models import Batch, ExportJob, Pipeline


def _batches_in(pipeline: Pipeline, since_ms: int | None, until_ms: int):
    qs = pipeline.batches.filter(batch_time_ms__lte=until_ms)
    return qs if since_ms is None else qs.filter(batch_time_ms__gte=since_ms)


def batch_export_count(*, pipeline: Pipeline, since_ms: int | None, until_ms: int) -> int:
    return _batches_in(pipeline, since_ms, until_ms).count()


def batch_export_width(*, pipeline: Pipeline, since_ms: int | None, until_ms: int) -> int:
    """The partitions of the newest batch in the range (one indexed row): an export's columns,
    near enough to bound its size before it runs."""
    newest = _batches_in(pipeline, since_ms, until_ms).order_by("-batch_time_ms").values_list("offsets", flat=True).first()
    return max(1, len(newest or {}))


def batch_export_partitions(*, pipeline: Pipeline, since_ms: int | None, until_ms: int) -> list[int]:
    """Every partition of any batch in the range (a CSV's columns are known before its rows):
    asked of the database, so the offsets of 30 days of batches are not read twice."""
    table = Batch._meta.db_table
    keys = ("SELECT DISTINCT jsonb_object_keys(offsets) FROM {t} WHERE pipeline_id = %s AND batch_time_ms <= %s"
            if connection.vendor == "postgresql" else
            "SELECT DISTINCT j.key FROM {t}, json_each({t}.offsets) AS j WHERE pipeline_id = %s AND batch_time_ms <= %s")
    sql, args = keys.format(t=table), [pipeline.pk, until_ms]
    if since_ms is not None:
        sql, args = sql + " AND batch_time_ms >= %s", args + [since_ms]
    with connection.cursor() as cursor:
        cursor.execute(sql, args)
        return sorted(int(key) for (key,) in cursor.fetchall())


def export_jobs(*, user, limit: int = 50) -> list[ExportJob]:
    """A user's background exports, newest first."""
    return list(ExportJob.objects.filter(user=user).select_related("pipeline").order_by("-created_at")[:limit])


def export_job_done(*, user, job_id: int) -> ExportJob | None:
    """One of the user's finished exports (None for another user's, or one not done)."""
    return ExportJob.objects.filter(pk=job_id, user=user, status=ExportJob.Status.DONE).first()


def batch_export_rows(
    *, pipeline: Pipeline, since_ms: int | None, until_ms: int, chunk_size: int = 2000
) -> Iterator[tuple[int, int | None, bool, int | None, dict[str, int]]]:
    """(batch_time_ms, batch_id, committed, records, offsets) oldest first, read in chunks (a
    server-side cursor on PostgreSQL): 30 days of batches never sit in memory at once."""
    return (_batches_in(pipeline, since_ms, until_ms).order_by("batch_time_ms")
            .values_list("batch_time_ms", "batch_id", "committed", "records", "offsets")
            .iterator(chunk_size=chunk_size))
