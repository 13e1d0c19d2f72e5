"""Export jobs: created by a user (bounded queue), run by a Celery worker (dashboard.tasks.export_run),
pruned when old."""
from __future__ import annotations

import contextlib
import logging
from datetime import datetime, timedelta
from pathlib import Path

from celery import current_app
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from dashboard.charts import render as charts
from dashboard.charts.selectors import SAMPLES
from dashboard.exports.formats import batches_table, chart_table_rows, download_name, export_preamble, range_ms
from dashboard.exports.selectors import batch_export_count
from dashboard.models import (
    ExportJob,
    Pipeline,
)
from dashboard.params import ChartParams, TimeRange, time_zone
from offsetwatch.lib.streaming import csv_write

log = logging.getLogger(__name__)

EXPORT_RUN_TASK = "dashboard.tasks.export_run"  # a task name is part of the deployment: kept


class ExportQueueFull(Exception):
    """The user already has EXPORT_JOBS_PER_USER background exports queued or running."""


def export_job_create(*, user, pipeline: Pipeline, kind: str, time_range, chart_kind: str = "total",
                      chart_unit: str = "messages") -> ExportJob:
    """Record an export to run in the background and queue it once the row is committed. The
    range is frozen now: "last 30 days" means the 30 days before the request. ExportQueueFull
    if the user has EXPORT_JOBS_PER_USER exports pending: one viewer cannot fill the workers."""
    with transaction.atomic():
        # The user's row locked: two requests at once cannot both count the same pending jobs.
        list(get_user_model().objects.select_for_update().filter(pk=user.pk).values_list("pk", flat=True))
        pending = ExportJob.objects.filter(
            user=user, status__in=(ExportJob.Status.QUEUED, ExportJob.Status.RUNNING)).count()
        if pending >= settings.EXPORT_JOBS_PER_USER:
            raise ExportQueueFull(
                f"you have {pending} background exports queued or running, the most a user may have "
                f"(OFFSETWATCH_EXPORT_JOBS_PER_USER={settings.EXPORT_JOBS_PER_USER}): wait for one to finish "
                "(see your exports)")
        job = ExportJob.objects.create(
            user=user, pipeline=pipeline, kind=kind,
            params={"since": time_range.since.isoformat() if time_range.since else None,
                    "until": time_range.until.isoformat(), "preset": time_range.preset,
                    "kind": chart_kind, "unit": chart_unit},
        )
        transaction.on_commit(lambda: _export_enqueue(job.pk))
    return job


def _export_enqueue(job_id: int) -> None:
    try:
        # By name (dashboard.tasks imports this module): the same message export_run.delay sends.
        current_app.send_task(EXPORT_RUN_TASK, args=(job_id,))
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
            since_ms, until_ms = range_ms(time_range)
            rows_of_job.update(rows_total=batch_export_count(pipeline=pipeline, since_ms=since_ms,
                                                                       until_ms=until_ms))
            header, rows = batches_table(pipeline=pipeline, time_range=time_range, tz=tz)
            name_what = "batches"
        else:
            params = ChartParams(kind=job.params.get("kind", "total"), unit=job.params.get("unit", "messages"),
                                 range=time_range)
            # Full resolution: an export is every stored sample, not the roll-ups a chart draws.
            chart = charts.pipeline_chart(pipeline=pipeline, params=params, tz=tz, resolution=SAMPLES)
            what = chart.title
            rows_of_job.update(rows_total=len(chart.table.times))
            header, rows = chart_table_rows(chart.table, tz)
            name_what = f"{params.kind}-{params.unit}"
        preamble = export_preamble(pipeline=pipeline, what=what, time_range=time_range, tz=tz,
                                           now=timezone.now())
        count = csv_write(path=partial, header=header, rows=rows, preamble=preamble,
                                  progress=lambda n: rows_of_job.update(rows_done=n))
        partial.rename(final)
        rows_of_job.update(
            status=ExportJob.Status.DONE, rows_done=count, rows_total=count, file_path=str(final),
            file_name=download_name(pipeline=pipeline, what=name_what, time_range=time_range, ext="csv"),
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
