"""Users: created or updated with their role groups, audited."""
from __future__ import annotations

import logging

from django.contrib.auth import get_user_model
from django.db import transaction

from dashboard.accounts.roles import ROLES
from dashboard.audit.actor import Actor
from dashboard.audit.services import audit_append, changed_values

log = logging.getLogger(__name__)


class InvalidUser(ValueError):
    """A user that cannot be created as asked; the message names what is wrong."""


@transaction.atomic
def user_create_or_update(
    *, username: str, roles: list[str], password: str | None = None, email: str | None = None,
    actor: Actor = Actor.SYSTEM,
) -> tuple[object, bool]:
    """Create a user or update an existing one: its role groups become exactly `roles` (other
    groups are kept), the password and email are set when given. Returns (user, created).
    A new user without a password gets an unusable one: it can only act through API tokens.
    What changed is audited (roles, email, whether a password was set; never the password)."""
    from django.contrib.auth import password_validation
    from django.contrib.auth.models import Group
    from django.core.exceptions import ValidationError
    from django.core.validators import validate_email

    User = get_user_model()
    unknown = [r for r in roles if r not in ROLES]
    if unknown or not roles:
        raise InvalidUser(f"unknown role(s) {', '.join(map(repr, unknown)) or '(none given)'}: use {', '.join(ROLES)}")
    username_field = User._meta.get_field(User.USERNAME_FIELD)
    try:
        username_field.clean(username, None)
    except ValidationError as exc:
        raise InvalidUser(f"user name {username!r}: {' '.join(exc.messages)}") from None
    if email is not None:
        try:
            validate_email(email)
        except ValidationError:
            raise InvalidUser(f"email {email!r} is not a valid address") from None
    user = User.objects.filter(**{User.USERNAME_FIELD: username}).first()
    created = user is None
    before = None if created else {
        "email": user.email, "roles": sorted(user.groups.filter(name__in=ROLES).values_list("name", flat=True))}
    had_password = not created and user.has_usable_password()
    if created:
        user = User(**{User.USERNAME_FIELD: username})
    if email is not None:
        user.email = email
    if password is not None:
        try:
            password_validation.validate_password(password, user)
        except ValidationError as exc:
            raise InvalidUser(f"password refused: {' '.join(exc.messages)}") from None
        user.set_password(password)
    elif created:
        user.set_unusable_password()
    user.save()
    # The migration creates the groups; get_or_create keeps this working on a flushed database.
    wanted = [Group.objects.get_or_create(name=role)[0] for role in roles]
    user.groups.remove(*Group.objects.filter(name__in=ROLES).exclude(name__in=roles))
    user.groups.add(*wanted)
    after = {"email": user.email, "roles": sorted(set(roles))}
    if created:
        after["password"] = "set" if password is not None else "none (API tokens only)"
        audit_append(action="user.created", subject=f"user {username}", after=after, details={"user_id": user.pk},
                     actor=actor)
    else:
        before, after = changed_values(before, after)
        if password is not None:
            before["password"] = "set" if had_password else "none (API tokens only)"
            after["password"] = "changed"
        if after:
            audit_append(action="user.roles_changed" if "roles" in after else "user.changed",
                         subject=f"user {username}", before=before, after=after, details={"user_id": user.pk},
                         actor=actor)
    return user, created
