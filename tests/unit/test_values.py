"""The small value types of #14: Offsets (streamoffsets.types), Actor (dashboard.audit.actor) and
the shared parsers of dashboard.params (one error, BadParam, for forms, pages and the API)."""
from __future__ import annotations

import pytest

from dashboard import params
from dashboard.audit.actor import Actor
from streamoffsets.types import Offsets, OffsetsError


def test_offsets_convert_between_json_and_int_keys_in_partition_order():
    offsets = Offsets.from_json({"10": 5, "2": 7, "007": 1})
    assert list(offsets.items()) == [(2, 7), (7, 1), (10, 5)]
    assert offsets == {2: 7, 7: 1, 10: 5} and offsets.get(3) is None
    assert offsets.to_json() == {"2": 7, "7": 1, "10": 5}
    assert Offsets({1: 0}).to_json() == {"1": 0} and Offsets.from_json(None) == {}


@pytest.mark.parametrize("data, message", [
    ({"x": 1}, "partition 'x' is not a partition id"),
    ({"٣": 1}, "is not a partition id (ASCII digits)"),
    ({1: 1}, "partition 1 is not a partition id"),
    ({"0": -1}, "partition 0: offset -1 is not an integer from 0 to 9223372036854775807"),
    ({"0": 2**63}, "partition 0: offset 9223372036854775808 is not an integer"),
    ({"0": True}, "offset True is not an integer"),
    ({"0": "3"}, "offset '3' is not an integer"),
    ({"1": 1, "01": 2}, "partition 1 is given twice"),
    ([1, 2], "is not a map of partition id to offset"),
])
def test_offsets_refuse_what_is_not_partition_to_int64(data, message):
    with pytest.raises(OffsetsError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Offsets.from_json(data)


def test_offsets_check_int_keys_too():
    with pytest.raises(OffsetsError, match="partition '0' is not a partition id"):
        Offsets({"0": 1})


def test_actor_is_one_frozen_value():
    actor = Actor("alice", 3, "192.0.2.1")
    assert actor == Actor("alice", 3, "192.0.2.1") and Actor.SYSTEM == Actor("system", None, "")
    with pytest.raises(AttributeError):
        actor.who = "mallory"
    assert Actor.of_command("x").who.startswith("manage.py x (system user ")


@pytest.mark.parametrize("parse, args, message", [
    (params.choice, ("kind", "bars", ("total", "partitions")), "parameter 'kind': 'bars' is not one of total, partitions"),
    (params.text, ("q", "a\x00b", 10), "parameter 'q': 'a\\x00b' must be at most 10 characters without NUL"),
    (params.text, ("q", "x" * 11, 10), "must be at most 10 characters without NUL"),
    (params.statuses, ("status", "ok,nope"), "parameter 'status': 'ok,nope' is not a status; use one or more"),
    (params.statuses, ("status", ","), "is not a status"),
    (params.epoch_ms, ("from", "9" * 16), "is beyond the last representable instant (253402300799999 ms)"),
    (params.epoch_ms, ("from", "soon"), "'soon' is not an ISO-8601 time from year 1 to 9999"),
    (params.whole_number, ("n", "٣", 0, 9), "parameter 'n': '٣' is not a whole number from 0 to 9"),
])
def test_every_parser_raises_one_error_naming_the_parameter(parse, args, message):
    with pytest.raises(params.BadParam) as err:
        parse(*args)
    assert message in str(err.value) and err.value.name == args[0]


def test_parsers_return_plain_values():
    assert params.statuses("status", "ok, Stalled") == [0, 2]
    assert params.epoch_ms("to", "1000") == 1000
    assert params.epoch_ms("to", "1970-01-01T00:00:01") == 1000  # no offset: UTC
    assert params.text("q", "abc", 3) == "abc" and params.choice("k", "a", ("a", "b")) == "a"


def test_time_texts_are_the_ones_the_pages_files_and_api_always_wrote():
    from datetime import datetime, timezone
    from zoneinfo import ZoneInfo

    from offsetwatch.lib import timefmt

    at = datetime(2026, 11, 22, 13, 45, 1, 123456, tzinfo=timezone.utc)
    paris = ZoneInfo("Europe/Paris")
    ms = 1_795_355_101_123
    assert timefmt.iso(at) == "2026-11-22T13:45:01.123456+00:00" and timefmt.iso(None) is None
    assert timefmt.utc_seconds(at.astimezone(paris)) == "2026-11-22T13:45:01+00:00" and timefmt.utc_seconds(None) == "?"
    assert timefmt.local_minutes(at, paris) == "2026-11-22 14:45"
    assert timefmt.local_minutes(at, paris, "T") == "2026-11-22T14:45"
    assert timefmt.ms_iso(ms) == "2026-11-22T13:45:01.123+00:00" and timefmt.ms_iso(None) is None
    assert timefmt.ms_iso(10**17) is None  # beyond year 9999
    assert timefmt.ms_datetime(ms) == datetime(2026, 11, 22, 13, 45, 1, 123000, tzinfo=timezone.utc)
    assert timefmt.ms_text(ms) == "2026-11-22T13:45:01.123+00:00"
    assert timefmt.ms_text(ms, "seconds") == "2026-11-22T13:45:01+00:00"
    assert timefmt.ms_text(10**17) == f"{10**17} ms" and timefmt.ms_text("x") == "'x'"
    assert timefmt.ms_local(ms, paris) == "2026-11-22T14:45:01.123+01:00"
    assert timefmt.ms_clock(ms) == "2026-11-22 13:45:01.123" and timefmt.ms_clock(None) == "—"
