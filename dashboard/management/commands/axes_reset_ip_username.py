"""django-axes' axes_reset_ip_username, with the lockouts it removes audited as login.unlocked (dashboard/accounts/lockout.py)."""
from axes.management.commands.axes_reset_ip_username import Command as AxesCommand

from dashboard.accounts.lockout import unlocking_by
from dashboard.audit.actor import Actor


class Command(AxesCommand):
    def handle(self, *args, **options):
        with unlocking_by(Actor.of_command("axes_reset_ip_username")):
            return super().handle(*args, **options)
