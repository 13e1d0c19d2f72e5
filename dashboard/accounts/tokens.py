"""Tokens: pipeline tokens (a job's identity toward the API) and API tokens (a user's, for scripts
and Prometheus); only their hashes are stored. Issuing and revoking are audited."""
from __future__ import annotations

import hashlib
import logging
import secrets
from datetime import timedelta

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from dashboard.audit.actor import Actor
from dashboard.audit.services import audit_append
from dashboard.models import (
    ApiToken,
    Pipeline,
    PipelineToken,
    Store,
)

log = logging.getLogger(__name__)


TOKEN_PREFIX = "owp_"


API_TOKEN_PREFIX = "owu_"


def token_hash(token: str) -> str:
    """What is stored of a machine token (pipeline or API token): its SHA-256, never the token."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def _token_new(prefix: str) -> str:
    return prefix + secrets.token_urlsafe(32)


@transaction.atomic
def pipeline_token_issue(
    *, pipeline: Pipeline, name: str, actor: Actor = Actor.SYSTEM,
) -> tuple[PipelineToken, str]:
    """A new token for a pipeline's job. The plain token is returned once and never stored; the
    audit event names its prefix only."""
    plain = _token_new(TOKEN_PREFIX)
    token = PipelineToken.objects.create(pipeline=pipeline, name=name, token_hash=token_hash(plain), prefix=plain[:12])
    audit_append(action="token.issued", subject=f"pipeline token {token.prefix}… ({name}) for {pipeline}",
                 pipeline=pipeline, after={"kind": "pipeline", "prefix": token.prefix, "name": name},
                 actor=actor)
    return token, plain


@transaction.atomic
def pipeline_token_revoke(
    *, token: PipelineToken, actor: Actor = Actor.SYSTEM,
) -> None:
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
        audit_append(action="token.revoked", subject=f"pipeline token {token.prefix}… ({token.name}) for {token.pipeline}",
                     pipeline=token.pipeline, before={"revoked_at": None},
                     after={"revoked_at": token.revoked_at.isoformat()},
                     actor=actor)


@transaction.atomic
def pipeline_get_or_declare(
    *, store: Store, topic: str, group: str, actor: Actor = Actor.SYSTEM,
) -> tuple[Pipeline, bool]:
    """The pipeline, declared by a person before the collectors discovered it (so its job can
    report from its first start); a declaration is audited, a discovery by the collectors is not."""
    pipeline, created = Pipeline.objects.get_or_create(store=store, topic=topic, group=group)
    if created:
        audit_append(action="pipeline.declared", subject=f"pipeline {pipeline} in store {store.name}", pipeline=pipeline,
                     after={"store": store.name, "topic": topic, "group": group},
                     actor=actor)
    return pipeline, created


def pipeline_token_for(*, token: str) -> PipelineToken | None:
    """The (non-revoked) pipeline token, with its pipeline; None for unknown or revoked tokens."""
    if not token.startswith(TOKEN_PREFIX):
        return None
    return PipelineToken.objects.select_related("pipeline", "pipeline__store").filter(
        token_hash=token_hash(token), revoked_at=None
    ).first()


def pipeline_token_actor(token: PipelineToken) -> str:
    """Who a job is in the audit log: the token it authenticated with (its prefix and name). What
    the job says of itself (its `instance`) is its own claim and goes into an event's details."""
    return f"pipeline token {token.prefix}… ({token.name})"


API_TOKEN_TOUCH_EVERY = timedelta(seconds=60)


@transaction.atomic
def api_token_issue(
    *, user, name: str, actor: Actor = Actor.SYSTEM,
) -> tuple[ApiToken, str]:
    """A new API token acting as `user`. The plain token is returned once and never stored; the
    audit event names its prefix only."""
    plain = _token_new(API_TOKEN_PREFIX)
    token = ApiToken.objects.create(user=user, name=name, token_hash=token_hash(plain), prefix=plain[:12])
    audit_append(action="token.issued", subject=f"API token {token.prefix}… ({name}) acting as {user.get_username()}",
                 after={"kind": "api", "prefix": token.prefix, "name": name, "user": user.get_username()},
                 details={"user_id": user.pk},
                 actor=actor)
    return token, plain


@transaction.atomic
def api_token_revoke(
    *, token: ApiToken, actor: Actor = Actor.SYSTEM,
) -> None:
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
        audit_append(action="token.revoked",
                     subject=f"API token {token.prefix}… ({token.name}) acting as {token.user.get_username()}",
                     before={"revoked_at": None}, after={"revoked_at": token.revoked_at.isoformat()},
                     details={"user_id": token.user_id},
                     actor=actor)


def api_token_user(*, token: str):
    """The active user a live API token acts as; None for unknown, revoked or inactive-user tokens.
    Records when the token was last used, at most once a minute (a conditional UPDATE)."""
    if not token.startswith(API_TOKEN_PREFIX) or len(token) > 200:
        return None
    found = ApiToken.objects.select_related("user").filter(token_hash=token_hash(token), revoked_at=None).first()
    if found is None or not found.user.is_active:
        return None
    now = timezone.now()
    ApiToken.objects.filter(pk=found.pk).filter(
        Q(last_used_at=None) | Q(last_used_at__lt=now - API_TOKEN_TOUCH_EVERY)
    ).update(last_used_at=now)
    return found.user
