"""python manage.py collect_once: one synchronous collection cycle (debugging and tests)."""
from __future__ import annotations

from django.core.management.base import BaseCommand

from collectors.cycle import collect_once


class Command(BaseCommand):
    help = "Poll every enabled store and every cluster once, synchronously, and print a summary."

    def handle(self, *args, **options):
        summary = collect_once()
        self.stdout.write(f"batches added: {summary.batches_added}; lag samples: {summary.lag_samples}")
        for error in summary.errors:
            self.stderr.write(f"source failed: {error}")
