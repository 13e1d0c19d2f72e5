"""A job's start with an approved rewind (streamoffsets.restart), the pure decisions, table-driven:
each numbered case says why. The I/O around them (the dashboard over HTTP, the stores, Spark)
is in tests/integration/test_rewind_job.py."""
from __future__ import annotations

import json

import pytest

from streamoffsets.restart import (
    PendingRewind,
    StartRefused,
    claim_refused,
    claim_unconfirmed,
    dashboard_trouble,
    held_elsewhere,
    lost_claim,
    parse_rewind,
    rewind_start_plan,
)
from streamoffsets.types import BatchOffsets, Watermarks

MARKER = 1_700_000_000_000


def wm(*triples):
    return {p: Watermarks(p, low, high) for p, low, high in triples}


def rewind(target, before=None, rewind_id=7):
    return PendingRewind(rewind_id, "t", "g", target, before or {})


PLANS = [
    # (stored, target, watermarks) -> (offsets, new partitions, words in the decisions)
    # 1. The usual rewind: back on every partition; the words say before -> after and how much is re-read.
    ({0: 40, 1: 35}, {0: 10, 1: 5}, wm((0, 0, 40), (1, 0, 35)), {0: 10, 1: 5}, [],
     ["rewind #7 applied", "partition 0: 40 → 10 (30 messages read again)", "partition 1: 35 → 5 (30 messages read again)"]),
    # 2. A forward target (skip ahead) is said as skipped, not re-read.
    ({0: 10}, {0: 25}, wm((0, 0, 40)), {0: 25}, [], ["partition 0: 10 → 25 (15 messages skipped)"]),
    # 3. A target equal to the watermarks is in range (earliest / latest).
    ({0: 40, 1: 35}, {0: 0, 1: 35}, wm((0, 0, 40), (1, 0, 35)), {0: 0, 1: 35}, [], ["partition 1: 35 → 35 (unchanged)"]),
    # 4. Nothing stored yet (the store was emptied): the start is still exactly the target.
    (None, {0: 3}, wm((0, 0, 40)), {0: 3}, [], ["partition 0: (none) → 3"]),
    # 5. The topic grew since the approval: the new partition starts from earliest, as after any restart.
    ({0: 40}, {0: 10}, wm((0, 0, 40), (1, 4, 9)), {0: 10, 1: 4}, [1], ["partition 1 is new (not in the rewind's target)"]),
]


@pytest.mark.parametrize("stored, target, marks, offsets, new, words", PLANS, ids=[f"plan{i + 1}" for i in range(len(PLANS))])
def test_rewind_start_plan(stored, target, marks, offsets, new, words):
    batch = None if stored is None else BatchOffsets("t", "g", 1, stored)
    plan = rewind_start_plan("t", "g", rewind(target), batch, marks, MARKER)
    assert plan.offsets == offsets
    assert plan.new_partitions == new
    assert plan.rewind.id == 7 and plan.rewind.target == target and plan.rewind.marker_batch_ms == MARKER
    assert plan.rewind.before == stored
    text = " | ".join(plan.decisions)
    for fragment in words:
        assert fragment in text
    report = json.loads(json.dumps(plan.report()))
    assert report["rewind"]["target"] == {str(p): o for p, o in target.items()}
    assert report["rewind"]["marker_batch_ms"] == MARKER
    assert json.loads(plan.spark_starting_offsets()) == {"t": {str(p): o for p, o in offsets.items()}}


REFUSED = [
    # 1. Retention deleted the target's records since the approval: never clamped, refused.
    ({0: 10, 1: 5}, wm((0, 20, 40), (1, 0, 35)), ["rewind #7 cannot be applied", "partition 0: target 10 is below the low watermark 20"]),
    # 2. Above the high watermark (the topic was re-created smaller).
    ({0: 10}, wm((0, 0, 5)), ["partition 0: target 10 is above the high watermark 5"]),
    # 3. A partition the topic no longer has; every bad partition is named, not only the first.
    ({0: 50, 3: 1}, wm((0, 0, 40)), ["partition 0: target 50 is above", "partition 3: target 1 but the topic has no such partition"]),
]


@pytest.mark.parametrize("target, marks, fragments", REFUSED, ids=[f"refused{i + 1}" for i in range(len(REFUSED))])
def test_a_target_out_of_range_now_refuses_the_start(target, marks, fragments):
    with pytest.raises(StartRefused) as err:
        rewind_start_plan("t", "g", rewind(target), BatchOffsets("t", "g", 1, {0: 40}), marks, MARKER)
    for fragment in fragments:
        assert fragment in str(err.value)


PARSE = [
    # (dashboard JSON, topic, group) -> error fragment (None: parsed)
    # 1. The API's shape: partition keys are strings, offsets integers.
    ({"id": 4, "topic": "t", "group": "g", "target_offsets": {"0": 3, "1": 9}, "before_offsets": {"0": 5}}, None),
    # 2. Another pipeline's rewind (the job holds a wrong token): never applied.
    ({"id": 4, "topic": "other", "group": "g", "target_offsets": {"0": 3}}, "not this job's 't'/'g'"),
    # 3. No target.
    ({"id": 4, "topic": "t", "group": "g", "target_offsets": {}}, "no valid target offsets"),
    # 4. A negative or non-integer offset.
    ({"id": 4, "topic": "t", "group": "g", "target_offsets": {"0": -1}}, "no valid target offsets"),
    ({"id": 4, "topic": "t", "group": "g", "target_offsets": {"0": "3"}}, "no valid target offsets"),
    # 5. Not the API's shape at all.
    ({"id": 4, "topic": "t", "group": "g", "target_offsets": {"zero": 1}}, "not readable"),
    ({"topic": "t", "group": "g"}, "not readable"),
]


@pytest.mark.parametrize("data, error", PARSE, ids=[f"parse{i + 1}" for i in range(len(PARSE))])
def test_parse_rewind(data, error):
    if error is None:
        parsed = parse_rewind(data, "t", "g")
        assert parsed == PendingRewind(4, "t", "g", {0: 3, 1: 9}, {0: 5})
    else:
        with pytest.raises(ValueError, match=error):
            parse_rewind(data, "t", "g")


def test_an_unreachable_dashboard_proceeds_or_waits_by_policy():
    # 1. proceed: a sentence naming the URL and the error; the start goes on from the stored offsets.
    note = dashboard_trouble("t", "g", "http://dash:8000", "connection refused", "proceed")
    assert "http://dash:8000" in note and "connection refused" in note and "starting from the stored offsets" in note
    # 2. wait: refused, saying the dashboard could not be asked.
    with pytest.raises(StartRefused, match="the dashboard at http://dash:8000 could not be asked .*connection refused"):
        dashboard_trouble("t", "g", "http://dash:8000", "connection refused", "wait")
    # 3. an unknown policy is a programming error, not a silent default.
    with pytest.raises(ValueError, match="unknown rewind policy"):
        dashboard_trouble("t", "g", "http://dash:8000", "x", "maybe")


def test_a_lost_claim_starts_from_the_stored_offsets_and_says_who_won():
    note = lost_claim(rewind({0: 1}), "HTTP 409: rewind #7 cannot be claimed: host-b:9:ab claimed it")
    assert note.startswith("rewind #7 was not claimed by this instance") and "host-b:9:ab" in note


def held(**kw):
    return PendingRewind(7, "t", "g", {0: 1}, {}, "claimed", "host-a:1:aaaa", "2026-01-01T00:01:00+00:00", **kw)


def test_a_rewind_claimed_elsewhere_within_its_lease_is_never_started_past_with_wait():
    # 1. wait: refused, naming the rewind, the holder and the lease's end.
    with pytest.raises(StartRefused, match=r"rewind #7 is claimed by host-a:1:aaaa .*lease runs until 2026-01-01T00:01:00"):
        held_elsewhere("t", "g", held(claimable=False), "wait")
    # 2. proceed: the stored offsets, saying who holds it and what happens to it.
    note = held_elsewhere("t", "g", held(claimable=False), "proceed")
    assert "host-a:1:aaaa" in note and "starting from the stored offsets" in note and "after its lease" in note


def test_a_claim_refused_or_unanswered_follows_the_policy():
    # 1. 409 (another instance won): proceed starts as before; wait refuses, naming the rewind.
    assert claim_refused("t", "g", rewind({0: 1}), "HTTP 409: host-b claimed it", "proceed").startswith(
        "rewind #7 was not claimed by this instance")
    with pytest.raises(StartRefused, match=r"rewind #7 was not claimed by this instance \(HTTP 409: host-b"):
        claim_refused("t", "g", rewind({0: 1}), "HTTP 409: host-b claimed it", "wait")
    # 2. No answer: the claim may be recorded; wait refuses saying so, proceed starts from the stored offsets.
    with pytest.raises(StartRefused, match=r"the claim of rewind #7 at http://dash got no answer \(timed out\): it may "
                                           r"have been recorded"):
        claim_unconfirmed("t", "g", "http://dash", rewind({0: 1}), "timed out", "wait")
    note = claim_unconfirmed("t", "g", "http://dash", rewind({0: 1}), "timed out", "proceed")
    assert "it may have been recorded" in note and "starting from the stored offsets" in note


CLAIMED_JSON = [
    # 1. A claim within its lease, as the pending endpoint says it.
    ({"status": "claimed", "claimed_by": "h:1", "claim_lease_expires_at": "x", "claimable": False}, ("claimed", "h:1", False)),
    # 2. A claim whose lease ran out: claimable (the next start takes it over).
    ({"status": "claimed", "claimed_by": "h:1", "claimable": True}, ("claimed", "h:1", True)),
    # 3. A dashboard from before leases says only the approved rewind: claimable as before.
    ({}, ("approved", None, True)),
]


@pytest.mark.parametrize("extra, expected", CLAIMED_JSON, ids=[f"claimed{i + 1}" for i in range(len(CLAIMED_JSON))])
def test_parse_a_claimed_rewind(extra, expected):
    data = {"id": 4, "topic": "t", "group": "g", "target_offsets": {"0": 3}, **extra}
    parsed = parse_rewind(data, "t", "g")
    assert (parsed.status, parsed.claimed_by, parsed.claimable) == expected


def test_a_rewind_in_another_state_is_not_read_as_pending():
    with pytest.raises(ValueError, match="neither approved nor claimed"):
        parse_rewind({"id": 4, "topic": "t", "group": "g", "target_offsets": {"0": 3}, "status": "applied"}, "t", "g")
