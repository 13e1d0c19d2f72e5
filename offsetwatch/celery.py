"""The Celery app: Redis broker; beat fans a cycle out to one task per source, prunes, expires rewinds
and sweeps the notification outbox."""
from __future__ import annotations

import gc
import os

from celery import Celery
from celery.signals import before_task_publish, worker_process_init

from collectors.heartbeat import beat_sent_record

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "offsetwatch.settings")

app = Celery("offsetwatch")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["collectors", "dashboard"])


@app.on_after_configure.connect
def _schedule(sender, **kwargs):
    from django.conf import settings

    sender.add_periodic_task(settings.POLL_INTERVAL_S, sender.signature("collectors.tasks.collect_all"), name="collect-all")
    sender.add_periodic_task(settings.PRUNE_INTERVAL_S, sender.signature("collectors.tasks.prune"), name="prune")
    sender.add_periodic_task(settings.POLL_INTERVAL_S, sender.signature("collectors.tasks.expire_rewinds"),
                             name="expire-rewinds")
    sender.add_periodic_task(settings.NOTIFY_SWEEP_INTERVAL_S, sender.signature("dashboard.tasks.notifications_sweep"),
                             name="notifications-sweep")


@before_task_publish.connect
def _beat_heartbeat(sender=None, **kwargs):
    """beat's tick, seen where it happens: the process sending collect_all notes the time in Redis
    (dashboard.monitoring.health tells beat down from workers down with it)."""
    if sender == "collectors.tasks.collect_all":
        beat_sent_record()


@worker_process_init.connect
def _gc_freeze(**kwargs):
    """Each pool process moves what start-up built (Django, the apps, the clients' modules) out
    of the garbage collector's reach: a cycle allocates many short-lived objects, and every full
    collection otherwise walks those hundreds of thousands of permanent ones too (measured on the
    10,000-partition cycle, bench/collect_cycle.py: 1.32 s a cycle before, 0.96 s with it)."""
    gc.freeze()
