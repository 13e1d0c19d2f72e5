"""Who acts, as the audit log records it: a name, the user's id (when a user acts) and the address
the request came from. Built once where a request or command starts (Actor.of_request,
Actor.of_job, Actor.of_command) and handed to the services as one `actor=` argument, so the three
fields travel together and are written as given by audit_append.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar


@dataclass(frozen=True)
class Actor:
    who: str  # the event's `actor` text: "alice", "bob (API token)", "pipeline token owp_…", ...
    user_id: int | None = None
    remote_addr: str = ""

    SYSTEM: ClassVar[Actor]  # what the application does by itself (the collectors, expiries)

    @classmethod
    def of_request(cls, request) -> Actor:
        """The user of a request (a session or an API token), or "anonymous", from REMOTE_ADDR.

        No proxy is trusted by the settings, so X-Forwarded-For (which any client can send) is
        never believed."""
        user = getattr(request, "user", None)
        if user is None or not user.is_authenticated:
            return cls("anonymous", None, _address(request))
        name = user.get_username()
        if getattr(request, "auth_method", "") == "token":
            name += " (API token)"
        return cls(name, user.pk, _address(request))

    @classmethod
    def of_user(cls, user, remote_addr: str = "") -> Actor:
        """A user acting (the pages' rewind workflow passes its user; tests call the services so)."""
        return cls(user.username, user.pk, remote_addr)

    @classmethod
    def of_job(cls, who: str, request) -> Actor:
        """A job, known by the pipeline token it authenticated with (accounts.tokens
        pipeline_token_actor names it); no user."""
        return cls(who, None, _address(request))

    @classmethod
    def of_command(cls, command: str) -> Actor:
        """A management command and the operating-system account that ran it (whoever has a shell
        on the server can run it, so that account is all there is to name)."""
        import getpass
        import os

        try:
            os_user = getpass.getuser()
        except (KeyError, OSError):  # a container uid without a passwd entry
            os_user = f"uid {os.getuid()}"
        return cls(f"manage.py {command} (system user {os_user})")


Actor.SYSTEM = Actor("system")


def _address(request) -> str:
    return request.META.get("REMOTE_ADDR", "")
