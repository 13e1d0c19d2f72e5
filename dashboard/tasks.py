"""Thin Celery tasks of the dashboard: take ids, call one service."""
from __future__ import annotations

from celery import shared_task

# A 30-day export of a busy pipeline takes minutes; the hard limit bounds a stuck one (prune
# marks a job still "running" after that as failed).
SOFT_LIMIT_S = 3600
HARD_LIMIT_S = SOFT_LIMIT_S + 60


@shared_task(name="dashboard.tasks.export_run", ignore_result=True, soft_time_limit=SOFT_LIMIT_S, time_limit=HARD_LIMIT_S)
def export_run(job_id: int) -> None:
    from dashboard import services

    services.export_job_run(job_id=job_id)
