"""The Celery app: Redis broker, one beat entry that fans a cycle out to one task per source."""
from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")

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
