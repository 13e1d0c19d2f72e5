"""python manage.py prune: downsample and expire history (beat runs it hourly)."""
from __future__ import annotations

from django.core.management.base import BaseCommand
from django.utils import timezone

from dashboard.monitoring.pruning import history_prune


class Command(BaseCommand):
    help = "Downsample old samples (per minute after a day, per hour after a week) and expire old history."

    def handle(self, *args, **options):
        for what, n in history_prune(now=timezone.now()).items():
            self.stdout.write(f"{what}: {n}" if "partitions" in what else f"{what}: {n} rows deleted")
