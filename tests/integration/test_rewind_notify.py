"""Rewind notifications (dashboard.alerting.rewind_notify): the message in words, the channels
routed to for rewinds, after commit only, and a malformed summary never failing the rewind."""
from __future__ import annotations

import logging

import pytest

from dashboard.alerting.rewind_notify import rewind_message, rewind_notify
from dashboard.models import Channel, Notification, Route
from tests.factories import offline_pipeline

SUMMARY = {
    "id": 42, "pipeline": 7, "topic": "orders", "group": "billing", "store": "prod-hbase", "status": "requested",
    "requested_by": "olga", "approved_by": None, "reason": "replay after the parser fix",
    "ticket_url": "https://tickets.example.com/OPS-12", "target": {"kind": "time", "at": "2026-11-22T10:00:00+00:00"},
    "before": {"0": 120, "1": 300, "10": 5}, "after": {"0": 40, "1": 290, "10": 5},
    "url": "https://offsetwatch.example.com/rewinds/42",
}


def test_the_message_names_pipeline_rewind_people_reason_target_and_offsets():
    message = rewind_message(event="rewind.approved", rewind_summary={**SUMMARY, "approved_by": "amir"})
    assert message["event"] == "approved"
    assert message["title"] == "[Offset Watch] rewind 42 approved: orders / billing (prod-hbase)"
    text = message["text"]
    for line in ("Rewind 42 approved: orders / billing (prod-hbase)",
                 "pipeline: topic orders, group billing, store prod-hbase (pipeline 7)",
                 "requested by: olga", "approved by: amir", "reason: replay after the parser fix",
                 "ticket: https://tickets.example.com/OPS-12",
                 'target: {"at": "2026-11-22T10:00:00+00:00", "kind": "time"}',
                 "  p0: 120 → 40", "  p1: 300 → 290", "  p10: 5 → 5", "https://offsetwatch.example.com/rewinds/42"):
        assert line + "\n" in text, line
    assert text.index("p1:") < text.index("p10:")  # partitions in numeric order


@pytest.mark.django_db
def test_only_routes_taking_rewinds_and_matching_the_pipeline_get_them(unique_name, django_capture_on_commit_callbacks):
    pipeline = offline_pipeline(unique_name, partitions={0: (0, 10)}, batches=[(1_700_000_000_000, {0: 5})])
    ops = Channel.objects.create(name="ops", kind="webhook", url="json://127.0.0.1:9/ops")
    pager = Channel.objects.create(name="pager", kind="webhook", url="json://127.0.0.1:9/pager")
    Route.objects.create(name="rewinds of this topic", channel=ops, topic_pattern=pipeline.topic, statuses=[])
    Route.objects.create(name="pager, no rewinds", channel=pager, rewinds=False)
    Route.objects.create(name="other topics", channel=pager, topic_pattern="other-*")
    with django_capture_on_commit_callbacks() as callbacks:
        rows = rewind_notify(pipeline=pipeline, event="requested", rewind_summary=SUMMARY)
    assert [(n.channel.name, n.event) for n in rows] == [("ops", "rewind.requested")]
    assert len(callbacks) == 1  # handed to a worker after commit
    assert Notification.objects.get().body.startswith("Rewind 42 requested")


@pytest.mark.django_db
def test_a_malformed_summary_is_logged_and_never_fails_the_caller(unique_name, caplog):
    pipeline = offline_pipeline(unique_name, partitions={0: (0, 10)}, batches=[(1_700_000_000_000, {0: 5})])
    Route.objects.create(name="all", channel=Channel.objects.create(name="ops", kind="webhook",
                                                                    url="json://127.0.0.1:9/ops"))
    with caplog.at_level(logging.ERROR, logger="dashboard.alerting.rewind_notify"):
        odd = rewind_notify(pipeline=pipeline, event="requested", rewind_summary={"id": 5, "before": "x", "after": 3})
        none = rewind_notify(pipeline=pipeline, event="requested", rewind_summary=None)  # type: ignore[arg-type]
    assert len(odd) == 1 and none == []  # the odd but readable one is still sent
    assert "notification of rewind" in caplog.text and "could not be built" in caplog.text
