"""Login throttling: what django-axes needs from us, and the audit events of lockouts.

django-axes counts failed logins per (user name, client address) and refuses that pair for
LOGIN_COOLOFF_S after LOGIN_FAILURE_LIMIT failures (settings: "Login throttling"). This module
gives it three things:
- the client address (`client_address`): REMOTE_ADDR, or with LOGIN_PROXY_COUNT proxies in front
  the address the outermost of them saw, from the right of X-Forwarded-For;
- the answer to a refused login (`lockout_response`): a 429 page saying how long and whom to ask;
- audit events: `login.locked_out` when a pair reaches the limit (once per cool-off, not at
  every refused attempt after it, so hammering a locked login does not grow the append-only log), and
  `login.unlocked` when a lockout still in force is removed (the admin's "Access attempts",
  `manage.py axes_reset*`), naming who removed it.
"""
from __future__ import annotations

import contextvars
import ipaddress
import math
from contextlib import contextmanager
from datetime import timedelta

from axes.helpers import get_cool_off, get_failure_limit
from axes.models import AccessAttempt
from axes.signals import user_locked_out
from django.conf import settings
from django.db.models import Max, Sum
from django.db.models.signals import post_delete, pre_delete
from django.dispatch import receiver
from django.shortcuts import render
from django.utils import timezone

from dashboard.audit.actor import Actor
from dashboard.audit.services import audit_append
from dashboard.models import AuditEvent

LOCKED_OUT = "login.locked_out"
UNLOCKED = "login.unlocked"

# The person or command removing lockouts right now (set around the admin's and the commands'
# deletions); a deletion with none set was done by code we do not know of, and says so.
_unlocker: contextvars.ContextVar[Actor | None] = contextvars.ContextVar("offsetwatch_unlocker", default=None)


def client_address(request) -> str | None:
    """The address logins are counted by. X-Forwarded-For is believed only as far as the operator
    said proxies append to it (OFFSETWATCH_PROXY_COUNT): the entry the outermost trusted proxy
    added. Anything before it was written by the client and is ignored; a header too short or not
    an address means the request did not come through the proxies: REMOTE_ADDR."""
    remote = request.META.get("REMOTE_ADDR")
    proxies = settings.LOGIN_PROXY_COUNT
    if proxies <= 0:
        return remote
    hops = [hop.strip() for hop in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",") if hop.strip()]
    if len(hops) < proxies:
        return remote
    candidate = hops[-proxies]
    try:
        return str(ipaddress.ip_address(candidate))
    except ValueError:
        return remote


def cooloff_seconds() -> int | None:
    """Seconds a lockout lasts; None: until an admin unlocks it (OFFSETWATCH_LOGIN_COOLOFF=0)."""
    cooloff = get_cool_off()
    return None if cooloff is None else int(cooloff.total_seconds())


def _wait_words(seconds: int | None) -> str:
    if seconds is None:
        return "until an administrator unlocks it"
    if seconds < 120:
        return f"for {seconds} seconds"
    return f"for {math.ceil(seconds / 60)} minutes"


def lockout_response(request, original_response=None, credentials=None):
    """A refused login: 429 with Retry-After, for the dashboard's and the admin's login alike."""
    seconds = cooloff_seconds()
    response = render(request, "registration/locked_out.html", {
        "wait": _wait_words(seconds), "failure_limit": get_failure_limit(request, credentials),
    }, status=429)
    if seconds is not None:
        response["Retry-After"] = str(seconds)
    return response


def attempt_subject(username: str, ip_address) -> str:
    return f"login of {username!r} from {ip_address}"[:500]


def _newest_id_before(moment) -> int:
    """The id of the newest audit event older than `moment` (0: none). Events are appended in
    time order, so the ones since `moment` are the ids above it; this walks back from the newest
    id and stops at the first older event, reading only the recent events (the log has no index
    on time, and a search by time and subject alone would read all of it at every refused login)."""
    return AuditEvent.objects.filter(at__lt=moment).order_by("-id").values_list("id", flat=True).first() or 0


def _latest_event(subject: str) -> str | None:
    """The newest lockout or unlock event of a pair within the cool-off (None: neither)."""
    window = get_cool_off() or _PERMANENT_LOCKOUT_REMINDER
    return (AuditEvent.objects.filter(id__gt=_newest_id_before(timezone.now() - window),
                                      action__in=[LOCKED_OUT, UNLOCKED], subject=subject)
            .order_by("-id").values_list("action", flat=True).first())


# A lockout with no cool-off (locked until an admin unlocks it) is recorded again after this long
# if it is still being tried.
_PERMANENT_LOCKOUT_REMINDER = timedelta(days=1)


@receiver(user_locked_out, dispatch_uid="offsetwatch_audit_locked_out")
def audit_locked_out(sender, request, username, ip_address, **kwargs):
    """axes signals at the limit and again at every refused attempt after it. One event per
    lockout: none if this pair's lockout was recorded within the cool-off (each refused attempt
    restarts it, so a pair hammered for hours gets one event per cool-off, not one per request).
    Judged from the log itself, not from the failure count reaching exactly the limit, which two
    concurrent failures can jump over."""
    username = (username or "")[:150]
    subject = attempt_subject(username, ip_address)
    if _latest_event(subject) == LOCKED_OUT:  # (after an unlock, a new lockout is a new event)
        return
    audit_append(
        actor=Actor("anonymous", None, ip_address or ""), action=LOCKED_OUT, subject=subject,
        details={"username": username, "ip_address": ip_address,
                 "failures": getattr(request, "axes_failures_since_start", None), "cooloff_seconds": cooloff_seconds()},
    )


@contextmanager
def unlocking_by(actor: Actor):
    """Name who removes lockouts inside this block (the admin's request, a command)."""
    token = _unlocker.set(actor)
    try:
        yield
    finally:
        _unlocker.reset(token)


@receiver(pre_delete, sender=AccessAttempt, dispatch_uid="offsetwatch_lockout_before_delete")
def remember_pair(sender, instance: AccessAttempt, **kwargs):
    """Before a deletion (all rows' pre_delete come before the one DELETE), note the state of the
    row's pair over all its rows: axes keeps one row per user agent, and a lockout is their sum."""
    pair = AccessAttempt.objects.filter(username=instance.username, ip_address=instance.ip_address)
    instance._offsetwatch_pair = pair.aggregate(failures=Sum("failures_since_start"), last=Max("attempt_time"))


def _in_force(pair: dict) -> bool:
    limit = settings.AXES_FAILURE_LIMIT
    cooloff = get_cool_off()
    return (isinstance(limit, int) and (pair["failures"] or 0) >= limit
            and (cooloff is None or pair["last"] >= timezone.now() - cooloff))


@receiver(post_delete, sender=AccessAttempt, dispatch_uid="offsetwatch_audit_unlocked")
def audit_unlocked(sender, instance: AccessAttempt, **kwargs):
    # Expired attempts are deleted too (lazily, at some later login): their lockout ended by
    # itself when its cool-off passed, which the lockout's own event already says.
    pair = getattr(instance, "_offsetwatch_pair", None)
    if pair is None or not _in_force(pair):
        return
    username = (instance.username or "")[:150]
    subject = attempt_subject(username, instance.ip_address)
    if _latest_event(subject) == UNLOCKED:  # another row of the same pair, in the same deletion
        return
    who = _unlocker.get() or Actor("unknown (attempts deleted outside the admin and manage.py axes_reset*)")
    audit_append(
        actor=who, action=UNLOCKED, subject=subject,
        details={"username": username, "ip_address": instance.ip_address, "failures": pair["failures"]},
    )
