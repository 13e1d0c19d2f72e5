"""Thin Celery tasks of the dashboard: take ids, call one service."""
from __future__ import annotations

from celery import shared_task

from dashboard.alerting import outbox
from dashboard.exports.services import EXPORT_RUN_TASK, export_job_run

# A 30-day export of a busy pipeline takes minutes; the hard limit bounds a stuck one (prune
# marks a job still "running" after that as failed).
SOFT_LIMIT_S = 3600
HARD_LIMIT_S = SOFT_LIMIT_S + 60


@shared_task(name=EXPORT_RUN_TASK, ignore_result=True, soft_time_limit=SOFT_LIMIT_S, time_limit=HARD_LIMIT_S)
def export_run(job_id: int) -> None:
    export_job_run(job_id=job_id)


@shared_task(name=outbox.NOTIFICATION_DELIVER_TASK, ignore_result=True, soft_time_limit=120, time_limit=150)
def notification_deliver(notification_id: int) -> None:
    """Deliver one outbox row (dashboard.alerting.outbox): retries are the sweep's, by the row's next attempt time."""
    outbox.notification_deliver(notification_id)


@shared_task(name=outbox.NOTIFICATIONS_SWEEP_TASK, ignore_result=True, soft_time_limit=300, time_limit=330)
def notifications_sweep() -> None:
    """Deliver what is due and was not delivered on commit (lost task, dead worker, broker outage, retries)."""
    outbox.notifications_sweep()
