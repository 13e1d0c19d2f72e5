"""What a request answers while PostgreSQL is away: 503, never a server error.

Every API path (/api/...) answers JSON `{"error": "database unavailable: ..."}` with status 503
and a Retry-After header, as every other API error is JSON; the job library reads it as the
dashboard being unavailable (streamoffsets.dashboard_client). Pages answer a short 503 page.

Two layers catch it: the middleware's process_exception for errors raised by a view (and its
decorators: authentication reads the session, the user and tokens from the database), and
`server_error` (the project's handler500) for the rest, e.g. raised inside a middleware, where
it also keeps any other API failure JSON.
"""
from __future__ import annotations

import html
import logging
import sys

from django.conf import settings
from django.db import InterfaceError, OperationalError
from django.http import HttpResponse, JsonResponse
from django.views import defaults

log = logging.getLogger(__name__)

DATABASE_ERRORS = (OperationalError, InterfaceError)


def is_api(request) -> bool:
    return request.path_info.startswith("/api/")


def _reason(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    reason = lines[0] if lines else type(exc).__name__
    return reason if len(reason) <= 300 else reason[:300] + "…"


def database_unavailable(request, exc: BaseException) -> HttpResponse:
    """The 503 for a request that found the database away: JSON under /api/, a page elsewhere."""
    message = f"database unavailable: {_reason(exc)}"
    if is_api(request):
        response = JsonResponse({"error": message}, status=503)
    else:
        response = HttpResponse(
            "<!doctype html><html><head><meta charset=\"utf-8\"><title>503 database unavailable · Offset Watch"
            "</title></head><body><h1>503: the database is unavailable</h1>"
            f"<p>Offset Watch cannot reach PostgreSQL right now ({html.escape(_reason(exc))}). "
            "The page works again as soon as it is back; try again in a few seconds.</p></body></html>",
            status=503, content_type="text/html; charset=utf-8")
    response["Retry-After"] = str(settings.DATABASE_RETRY_AFTER_S)
    response["Cache-Control"] = "no-store"
    return response


class DatabaseUnavailableMiddleware:
    """Turns a database connection error raised by a view into the 503 of database_unavailable."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exception):
        if not isinstance(exception, DATABASE_ERRORS):
            return None
        log.warning("%s %s: database unavailable: %s", request.method, request.path, _reason(exception))
        return database_unavailable(request, exception)


def server_error(request):
    """handler500: a database error is the 503 above; any other API failure stays JSON."""
    exc = sys.exc_info()[1]
    if isinstance(exc, DATABASE_ERRORS):
        return database_unavailable(request, exc)
    if is_api(request):
        return JsonResponse({"error": "internal server error (the server log has the details)"}, status=500)
    return defaults.server_error(request)
