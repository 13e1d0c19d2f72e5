"""Claims as leases, against the real dashboard over HTTP (pytest-django's live server), the real
PostgreSQL, the session's broker and an offset file (issue #11, observations 2 and 3).

2. A claim whose answer is lost but which commits later: PostgreSQL is made to hold the claim's
   UPDATE (the rewind's row locked by another connection) until the job's client has timed
   out; then the lock goes and the claim commits. A start with `rewind_policy="wait"` must not
   start past it; a start after the lease takes the claim over and applies the rewind.
3. A rewind applied by the job whose `applied` report is lost: the collectors see its marker
   batch and verify it anyway, saying the report never arrived.
"""
from __future__ import annotations

import time
from datetime import timedelta

import psycopg
import pytest
from django.db import connection
from django.utils import timezone

from collectors.cycle import collect_once
from dashboard import services
from dashboard.audit import audit_verify
from dashboard.models import AuditEvent, RewindRequest
from dashboard.rewinds import rewind_decide, rewind_request
from dashboard.roles import APPROVER, OPERATOR
from pipeline.producer import ensure_topic, produce
from streamoffsets.dashboard_client import DashboardClient, DashboardError
from streamoffsets.kafka import KafkaWatermarkReader
from streamoffsets.offsetfile import OffsetFileStore
from streamoffsets.restart import StartRefused, restart
from streamoffsets.types import BatchOffsets
from tests.factories import offline_pipeline, person

T0 = 1_700_000_000_000
pytestmark = pytest.mark.django_db(transaction=True)  # the live server's threads must see the rows


@pytest.fixture
def replay(stack, unique_name, tmp_path):
    """A topic with 10 records per partition; the job's offset file holds {0: 10, 1: 10}; the
    dashboard knows two batches ({4, 4} then {10, 10}); a rewind to the first one requested by
    olga and approved by amir."""
    topic, group = unique_name("orders"), "etl"
    ensure_topic(stack.kafka_bootstrap, topic, 2)
    produce(stack.kafka_bootstrap, topic, 2, 20)
    root = tmp_path / "offsets"
    OffsetFileStore(root).save_batch(BatchOffsets(topic, group, T0 + 10_000, {0: 10, 1: 10}))
    cluster = services.cluster_get_or_create(name=unique_name("cluster"), bootstrap_servers=stack.kafka_bootstrap)
    store = services.store_get_or_create(name=unique_name("file"), kind="file", url=f"file://{root}", cluster=cluster)
    pipeline = offline_pipeline(unique_name, partitions={0: (0, 10), 1: (0, 10)}, group=group, topic=topic, store=store,
                                batches=[(T0, {0: 4, 1: 4}), (T0 + 10_000, {0: 10, 1: 10})])
    rewind = rewind_request(pipeline=pipeline, user=person("olga", OPERATOR), kind="batch",
                            spec={"batch_time_ms": T0}, reason="replay")
    rewind = rewind_decide(rewind=rewind, user=person("amir", APPROVER), approve=True)
    token = services.pipeline_token_issue(pipeline=pipeline, name="job")[1]

    def start(client, instance, policy="wait"):
        with OffsetFileStore(root) as s:
            return restart(s, topic, group, KafkaWatermarkReader(stack.kafka_bootstrap).topic_watermarks,
                           dashboard=client, instance=instance, rewind_policy=policy)

    return {"rewind": rewind, "token": token, "root": root, "topic": topic, "group": group, "start": start}


def stored(replay) -> dict[int, int]:
    return OffsetFileStore(replay["root"]).load_latest(replay["topic"], replay["group"]).offsets


def events(rewind_id: int) -> list[str]:
    return list(AuditEvent.objects.filter(subject__startswith=f"rewind #{rewind_id} ").order_by("id")
                .values_list("action", flat=True))


class RowLock:
    """The rewind's row locked FOR UPDATE by a connection of its own (as a PostgreSQL that froze
    just before the claim's UPDATE): the claim blocks until `release()`, then commits."""

    def __init__(self, rewind_id: int):
        s = connection.settings_dict  # the test database, as the live server's threads see it
        self.conn = psycopg.connect(host=s["HOST"] or "127.0.0.1", port=s["PORT"] or 5432, user=s["USER"],
                                    password=s["PASSWORD"], dbname=s["NAME"])
        self.conn.execute("SELECT id FROM dashboard_rewindrequest WHERE id = %s FOR UPDATE", [rewind_id])

    def release(self) -> None:
        self.conn.rollback()
        self.conn.close()


def wait_for(predicate, timeout_s: float = 10.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("timed out waiting")


def test_a_claim_whose_answer_is_lost_is_never_skipped_and_is_taken_over_after_the_lease(replay, live_server, settings):
    rewind = replay["rewind"]
    impatient = DashboardClient(live_server.url, replay["token"], timeout_s=1)
    lock = RowLock(rewind.pk)
    try:
        with pytest.raises(StartRefused) as first:
            replay["start"](impatient, "host-a:1:aaaa")
    finally:
        lock.release()
    assert f"rewind #{rewind.pk}" in str(first.value)
    # The claim that timed out on the job's side commits once PostgreSQL goes on.
    claimed = wait_for(lambda: RewindRequest.objects.filter(pk=rewind.pk, status="claimed").first())
    assert claimed.claimed_by == "host-a:1:aaaa"

    # The next start, within the claim's lease: 'wait' does not start past it.
    client = DashboardClient(live_server.url, replay["token"])
    with pytest.raises(StartRefused) as second:
        replay["start"](client, "host-b:2:bbbb")
    assert f"rewind #{rewind.pk}" in str(second.value) and "host-a:1:aaaa" in str(second.value)
    assert stored(replay) == {0: 10, 1: 10}  # nothing moved
    # 'proceed' starts from the stored offsets and says why, loudly.
    plan = replay["start"](client, "host-c:3:cccc", policy="proceed")
    assert plan.offsets == {0: 10, 1: 10} and plan.rewind is None
    assert f"rewind #{rewind.pk}" in plan.decisions[0] and "host-a:1:aaaa" in plan.decisions[0]

    # The lease ran out: the next start takes the claim over and applies the rewind.
    RewindRequest.objects.filter(pk=rewind.pk).update(
        claimed_at=timezone.now() - timedelta(seconds=settings.REWIND_CLAIM_LEASE_S + 1))
    plan = replay["start"](client, "host-d:4:dddd")
    assert plan.offsets == {0: 4, 1: 4} and plan.rewind.id == rewind.pk
    assert stored(replay) == {0: 4, 1: 4}
    rewind.refresh_from_db()
    assert rewind.status == "applied" and rewind.claimed_by == "host-d:4:dddd"
    took = AuditEvent.objects.get(action="rewind.claim_taken_over")
    assert took.details["previous_claimed_by"] == "host-a:1:aaaa" and took.details["previous_claimed_at"]
    assert took.actor == "job host-d:4:dddd"
    collect_once()
    rewind.refresh_from_db()
    assert rewind.status == "verified", rewind.outcome
    assert events(rewind.pk) == ["rewind.requested", "rewind.approved", "rewind.claimed", "rewind.claim_taken_over",
                                 "rewind.applied", "rewind.verified"]
    assert audit_verify().ok


class AppliedReportLost(DashboardClient):
    """The real client, except that the `applied` report never reaches the dashboard."""

    def rewind_applied(self, rewind_id, instance, offsets, marker_batch_ms):
        raise DashboardError(f"POST {self.base_url}/api/v1/rewinds/{rewind_id}/applied: unreachable: timed out")


def test_a_rewind_whose_applied_report_is_lost_is_verified_from_its_marker(replay, live_server):
    rewind = replay["rewind"]
    plan = replay["start"](AppliedReportLost(live_server.url, replay["token"]), "host-a:1:aaaa")
    assert plan.offsets == {0: 4, 1: 4}  # the target is in the store: the job starts from it
    assert any("was not told" in d for d in plan.decisions)
    rewind.refresh_from_db()
    assert rewind.status == "claimed"
    collect_once()  # the collectors read the offset file: the marker batch, exactly the target
    rewind.refresh_from_db()
    assert rewind.status == "verified", rewind.outcome
    assert "`applied` report never arrived" in rewind.outcome
    assert rewind.marker_batch_ms == plan.rewind.marker_batch_ms and rewind.applied_offsets == {"0": 4, "1": 4}
    assert events(rewind.pk) == ["rewind.requested", "rewind.approved", "rewind.claimed", "rewind.applied",
                                 "rewind.verified"]
    applied = AuditEvent.objects.get(action="rewind.applied")
    assert applied.actor == "system" and "never arrived" in applied.details["note"]
    assert audit_verify().ok
