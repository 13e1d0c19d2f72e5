"""python manage.py create_user NAME --role viewer|operator|approver [--role ...]
                                [--password-file F | --password-stdin] [--email E]

Creates a user or updates an existing one; its roles become exactly the ones given (other groups
are kept). Without a password a new user cannot log in and acts only through API tokens
(manage.py issue_api_token); an existing user keeps its password. The password never goes on the
command line, where `ps` and shell history would show it.
"""
from __future__ import annotations

import sys
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from dashboard.accounts.roles import ROLES
from dashboard.accounts.users import InvalidUser, user_create_or_update
from dashboard.audit.actor import Actor


class Command(BaseCommand):
    help = "Create or update a user and set its roles (viewer, operator, approver)."
    stealth_options = ("stdin",)  # tests pass a file object instead of the terminal

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--role", action="append", required=True, metavar="ROLE",
                            help=f"one of {', '.join(ROLES)}; repeat for several")
        source = parser.add_mutually_exclusive_group()
        source.add_argument("--password-file", help="read the password from this file (first line)")
        source.add_argument("--password-stdin", action="store_true", help="read the password from standard input")
        parser.add_argument("--email")

    def handle(self, *args, username: str, role: list[str], password_file: str | None, password_stdin: bool,
               email: str | None, **options):
        password = None
        if password_file:
            try:
                text = Path(password_file).read_text()
                password = text.splitlines()[0] if text else ""
            except OSError as exc:
                raise CommandError(f"cannot read --password-file {password_file}: {exc.strerror}") from None
            except UnicodeDecodeError:
                raise CommandError(f"--password-file {password_file} is not UTF-8 text") from None
        elif password_stdin:
            password = (options.get("stdin") or sys.stdin).readline().rstrip("\r\n")
        if password is not None and not password:
            raise CommandError("the password is empty" + (f" (in {password_file})" if password_file else " (stdin)"))
        try:
            user, created = user_create_or_update(
                username=username, roles=list(dict.fromkeys(role)), password=password, email=email,
                actor=Actor.of_command("create_user"))
        except InvalidUser as exc:
            raise CommandError(str(exc)) from None
        how = "created" if created else "updated"
        login = "" if user.has_usable_password() else " (no password: API tokens only)"
        self.stdout.write(f"{how} user {user.get_username()!r} with role(s) {', '.join(dict.fromkeys(role))}{login}")
