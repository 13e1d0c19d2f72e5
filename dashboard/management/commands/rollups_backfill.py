"""python manage.py rollups_backfill: the charts' minute and hour roll-ups of history stored before
they existed (run once after the upgrade that adds them; safe to run again)."""
from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.core.management.base import BaseCommand
from django.utils import timezone

from dashboard.charts.backfill import rollups_backfill
from dashboard.models import Pipeline


class Command(BaseCommand):
    help = ("Compute the charts' per-minute and per-hour roll-ups from the stored lag and watermark samples "
            "(buckets already written by the collectors are kept).")

    def add_arguments(self, parser):
        parser.add_argument("--pipeline", type=int, action="append", help="only this pipeline id (repeatable)")

    def handle(self, *args, **options):
        now = timezone.now()
        since = now - timedelta(seconds=settings.RETENTION_HOUR_S)
        pipelines = Pipeline.objects.order_by("pk")
        if options["pipeline"]:
            pipelines = pipelines.filter(pk__in=options["pipeline"])
        total = 0
        for pipeline in pipelines.select_related("store"):
            n = rollups_backfill(pipeline=pipeline, since=since, until=now, now=now)
            total += n
            self.stdout.write(f"pipeline {pipeline.pk} ({pipeline.topic} / {pipeline.group}): {n} roll-ups written")
        self.stdout.write(f"{total} roll-ups written")
