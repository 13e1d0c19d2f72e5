"""Every parameter and job payload validated in one place (dashboard/params.py, dashboard/api/payloads.py),
the parsers and payload checks alone: times from year 1 to 9999 with any offset are accepted
(clamped, never an overflow), bad values are refused naming the parameter or the field's path,
and every /api/ error is JSON whoever made it. Through the routes: tests/integration/test_validation_routes.py."""
from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from urllib.parse import urlencode
from zoneinfo import ZoneInfo

import pytest
from django.http import QueryDict

from dashboard import params
from dashboard.api import payloads

UTC = timezone.utc

# --- params.instant: pure ------------------------------------------------------------------------


@pytest.mark.parametrize("raw,expected", [
    ("2026-11-22T13:00", datetime(2026, 11, 22, 13, 0, tzinfo=UTC)),  # no offset: naive_tz (UTC here)
    ("2026-11-22T13:00+01:00", datetime(2026, 11, 22, 12, 0, tzinfo=UTC)),
    ("2026-11-22T13:00 01:00", datetime(2026, 11, 22, 12, 0, tzinfo=UTC)),  # an unencoded '+' arrives as ' '
    ("2026-11-22 13:00Z", datetime(2026, 11, 22, 13, 0, tzinfo=UTC)),
    ("  2026-11-22  ", datetime(2026, 11, 22, tzinfo=UTC)),
    # Beyond Python's range once in UTC, or within a day of its ends: clamped, not refused.
    ("0001-01-01T00:00+14:00", params.EARLIEST),
    ("0001-01-01T00:00", params.EARLIEST),
    ("0001-01-01T00:00-14:00", params.EARLIEST),  # 0001-01-01T14:00Z is still before EARLIEST
    ("9999-12-31T23:59-14:00", params.LATEST),
    ("9999-12-31T23:59:59.999999", params.LATEST),
    ("0001-01-03T00:00+14:00", datetime(1, 1, 2, 10, 0, tzinfo=UTC)),  # inside the range: as is
])
def test_any_iso_time_from_year_1_to_9999_is_accepted(raw, expected):
    at = params.instant("from", raw, naive_tz=UTC)
    assert at == expected and at.utcoffset() == timedelta(0)
    # What the pages and exports do with it next must not overflow either.
    assert params.shifted(at, -timedelta(days=30)) <= at <= params.shifted(at, timedelta(days=30))
    assert at.astimezone(ZoneInfo("Pacific/Kiritimati")).year in (1, 9999, 2026)
    assert at.astimezone(ZoneInfo("Pacific/Pago_Pago")).year in (1, 9999, 2026)
    int(at.timestamp() * 1000)


@pytest.mark.parametrize("raw", [
    "yesterday", "", "   ", "2026-13-01", "2026-11-22T25:00", "10000-01-01", "0000-01-01", "2026-11-22T13:00+99:99",
    "٢٠٢٦-11-22", "2026-11-22T13:00\x00", "2026-11-22" + "0" * 100, "+002026-01-01", "2026-11-22T13:00+24:00",
])
def test_anything_else_is_refused_naming_the_parameter_and_the_format(raw):
    with pytest.raises(params.BadParam) as err:
        params.instant("to", raw)
    assert err.value.name == "to"
    assert str(err.value).startswith("parameter 'to': ") and "is not a date-time: ISO 8601 from year 1 to 9999" in str(err.value)


def test_a_naive_time_is_wall_clock_time_in_the_dashboards_time_zone(settings):
    settings.TIME_ZONE = "Europe/Paris"
    assert params.instant("from", "2026-07-01T12:00") == datetime(2026, 7, 1, 10, 0, tzinfo=UTC)  # CEST
    assert params.instant("from", "2026-07-01T12:00", naive_tz=UTC) == datetime(2026, 7, 1, 12, 0, tzinfo=UTC)


def test_shifted_saturates_instead_of_overflowing():
    assert params.shifted(params.EARLIEST, -timedelta(days=400)) == params.EARLIEST
    assert params.shifted(params.LATEST, timedelta(days=400)) == params.LATEST
    assert params.shifted(datetime.min.replace(tzinfo=UTC), -timedelta(days=1)) == params.EARLIEST
    assert params.shifted(datetime(2026, 1, 1, tzinfo=UTC), timedelta(hours=1)) == datetime(2026, 1, 1, 1, tzinfo=UTC)


# --- params.whole_number: pure ------------------------------------------------------------------


@pytest.mark.parametrize("raw,lo,hi,expected", [("7", 0, 10, 7), (" 10 ", 0, 10, 10), ("-3", -5, 5, -3), ("0", 0, 0, 0)])
def test_whole_numbers(raw, lo, hi, expected):
    assert params.whole_number("limit", raw, lo, hi) == expected


@pytest.mark.parametrize("raw", ["11", "-1", "٣", "+1", "1_0", "1e3", "1.0", "0x1", "", "9" * 30, "NaN", "1\x00"])
def test_whole_numbers_refused(raw):
    with pytest.raises(params.BadParam) as err:
        params.whole_number("limit", raw, 0, 10)
    assert str(err.value).endswith("is not a whole number from 0 to 10") and err.value.name == "limit"


def test_a_parameter_given_twice_is_refused():
    with pytest.raises(params.BadParam, match="parameter 'from': 'b' is given 2 times; give it once"):
        params.parse_range(QueryDict("from=2026-01-01&from=b"), now=datetime(2026, 2, 1, tzinfo=UTC))


def test_a_range_from_year_1_parses_and_keeps_its_labels_and_links():
    r = params.parse_range(QueryDict("from=0001-01-01T00:00%2B14:00&to=9999-12-31T23:59-14:00"),
                           now=datetime(2026, 2, 1, tzinfo=UTC))
    assert (r.since, r.until) == (params.EARLIEST, params.LATEST)
    assert r.label.startswith("0001-01-02 00:00 to 9999-12-30 23:59") and r.slug
    again = params.parse_range(QueryDict(urlencode(r.query())), now=datetime(2026, 2, 1, tzinfo=UTC))
    assert (again.since, again.until) == (r.since, datetime(9999, 12, 30, 23, 59, tzinfo=UTC))  # links keep minutes


# --- payloads: pure ---------------------------------------------------------------------------------

REPORT = {"topic": "orders", "group": "etl", "offsets": {"0": 4, "1": 9}, "first_start": False,
          "clamps": [{"partition": 0, "stored": 1, "low": 4, "high": 10, "started_at": 4, "kind": "low",
                      "messages_lost": 3}],
          "decisions": ["partition 0: clamped"], "stored": {"0": 1, "1": 9}, "rewind": None}


def test_a_start_report_as_jobs_send_it_passes():
    checked = payloads.start_report(json.loads(json.dumps(REPORT)))
    assert checked["offsets"] == {"0": 4, "1": 9} and checked["messages_lost"] == 3


@pytest.mark.parametrize("change,path", [
    ({"offsets": {"3": 10**30}}, "offsets.3"),
    ({"offsets": {"3": 1e20}}, "offsets.3"),
    ({"offsets": {"3": 5.0}}, "offsets.3"),
    ({"offsets": {"3": True}}, "offsets.3"),
    ({"offsets": {"3": "5"}}, "offsets.3"),
    ({"offsets": {"3": -1}}, "offsets.3"),
    ({"offsets": {"٣": 5}}, "offsets.٣"),
    ({"offsets": {"+1": 5}}, "offsets.+1"),
    ({"offsets": {" 1": 5}}, "offsets. 1"),
    ({"offsets": {"": 5}}, "offsets."),
    ({"offsets": {"99999999999": 5}}, "offsets.99999999999"),
    ({"offsets": {"1": 5, "01": 6}}, "offsets.01"),
    ({"offsets": [1, 2]}, "offsets"),
    ({"clamps": [{"messages_lost": 1e20}]}, "clamps.0.messages_lost"),
    ({"clamps": [{"messages_lost": -3}]}, "clamps.0.messages_lost"),
    ({"clamps": [{"messages_lost": 2**63}]}, "clamps.0.messages_lost"),
    ({"clamps": [{"messages_lost": 2**62}, {"messages_lost": 2**62}]}, "clamps"),  # the sum overflows a bigint
    ({"clamps": "x"}, "clamps"),
    ({"clamps": [1]}, "clamps.0"),
    ({"first_start": "yes"}, "first_start"),
    ({"topic": 5}, "topic"),
    ({"group": "g" * 100_001}, "group"),
    ({"decisions": ["a\x00b"]}, "decisions.0"),  # PostgreSQL's jsonb refuses \u0000
    ({"decisions": [float("nan")]}, "decisions.0"),  # and NaN
    ({"x": [[[[[[[[[[1]]]]]]]]]]}, "x.0.0.0.0.0.0.0.0"),
    ({"rewind": {"id": 1, "marker_batch_ms": -1, "target": {"0": 1}}}, "rewind.marker_batch_ms"),
    ({"rewind": {"id": 1, "marker_batch_ms": 1, "target": {"0": 10**19}}}, "rewind.target.0"),
])
def test_a_hostile_start_report_is_refused_naming_the_field(change, path):
    with pytest.raises(payloads.PayloadError) as err:
        payloads.start_report({**REPORT, **change})
    assert err.value.path == path and str(err.value).startswith(f"{path}: ")


def test_rewind_bodies():
    assert payloads.rewind_claim({"instance": " host:1 "}) == {"instance": "host:1"}
    assert payloads.rewind_applied({"instance": "a", "offsets": {"007": 3}, "marker_batch_ms": 5}) == {
        "instance": "a", "offsets": {"7": 3}, "marker_batch_ms": 5}
    assert payloads.rewind_failed({"instance": "a"}) == {"instance": "a", "error": ""}
    for body, path in [({}, "instance"), ({"instance": 3}, "instance"), ({"instance": "x" * 301}, "instance"),
                       ({"instance": "a", "offsets": {}}, "offsets"),
                       ({"instance": "a", "offsets": {"0": 1}, "marker_batch_ms": True}, "marker_batch_ms"),
                       ({"instance": "a", "offsets": {"0": 1}, "marker_batch_ms": 10**16}, "marker_batch_ms")]:
        with pytest.raises(payloads.PayloadError) as err:
            (payloads.rewind_applied if "offsets" in body else payloads.rewind_claim)(body)
        assert err.value.path == path, body
    with pytest.raises(payloads.PayloadError, match="^error: is 20001 characters long"):
        payloads.rewind_failed({"instance": "a", "error": "e" * 20_001})


@pytest.mark.parametrize("status,body,content_type,message", [
    (429, b"<html>slow down</html>", "text/html", "too many requests; retry later"),
    (403, b"<h1>CSRF verification failed</h1>", "text/html", "forbidden"),
    (413, b"", "text/html", "the request body is too large"),
    (500, b"<h1>Server Error (500)</h1>", "text/html", "internal server error (the server log has the details)"),
    (400, b"parameter 'x': 'y' is bad\n", "text/plain; charset=utf-8", "parameter 'x': 'y' is bad"),
])
def test_whoever_made_an_api_error_it_is_json_with_its_headers(status, body, content_type, message):
    from django.http import HttpResponse
    from django.test import RequestFactory

    from dashboard.api.errors import ApiJsonErrorsMiddleware

    def made_elsewhere(request):
        response = HttpResponse(body, status=status, content_type=content_type)
        response["Retry-After"] = "7"
        return response

    answer = ApiJsonErrorsMiddleware(made_elsewhere)(RequestFactory().get("/api/v1/pipelines"))
    assert answer.status_code == status and answer["Content-Type"] == "application/json"
    assert json.loads(answer.content) == {"error": message} and answer["Retry-After"] == "7"
    page = ApiJsonErrorsMiddleware(made_elsewhere)(RequestFactory().get("/pipelines/1/"))
    assert page.content == body  # pages keep their own error pages


def test_the_json_errors_middleware_is_outermost(settings):
    """Outermost, it sees the errors every other middleware makes (a throttle's 429, CSRF's 403)."""
    assert settings.MIDDLEWARE[0] == "dashboard.api.errors.ApiJsonErrorsMiddleware"
