"""Who may do what: three roles kept as Django groups, checked by one decorator.

viewer reads, operator may request rewinds (a later feature), approver may approve them.
Operator and approver imply viewer; superusers have every role. A logged-in user with no role
sees no data (403 "no role assigned"): an account created by hand in the admin, or an SSO
account nobody vetted yet, must not read every pipeline by default.
"""
from __future__ import annotations

from functools import wraps

from django.contrib.auth.views import redirect_to_login
from django.http import HttpResponse, JsonResponse
from django.shortcuts import render

from dashboard.accounts.tokens import api_token_user

VIEWER = "viewer"
OPERATOR = "operator"
APPROVER = "approver"
ROLES = (VIEWER, OPERATOR, APPROVER)

# The groups that grant each role.
_GRANTED_BY = {
    VIEWER: {VIEWER, OPERATOR, APPROVER},
    OPERATOR: {OPERATOR},
    APPROVER: {APPROVER},
}


def user_roles(user) -> set[str]:
    """The roles a user has (implied ones included); cached on the user object for the request."""
    if user is None or not user.is_authenticated or not user.is_active:
        return set()
    cached = getattr(user, "_offsetwatch_roles", None)
    if cached is None:
        if user.is_superuser:
            cached = set(ROLES)
        else:
            groups = set(user.groups.filter(name__in=ROLES).values_list("name", flat=True))
            cached = {role for role, granted_by in _GRANTED_BY.items() if groups & granted_by}
        user._offsetwatch_roles = cached
    return cached


def user_has_role(user, role: str) -> bool:
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r} (roles: {', '.join(ROLES)})")
    return role in user_roles(user)


def missing_role_message(user, role: str) -> str:
    roles = user_roles(user)
    if not roles:
        return f"no role assigned to {user.get_username()!r}: ask an admin for the {role} role"
    return f"this needs the {role} role; {user.get_username()!r} has: {', '.join(sorted(roles))}"


UNAUTHENTICATED = ("authentication required: log in (session) or send 'Authorization: Bearer <API token>' "
                   "(manage.py issue_api_token)")


def _is_api(request) -> bool:
    return request.path.startswith("/api/")


def _denied(request, status: int, message: str, *, machine: bool) -> HttpResponse:
    """A 401/403 in the caller's language: JSON under /api/, plain text for machine endpoints
    (/metrics), a page for people."""
    if _is_api(request):
        response = JsonResponse({"error": message}, status=status)
    elif machine:
        response = HttpResponse(message + "\n", status=status, content_type="text/plain; charset=utf-8")
    else:
        response = render(request, "dashboard/forbidden.html", {"message": message}, status=status)
    if status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="offsetwatch"'
    return response


def bearer_token(request) -> str | None:
    """The token of an `Authorization: Bearer ...` header; None without such a header."""
    auth = request.headers.get("Authorization", "")
    if not auth.lower().startswith("bearer "):
        return None
    return auth[7:].strip()


def role_required(role: str, *, tokens: bool = False):
    """Let the view run only for a user with `role`.

    `tokens=True` (API and /metrics) also accepts `Authorization: Bearer owu_...` API tokens,
    which act as their user. A Bearer header that does not name a live token is a 401 even when
    a session is present: explicit credentials that fail must not quietly fall back.
    Anonymous people on pages are sent to the login page; machines get a 401.
    """
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r} (roles: {', '.join(ROLES)})")

    def decorator(view):
        @wraps(view)
        def wrapped(request, *args, **kwargs):
            machine = tokens or _is_api(request)
            token = bearer_token(request) if tokens else None
            if token is not None:

                user = api_token_user(token=token)
                if user is None:
                    hint = " (owp_ pipeline tokens only report starts)" if token.startswith("owp_") else ""
                    return _denied(request, 401, f"unknown or revoked API token{hint}", machine=True)
                request.user = user
                request.auth_method = "token"
            elif not request.user.is_authenticated:
                if not machine:
                    return redirect_to_login(request.get_full_path())
                return _denied(request, 401, UNAUTHENTICATED, machine=True)
            else:
                request.auth_method = "session"
            if not user_has_role(request.user, role):
                return _denied(request, 403, missing_role_message(request.user, role), machine=machine)
            return view(request, *args, **kwargs)

        return wrapped

    return decorator
