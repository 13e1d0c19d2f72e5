"""Every answer under /api/ is JSON, errors included: `{"error": "..."}`.

The API's own views answer JSON (dashboard/api/views.py), but some errors are made before or around
them by Django or a middleware: an unknown path outside /api/v1/ (Django's HTML 404), a body
too large (Django's 400/413 page), a CSRF refusal, a throttle's 429, a handler500 page. This
middleware, outermost, turns any such non-JSON error under /api/ into JSON with the same status
and headers (Retry-After, Allow, WWW-Authenticate...), so a client parses every error alike.
"""
from __future__ import annotations

from django.http import JsonResponse

from dashboard.unavailable import is_api

_MESSAGES = {
    400: "bad request",
    403: "forbidden",
    404: "no such API endpoint; the endpoints are listed in /api/v1/openapi.json",
    405: "method not allowed",
    413: "the request body is too large",
    429: "too many requests; retry later",
    500: "internal server error (the server log has the details)",
}


def _message(response) -> str:
    """A plain-text error keeps its words; an HTML page is replaced by a short message."""
    if response.get("Content-Type", "").startswith("text/plain") and not response.streaming:
        text = response.content.decode("utf-8", "replace").strip()
        if text:
            return text if len(text) <= 500 else text[:500] + "…"
    return _MESSAGES.get(response.status_code, response.reason_phrase.lower() if response.reason_phrase else "error")


class ApiJsonErrorsMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if (response.status_code < 400 or not is_api(request)
                or response.get("Content-Type", "").startswith("application/json")):
            return response
        answer = JsonResponse({"error": _message(response)}, status=response.status_code)
        for header, value in response.items():
            if header.lower() not in ("content-type", "content-length"):
                answer[header] = value
        answer.cookies = response.cookies
        return answer
