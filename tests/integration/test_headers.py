"""Response headers of every route (dashboard/web/headers.py, SecurityMiddleware, django-csp): issue #12
observation 7. The routes are walked from the URL resolver, so a new route is covered by adding it."""
from __future__ import annotations

import re

import pytest
from django.urls import URLPattern, URLResolver, get_resolver, reverse

from dashboard.api import views as api_views
from dashboard.web import views as web_views
from tests.factories import offline_pipeline

pytestmark = pytest.mark.django_db

# A view that chose its own caching: the same public bytes for everyone, cached a day.
OWN_CACHING = {"plotly_js"}


def routes(resolver=None, prefix=""):
    for entry in (resolver or get_resolver()).url_patterns:
        if isinstance(entry, URLResolver):
            if getattr(entry, "namespace", None) == "admin":
                yield prefix + str(entry.pattern), "admin"
                continue
            yield from routes(entry, prefix + str(entry.pattern))
        elif isinstance(entry, URLPattern):
            yield prefix + str(entry.pattern), entry.name


def example(route: str, pipeline_id: int) -> str:
    route = route.replace("<int:pipeline_id>", str(pipeline_id))
    route = re.sub(r"<int:\w+>", "1", route)  # jobs, rewinds: unknown ids, a 404 answer is an answer too
    route = route.replace("^(?P<rest>.*)$", "no-such-endpoint")
    assert "<" not in route and "(" not in route, f"{route}: give its parameter an example value"
    return "/" + route


@pytest.fixture
def viewer_client(client, vera, unique_name, collectors_ticking):
    pipeline = offline_pipeline(unique_name, partitions={0: (0, 100)},
                                batches=[(1_700_000_000_000, {0: 40}), (1_700_000_010_000, {0: 60})])
    client.force_login(vera)
    return client, pipeline


def test_every_route_answers_with_no_store_nosniff_same_origin_referrer_and_a_csp(viewer_client):
    client, pipeline = viewer_client
    walked = []
    for route, name in routes():
        url = example(route, pipeline.pk)
        response = client.get(url)
        if response.streaming:  # read to its end, as a client does: a streamed export gives back its heavy slot
            b"".join(response.streaming_content)
        walked.append((name, response.status_code))
        assert response.status_code < 500, (url, response.status_code)
        assert response["X-Content-Type-Options"] == "nosniff", url
        assert response["Referrer-Policy"] == "same-origin", url
        assert _directives(response["Content-Security-Policy"])["script-src"] == "'self'", url
        if name in OWN_CACHING:
            assert response["Cache-Control"] == "max-age=86400, public", url
        else:
            assert "no-store" in response["Cache-Control"], (url, response.get("Cache-Control"))
    names = {name for name, _ in walked}
    # The walk reached the data pages, the API, /metrics and the exports with a 200.
    answered = {name for name, status in walked if status == 200}
    assert {"overview", "pipeline", "pipeline_lag_chart", "api_pipelines", "api_pipeline", "metrics",
            "pipeline_chart_csv", "pipeline_batches_csv", "audit_export_csv", "collectors"} <= answered, walked
    assert len(names) >= 30


def test_the_api_and_metrics_answer_no_store_to_a_token_and_to_nobody(client, prometheus):
    from dashboard.accounts.tokens import api_token_issue

    _, token = api_token_issue(user=prometheus, name="scraper")
    for url in (reverse("metrics"), reverse("api_pipelines")):
        response = client.get(url, HTTP_AUTHORIZATION=f"Bearer {token}")
        assert response.status_code == 200 and response["Cache-Control"] == "no-store", url
        assert response["Pragma"] == "no-cache"
        refused = client.get(url)
        assert refused.status_code == 401 and refused["Cache-Control"] == "no-store", url


def test_the_login_page_keeps_djangos_own_never_cache(client):
    response = client.get(reverse("login"))
    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"] and "private" in response["Cache-Control"]


def _directives(policy: str) -> dict[str, str]:
    """The policy's directives by name (django-csp does not keep their order from one process to the next)."""
    return dict(part.strip().split(" ", 1) for part in policy.split(";") if part.strip())


def test_the_policy_allows_scripts_only_from_the_site_itself(client):
    directives = _directives(client.get(reverse("login"))["Content-Security-Policy"])
    assert directives["script-src"] == "'self'"  # no 'unsafe-inline', no 'unsafe-eval', no nonce needed
    assert directives["default-src"] == "'self'"
    assert directives["object-src"] == "'none'" and directives["base-uri"] == "'none'"
    assert directives["frame-ancestors"] == "'none'"
    assert directives["style-src"] == "'self' 'unsafe-inline'"  # plotly.js styles what it draws


def test_the_database_unavailable_page_has_the_policy_and_no_store_too(client, vera, monkeypatch):
    from django.db import OperationalError


    def away(*args, **kwargs):
        raise OperationalError("connection refused")

    client.force_login(vera)
    monkeypatch.setattr(api_views, "pipelines_filtered", away)
    monkeypatch.setattr(web_views, "store_names", away)
    page = client.get("/")
    assert page.status_code == 503
    assert _directives(page["Content-Security-Policy"])["script-src"] == "'self'" and page["Cache-Control"] == "no-store"
