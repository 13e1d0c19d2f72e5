"""python manage.py issue_api_token --user NAME --name LABEL

Prints a new API token once (only its hash is stored). Machines send it as
`Authorization: Bearer owu_...` to /api/v1/ and /metrics; it acts with its user's roles.
"""
from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from dashboard.accounts.roles import user_roles
from dashboard.accounts.tokens import api_token_issue
from dashboard.audit.actor import Actor


class Command(BaseCommand):
    help = "Issue an API token for a user (shown once); it acts with the user's roles."

    def add_arguments(self, parser):
        parser.add_argument("--user", required=True, help="the user the token acts as")
        parser.add_argument("--name", required=True, help="what the token is for (e.g. prometheus), shown in the admin")

    def handle(self, *args, user: str, name: str, **options):
        User = get_user_model()
        found = User.objects.filter(**{User.USERNAME_FIELD: user}).first()
        if found is None:
            raise CommandError(f"no user named {user!r}; create one with: manage.py create_user {user} --role viewer")
        if not found.is_active:
            raise CommandError(f"user {user!r} is inactive: its tokens would be refused")
        if not name.strip():
            raise CommandError("--name must not be empty: it tells tokens apart in the admin")
        roles = user_roles(found)
        if not roles:
            raise CommandError(f"user {user!r} has no role: its token would get 403 everywhere; "
                               f"give it one first (manage.py create_user {user} --role viewer)")
        token, plain = api_token_issue(user=found, name=name.strip()[:200],
                                               actor=Actor.of_command("issue_api_token"))
        self.stderr.write(f"token {token.prefix}… for {user!r} (roles: {', '.join(sorted(roles))}); "
                          "it is shown only once:")
        self.stdout.write(plain)
