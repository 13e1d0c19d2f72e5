"""Cache-Control for data: nothing the dashboard answers is kept by a browser or a proxy.

Pages, partials, the API, /metrics, chart data and exports show offsets, names and the audit log
to a logged-in user: `no-store` keeps them out of shared caches and off the disk of the browser
(the back button of a shared computer, a proxy that caches by URL). An answer whose view chose
its caching (plotly.min.js, the same bytes for everyone) keeps it, and static files never reach
this middleware (WhiteNoise answers them before it, or the development static handler).
"""
from __future__ import annotations


class NoStoreMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if "Cache-Control" not in response:
            response["Cache-Control"] = "no-store"
            response["Pragma"] = "no-cache"  # HTTP/1.0 caches know only this
        return response
