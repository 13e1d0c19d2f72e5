"""The 503 answered while the database is away (dashboard/unavailable.py), at the seam where the
connection error appears: the query. tests/integration/test_deployed.py stops a real PostgreSQL under gunicorn."""
from __future__ import annotations

import pytest
from django.db import InterfaceError, OperationalError
from django.test import Client

from dashboard.accounts import roles
from dashboard.api import views as api_views
from dashboard.web import views as web_views

pytestmark = pytest.mark.django_db

REFUSED = 'connection failed: connection to server at "127.0.0.1", port 5432 failed: Connection refused\n\tIs the server running?'


def away(*args, **kwargs):
    raise OperationalError(REFUSED)


@pytest.mark.parametrize("error", [OperationalError, InterfaceError])
def test_an_api_token_request_is_a_json_503_naming_the_cause(client, vera, monkeypatch, error):
    # The token lookup, where the role check calls it (dashboard.accounts.roles imports it).
    monkeypatch.setattr(roles, "api_token_user", lambda **kw: (_ for _ in ()).throw(error(REFUSED)))
    response = client.get("/api/v1/pipelines", HTTP_AUTHORIZATION="Bearer owu_anything")
    assert response.status_code == 503 and response["Content-Type"] == "application/json"
    assert response.json() == {"error": 'database unavailable: connection failed: connection to server at '
                                        '"127.0.0.1", port 5432 failed: Connection refused'}
    assert int(response["Retry-After"]) > 0 and response["Cache-Control"] == "no-store"


def test_a_session_request_to_the_api_and_a_page_are_503s(client, vera, monkeypatch):
    client.force_login(vera)
    monkeypatch.setattr(api_views, "pipelines_filtered", away)
    monkeypatch.setattr(web_views, "store_names", away)
    api = client.get("/api/v1/pipelines")
    assert api.status_code == 503 and api.json()["error"].startswith("database unavailable: connection failed")
    page = client.get("/")
    assert page.status_code == 503 and page["Content-Type"].startswith("text/html")
    assert b"the database is unavailable" in page.content and b"Connection refused" in page.content


def test_other_api_failures_stay_json_and_pages_keep_their_500(vera, monkeypatch):
    client = Client(raise_request_exception=False)
    client.force_login(vera)
    monkeypatch.setattr(api_views, "pipelines_filtered", lambda **kw: 1 / 0)
    monkeypatch.setattr(web_views, "store_names", lambda: 1 / 0)
    api = client.get("/api/v1/pipelines")
    assert api.status_code == 500 and api.json() == {"error": "internal server error (the server log has the details)"}
    assert client.get("/").status_code == 500
