"""The tests' cast, defined once: each named person and the roles they hold.

Tests take a person as a fixture named for them (tests/conftest.py: `vera`, `olga`, ...;
`vera_logged_in` is vera with the test client logged in as her, `vera_client` that client);
helpers that build a whole world (tests/factories.py) and browser tests call `actor(name)`. People are made as
`manage.py create_user` makes them, without a password unless the test logs in through the login
form (`actor(name, can_log_in=True)`, then `passphrase(name)`): hashing one costs ~0.2 s.
"""
from __future__ import annotations

from dashboard.accounts.roles import APPROVER, OPERATOR, VIEWER

CAST: dict[str, tuple[str, ...]] = {
    "vera": (VIEWER,),  # the viewer: reads pages, charts, exports and the API
    "erin": (VIEWER,),  # a second viewer: another person's exports, tokens and sessions
    "olga": (OPERATOR,),  # the operator: requests rewinds (operator implies viewer)
    "otto": (OPERATOR,),  # a second operator: someone who did not request the rewind
    "amir": (APPROVER,),  # the approver: decides rewinds others requested
    "sam": (OPERATOR, APPROVER),  # holds every role: may not approve his own request, sees every page
    "dave": (),  # logged in, no role: sees no data
    "prometheus": (VIEWER,),  # the account whose API token a scraper (Prometheus, Grafana) holds
}


def passphrase(name: str) -> str:
    """The password of a cast member made with `can_log_in=True`."""
    return f"{name}'s long passphrase"


def actor(name: str, *, can_log_in: bool = False):
    """The cast member `name`, made on the first call of a test; later calls return that account."""
    from django.contrib.auth.models import User

    from tests.factories import person

    made = User.objects.filter(username=name).first()
    return made or person(name, *CAST[name], password=passphrase(name) if can_log_in else None)
