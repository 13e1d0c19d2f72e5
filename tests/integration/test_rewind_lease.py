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
from dashboard.accounts.tokens import pipeline_token_issue
from dashboard.audit.services import audit_verify
from dashboard.models import AuditEvent, RewindRequest
from dashboard.monitoring.services import store_reading_record
from dashboard.rewinds.services import rewind_decide, rewind_request
from streamoffsets.dashboard_client import DashboardClient, DashboardError
from streamoffsets.kafka import KafkaWatermarkReader
from streamoffsets.restart import StartRefused, restart
from streamoffsets.stores.offsetfile import OffsetFileStore
from streamoffsets.types import BatchOffsets
from tests.factories import approved_replay, offline_pipeline

T0 = 1_700_000_000_000
pytestmark = pytest.mark.django_db(transaction=True)  # the live server's threads must see the rows


@pytest.fixture
def replay(stack, unique_name, tmp_path):
    """A topic with 10 records per partition; the job's offset file holds {0: 10, 1: 10}; the
    dashboard knows two batches ({4, 4} then {10, 10}); a rewind to the first one requested by
    olga and approved by amir."""
    world = approved_replay(stack, unique_name, tmp_path)
    root, topic, group = world["root"], world["topic"], world["group"]

    def start(client, instance, policy="wait"):
        with OffsetFileStore(root) as s:
            return restart(s, topic, group, KafkaWatermarkReader(stack.kafka_bootstrap).topic_watermarks,
                           dashboard=client, instance=instance, rewind_policy=policy)

    return {**world, "start": start}


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
    # The actor is the token the job authenticated with; the instance it names itself is a detail.
    assert took.actor == f"pipeline token {replay['token'][:12]}… (job)" and took.details["instance"] == "host-d:4:dddd"
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


# --- the lease through the jobs' API (Django's test client; the same services and views) ------------


@pytest.fixture
def claimed(unique_name, olga, amir):
    """Payments: batches {10, 10} then {30, 20} then {60, 50}; a rewind to the second one, approved;
    the job's API client (the pipeline's token); `claim(instance)` posts a claim."""
    from django.test import Client

    p = offline_pipeline(unique_name, partitions={0: (5, 100), 1: (0, 80)},
                         batches=[(T0, {0: 10, 1: 10}), (T0 + 10_000, {0: 30, 1: 20}), (T0 + 20_000, {0: 60, 1: 50})])
    r = rewind_request(pipeline=p, user=olga, kind="batch", spec={"batch_time_ms": T0 + 10_000}, reason="bad deploy")
    r = rewind_decide(rewind=r, user=amir, approve=True)
    job = Client(HTTP_AUTHORIZATION=f"Bearer {pipeline_token_issue(pipeline=p, name='job')[1]}")

    def post(action, instance, **body):
        return job.post(f"/api/v1/rewinds/{r.pk}/{action}", {"instance": instance, **body},
                        content_type="application/json")

    return {"pipeline": p, "rewind": r, "job": job, "post": post, "olga": olga, "amir": amir}


def lease_runs_out(rewind_id: int, lease_s: float) -> None:
    RewindRequest.objects.filter(pk=rewind_id).update(claimed_at=timezone.now() - timedelta(seconds=lease_s + 1))


def test_a_claim_is_idempotent_for_its_instance_and_exclusive_within_its_lease(claimed, settings):
    r, post, job = claimed["rewind"], claimed["post"], claimed["job"]
    first = post("claim", "host-a:1")
    assert first.status_code == 200 and first.json()["rewind"]["claimed_by"] == "host-a:1"
    # 1. The same instance again (its first answer was lost): 200, the same claim, no new event.
    again = post("claim", "host-a:1")
    assert again.status_code == 200 and again.json()["rewind"]["claimed_at"] == first.json()["rewind"]["claimed_at"]
    assert events(r.pk).count("rewind.claimed") == 1
    # 2. Another instance within the lease: 409 naming the holder and the lease's end.
    other = post("claim", "host-b:2")
    assert other.status_code == 409
    assert "host-a:1 claimed it at" in other.json()["error"] and "its lease runs until" in other.json()["error"]
    # 3. Pending says who holds it and that a claim would not win now.
    held = job.get("/api/v1/rewinds/pending").json()["rewind"]
    assert (held["id"], held["status"], held["claimed_by"], held["claimable"]) == (r.pk, "claimed", "host-a:1", False)
    assert held["claim_lease_expires_at"] > held["claimed_at"]


def test_a_claim_is_taken_over_after_its_lease_audited_and_the_old_holder_is_refused(claimed, settings):
    r, post, job = claimed["rewind"], claimed["post"], claimed["job"]
    post("claim", "host-a:1")
    lease_runs_out(r.pk, settings.REWIND_CLAIM_LEASE_S)
    old_at = RewindRequest.objects.get(pk=r.pk).claimed_at
    assert job.get("/api/v1/rewinds/pending").json()["rewind"]["claimable"] is True
    took = post("claim", "host-b:2")
    assert took.status_code == 200 and took.json()["rewind"]["claimed_by"] == "host-b:2"
    event = AuditEvent.objects.get(action="rewind.claim_taken_over")
    assert event.actor.startswith("pipeline token owp_") and event.actor.endswith("… (job)")
    assert event.details["instance"] == "host-b:2" and event.details["previous_claimed_by"] == "host-a:1"
    assert event.details["previous_claimed_at"] == old_at.isoformat(timespec="seconds")
    # The old holder wakes up: its report and a new claim are refused (host-b:2's lease runs).
    late = post("applied", "host-a:1", offsets={"0": 30, "1": 20}, marker_batch_ms=T0 + 60_000)
    assert late.status_code == 409 and "not claimed by 'host-a:1'" in late.json()["error"]
    assert post("claim", "host-a:1").status_code == 409
    assert post("applied", "host-b:2", offsets={"0": 30, "1": 20}, marker_batch_ms=T0 + 60_000).status_code == 200
    assert events(r.pk) == ["rewind.requested", "rewind.approved", "rewind.claimed", "rewind.claim_taken_over",
                            "rewind.applied"]
    assert audit_verify().ok


def test_a_stuck_claim_is_cancelled_by_an_approver_once_its_lease_ran_out(claimed, settings):
    from dashboard.rewinds.services import RewindRefused, rewind_cancel

    r, post, job = claimed["rewind"], claimed["post"], claimed["job"]
    post("claim", "host-a:1")
    with pytest.raises(RewindRefused, match="its lease runs until") as within:
        rewind_cancel(rewind=r, user=claimed["amir"])
    assert within.value.status == 409
    lease_runs_out(r.pk, settings.REWIND_CLAIM_LEASE_S)
    with pytest.raises(RewindRefused, match="only be cancelled by an approver") as requester:
        rewind_cancel(rewind=r, user=claimed["olga"])  # the requester, an operator only
    assert requester.value.status == 403
    r = rewind_cancel(rewind=r, user=claimed["amir"])
    assert r.status == "cancelled" and "while claimed by host-a:1" in r.outcome
    event = AuditEvent.objects.get(action="rewind.cancelled")
    assert event.actor == "amir" and event.details["was"] == "claimed" and event.details["claimed_by"] == "host-a:1"
    assert job.get("/api/v1/rewinds/pending").json()["rewind"] is None
    assert post("applied", "host-a:1", offsets={"0": 30, "1": 20}).status_code == 409
    assert audit_verify().ok


def record(pipeline, ms, offsets):
    from streamoffsets.stores.reading import StoreReading
    from streamoffsets.types import PipelineKey

    key = PipelineKey(pipeline.topic, pipeline.group)
    store_reading_record(store=pipeline.store, reading=StoreReading(
        pipelines=[key], batches={key: [BatchOffsets(pipeline.topic, pipeline.group, ms, offsets)]}))


def test_only_the_exact_target_after_the_claim_counts_as_the_marker(claimed):
    from dashboard.rewinds.services import rewinds_verify

    p, r, post = claimed["pipeline"], claimed["rewind"], claimed["post"]
    post("claim", "host-a:1")
    now_ms = int(time.time() * 1000)
    # 1. The batch the target was taken from is older than the claim: not a marker.
    assert rewinds_verify(pipeline_ids=[p.pk]) == 0
    # 2. A batch after the claim that merely continues (the job started from its stored offsets).
    record(p, now_ms + 1_000, {0: 61, 1: 52})
    assert rewinds_verify(pipeline_ids=[p.pk]) == 0
    assert RewindRequest.objects.get(pk=r.pk).status == "claimed"
    # 3. Exactly the target after the claim: the marker; applied and verified, saying the report never came.
    record(p, now_ms + 2_000, {0: 30, 1: 20})
    assert rewinds_verify(pipeline_ids=[p.pk]) == 1
    r.refresh_from_db()
    assert r.status == "verified" and r.marker_batch_ms == now_ms + 2_000 and "`applied` report never arrived" in r.outcome
    # 4. The report arrives late after all: accepted (200) as what is recorded, nothing changes.
    late = post("applied", "host-a:1", offsets={"0": 30, "1": 20}, marker_batch_ms=now_ms + 2_000)
    assert late.status_code == 200 and late.json()["rewind"]["status"] == "verified"
    assert events(r.pk) == ["rewind.requested", "rewind.approved", "rewind.claimed", "rewind.applied",
                            "rewind.verified"]
    assert audit_verify().ok


def test_a_next_start_does_not_take_over_a_claim_whose_marker_is_in_the_store(claimed, settings):
    """The holder applied it and lost only its report; the collectors recorded the marker but have
    not settled it yet when the lease runs out: the next start is told nothing is pending."""
    p, r, post, job = claimed["pipeline"], claimed["rewind"], claimed["post"], claimed["job"]
    post("claim", "host-a:1")
    record(p, int(time.time() * 1000) + 1_000, {0: 30, 1: 20})
    lease_runs_out(r.pk, settings.REWIND_CLAIM_LEASE_S)
    assert job.get("/api/v1/rewinds/pending").json()["rewind"] is None
    assert RewindRequest.objects.get(pk=r.pk).status == "verified"
    refused = post("claim", "host-b:2")
    assert refused.status_code == 409 and "it is verified (applied by host-a:1)" in refused.json()["error"]
