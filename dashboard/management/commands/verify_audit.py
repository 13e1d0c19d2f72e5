"""python manage.py verify_audit

Walks the audit log's hash chain from the first event. Prints "audit log intact: N events" and
exits 0, or says where the chain breaks and why (the event's id and action) and exits 1, so a
cron job or a monitoring check can run it.
"""
from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from dashboard.audit.services import audit_verify


class Command(BaseCommand):
    help = "Verify the audit log's hash chain (exit 1 and where it breaks if it was tampered with)."

    def handle(self, *args, **options):
        result = audit_verify()
        if not result.ok:
            raise CommandError(
                f"audit log broken at event {result.broken_at}: {result.reason} "
                f"({result.checked} event{'s' if result.checked != 1 else ''} before it chain correctly)",
                returncode=1)
        self.stdout.write(f"audit log intact: {result.checked} event{'s' if result.checked != 1 else ''}")
