"""The rewind workflow through its services and the jobs' API: who may do what, hard errors,
expiry, exactly-one claims, verification from the store's batches, every step audited."""
from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connections
from django.test import Client
from django.utils import timezone

from dashboard.accounts.tokens import pipeline_token_issue, pipeline_token_revoke
from dashboard.audit.services import audit_verify
from dashboard.models import AuditEvent, RewindRequest
from dashboard.monitoring.services import store_reading_record, watermarks_record
from dashboard.rewinds.services import (
    RewindRefused,
    rewind_cancel,
    rewind_decide,
    rewind_request,
    rewind_write_to_store,
    rewinds_expire,
    rewinds_verify,
)
from streamoffsets.stores.reading import StoreReading
from streamoffsets.types import BatchOffsets, PipelineKey
from tests.factories import offline_pipeline

pytestmark = pytest.mark.django_db
T0 = 1_700_000_000_000


@pytest.fixture
def payments(unique_name):
    """Three batches (10 s apart) on 2 partitions; watermarks low 5, high 100 / 80."""
    return offline_pipeline(unique_name, partitions={0: (5, 100), 1: (0, 80)},
                            batches=[(T0, {0: 10, 1: 10}), (T0 + 10_000, {0: 30, 1: 20}), (T0 + 20_000, {0: 60, 1: 50})])


def rewind_events() -> list[str]:
    """The rewind actions in the audit log, in order (people's accounts are audited too)."""
    return list(AuditEvent.objects.filter(action__startswith="rewind.").order_by("id").values_list("action", flat=True))


def request(pipeline, user, **kw):
    args = {"kind": "batch", "spec": {"batch_time_ms": T0 + 10_000}, "reason": "bad deploy wrote garbage"} | kw
    return rewind_request(pipeline=pipeline, user=user, **args)


def record_batch(pipeline, ms, offsets):
    key = PipelineKey(pipeline.topic, pipeline.group)
    store_reading_record(store=pipeline.store, reading=StoreReading(
        pipelines=[key], batches={key: [BatchOffsets(pipeline.topic, pipeline.group, ms, offsets)]}))


def test_request_shows_the_preview_and_is_audited(payments, olga):
    r = request(payments, olga, ticket_url="https://tickets.example/INC-42")
    assert r.status == "requested" and r.target_offsets == {"0": 30, "1": 20} and r.before_offsets == {"0": 60, "1": 50}
    assert r.preview["reprocess"] == 60  # 30 + 30 messages read again
    assert [row["reprocess"] for row in r.preview["rows"]] == [30, 30]
    assert r.preview["replay_s"] == pytest.approx(60 / (90 / 20))  # at the job's rate: 90 records in 20 s
    event = AuditEvent.objects.get(action="rewind.requested")
    assert event.actor == "olga" and event.before == {"0": 60, "1": 50} and event.after == {"0": 30, "1": 20}
    assert event.details["reason"] == "bad deploy wrote garbage"


def test_who_may_request_and_what_is_refused(payments, vera, olga):
    with pytest.raises(RewindRefused, match="needs the operator role") as e:
        request(payments, vera)
    assert e.value.status == 403
    with pytest.raises(RewindRefused, match="a reason is required"):
        request(payments, olga, reason="  ")
    with pytest.raises(RewindRefused, match="partition 0: target 2 is below the low watermark 5: the 3 messages"):
        request(payments, olga, kind="offsets", spec={"offsets": {"0": 2}})
    with pytest.raises(RewindRefused, match="partition 1: target 81 is above the high watermark 80"):
        request(payments, olga, kind="shift", spec={"shift": 31})
    with pytest.raises(RewindRefused, match="no batch of this pipeline at or before"):
        request(payments, olga, kind="time", spec={"time_ms": T0 - 1})
    assert not RewindRequest.objects.exists() and not rewind_events()  # nothing half-done


def test_one_open_rewind_per_pipeline(payments, olga, otto):
    first = request(payments, olga)
    with pytest.raises(RewindRefused, match=f"already has an open rewind \\(#{first.pk}, requested\\)") as e:
        request(payments, otto, kind="earliest", spec={})
    assert e.value.status == 409
    rewind_cancel(rewind=first, user=olga)
    assert request(payments, otto, kind="earliest", spec={}).target_offsets == {"0": 5, "1": 0}


def test_approval_needs_another_person_with_the_role(payments, olga, vera, sam, amir):
    r = request(payments, olga)
    for user, message in ((olga, "needs the approver role"), (vera, "needs the approver role")):
        with pytest.raises(RewindRefused, match=message):
            rewind_decide(rewind=r, user=user, approve=True)
    own = RewindRequest.objects.get(pk=r.pk)
    rewind_cancel(rewind=own, user=olga)
    mine = request(payments, sam)
    with pytest.raises(RewindRefused, match="approved by someone other than its requester"):
        rewind_decide(rewind=mine, user=sam, approve=True)
    approved = rewind_decide(rewind=mine, user=amir, approve=True, comment="ok, INC-42")
    assert approved.status == "approved" and approved.decided_by == amir
    with pytest.raises(RewindRefused, match="is approved, not awaiting a decision"):
        rewind_decide(rewind=approved, user=amir, approve=False)


def test_a_target_that_became_invalid_cannot_be_approved(payments, olga, amir):
    r = request(payments, olga)
    # Retention moved the low watermark of partition 0 past the target since the request.
    from streamoffsets.kafka import WatermarkResult
    from streamoffsets.types import Watermarks

    watermarks_record(cluster=payments.store.cluster, sampled_at=timezone.now(), result=WatermarkResult(
        by_topic={payments.topic: {0: Watermarks(0, 40, 120), 1: Watermarks(1, 0, 90)}}))
    with pytest.raises(RewindRefused, match="no longer valid: partition 0: target 30 is below the low watermark 40"):
        rewind_decide(rewind=r, user=amir, approve=True)


def test_requests_and_approvals_expire(payments, olga, amir, settings):
    r = request(payments, olga)
    rewinds_expire(now=timezone.now() + timedelta(seconds=settings.REWIND_APPROVAL_TTL_S + 1))
    r.refresh_from_db()
    assert r.status == "expired" and r.outcome == "not approved in time"
    with pytest.raises(RewindRefused, match="is expired, not awaiting a decision"):
        rewind_decide(rewind=r, user=amir, approve=True)
    r2 = request(payments, olga)
    rewind_decide(rewind=r2, user=amir, approve=True)
    rewinds_expire(now=timezone.now() + timedelta(seconds=settings.REWIND_CLAIM_TTL_S + 1))
    r2.refresh_from_db()
    assert r2.status == "expired" and r2.outcome == "no job claimed it in time"
    assert rewind_events() == [
        "rewind.requested", "rewind.expired", "rewind.requested", "rewind.approved", "rewind.expired"]


# --- the jobs' API ---------------------------------------------------------------------------------


def job_client(pipeline):
    token = pipeline_token_issue(pipeline=pipeline, name="job")[1]
    return Client(HTTP_AUTHORIZATION=f"Bearer {token}")


def approved(payments, olga, amir):
    r = request(payments, olga)
    return rewind_decide(rewind=r, user=amir, approve=True)


def test_the_job_finds_claims_applies_and_the_collectors_verify(payments, olga, amir):
    r = approved(payments, olga, amir)
    job = job_client(payments)
    pending = job.get("/api/v1/rewinds/pending").json()["rewind"]
    assert pending["id"] == r.pk and pending["target_offsets"] == {"0": 30, "1": 20}
    claim = job.post(f"/api/v1/rewinds/{r.pk}/claim", {"instance": "host-a:123"}, content_type="application/json")
    assert claim.status_code == 200 and claim.json()["rewind"]["status"] == "claimed"
    held = job.get("/api/v1/rewinds/pending").json()["rewind"]  # claimed: still said, so no start skips it
    assert held["status"] == "claimed" and held["claimed_by"] == "host-a:123" and held["claimable"] is False
    # The job saved the target to its store as a batch, then reports where it started.
    marker = T0 + 60_000
    record_batch(payments, marker, {"0": 30, "1": 20})
    applied = job.post(f"/api/v1/rewinds/{r.pk}/applied", {"instance": "host-a:123", "offsets": {"0": 30, "1": 20},
                                                           "marker_batch_ms": marker}, content_type="application/json")
    assert applied.status_code == 200 and applied.json()["rewind"]["status"] == "applied"
    assert rewinds_verify(pipeline_ids=[payments.pk]) == 1
    r.refresh_from_db()
    assert r.status == "verified" and "starts at the target" in r.outcome
    assert rewind_events() == [
        "rewind.requested", "rewind.approved", "rewind.claimed", "rewind.applied", "rewind.verified"]
    assert audit_verify().ok


def test_a_marker_that_differs_from_the_target_fails_with_the_difference(payments, olga, amir):
    r = approved(payments, olga, amir)
    job = job_client(payments)
    job.post(f"/api/v1/rewinds/{r.pk}/claim", {"instance": "a"}, content_type="application/json")
    job.post(f"/api/v1/rewinds/{r.pk}/applied", {"instance": "a", "offsets": {"0": 30, "1": 20}, "marker_batch_ms": T0 + 60_000},
             content_type="application/json")
    record_batch(payments, T0 + 60_000, {"0": 30, "1": 50})  # partition 1 was not rewound
    assert rewinds_verify(store_id=payments.store_id + 10**6) == 0  # another store's poll: not its rewind
    assert rewinds_verify(store_id=payments.store_id) == 1  # its store's poll (the collectors' call)
    r.refresh_from_db()
    assert r.status == "failed" and "partition 1: 50 instead of 20" in r.outcome


def test_starting_elsewhere_than_the_target_fails_at_once(payments, olga, amir):
    r = approved(payments, olga, amir)
    job = job_client(payments)
    job.post(f"/api/v1/rewinds/{r.pk}/claim", {"instance": "a"}, content_type="application/json")
    body = job.post(f"/api/v1/rewinds/{r.pk}/applied", {"instance": "a", "offsets": {"0": 31, "1": 20}},
                    content_type="application/json").json()["rewind"]
    assert body["status"] == "failed" and "partition 0: 31 instead of 30" in body["outcome"]


def test_forged_revoked_and_foreign_tokens_are_refused(payments, olga, amir, unique_name):
    r = approved(payments, olga, amir)
    forged = Client(HTTP_AUTHORIZATION="Bearer owp_not-a-real-token")
    assert forged.get("/api/v1/rewinds/pending").status_code == 401
    token_row, plain = pipeline_token_issue(pipeline=payments, name="old")
    pipeline_token_revoke(token=token_row)
    revoked = Client(HTTP_AUTHORIZATION=f"Bearer {plain}")
    assert revoked.post(f"/api/v1/rewinds/{r.pk}/claim", {"instance": "x"}, content_type="application/json").status_code == 401
    other = offline_pipeline(unique_name, partitions={0: (0, 5)}, batches=[(T0, {0: 1})])
    response = job_client(other).post(f"/api/v1/rewinds/{r.pk}/claim", {"instance": "x"}, content_type="application/json")
    assert response.status_code == 404 and "no rewind" in response.json()["error"]
    assert Client().get("/api/v1/rewinds/pending").status_code == 401  # no token at all
    r.refresh_from_db()
    assert r.status == "approved"


def test_an_expired_approval_cannot_be_claimed(payments, olga, amir):
    r = approved(payments, olga, amir)
    RewindRequest.objects.filter(pk=r.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    response = job_client(payments).post(f"/api/v1/rewinds/{r.pk}/claim", {"instance": "a"}, content_type="application/json")
    assert response.status_code == 409 and "its approval expired" in response.json()["error"]


def test_the_jobs_api_refuses_bad_bodies_with_clear_errors(payments, olga, amir):
    r = approved(payments, olga, amir)
    job = job_client(payments)
    assert "instance" in job.post(f"/api/v1/rewinds/{r.pk}/claim", {}, content_type="application/json").json()["error"]
    assert job.post(f"/api/v1/rewinds/{r.pk}/claim", "not json", content_type="application/json").status_code == 400
    job.post(f"/api/v1/rewinds/{r.pk}/claim", {"instance": "a"}, content_type="application/json")
    bad = job.post(f"/api/v1/rewinds/{r.pk}/applied", {"instance": "a", "offsets": {"0": -1}}, content_type="application/json")
    assert bad.status_code == 400 and "offsets.0: must be a non-negative integer" in bad.json()["error"]
    wrong = job.post(f"/api/v1/rewinds/{r.pk}/applied", {"instance": "b", "offsets": {"0": 30, "1": 20}},
                     content_type="application/json")
    assert wrong.status_code == 409 and "not claimed by 'b'" in wrong.json()["error"]


@pytest.mark.django_db(transaction=True)
def test_many_simultaneous_claims_one_winner(unique_name, olga, amir):
    p = offline_pipeline(unique_name, partitions={0: (0, 100)}, batches=[(T0, {0: 10}), (T0 + 10_000, {0: 50})])
    r = rewind_decide(rewind=rewind_request(pipeline=p, user=olga, kind="earliest", spec={}, reason="replay"),
                      user=amir, approve=True)
    token = pipeline_token_issue(pipeline=p, name="job")[1]
    results, barrier = [], threading.Barrier(12)

    def claim(i: int) -> None:
        try:
            client = Client(HTTP_AUTHORIZATION=f"Bearer {token}")
            barrier.wait()
            results.append(client.post(f"/api/v1/rewinds/{r.pk}/claim", {"instance": f"job-{i}"},
                                       content_type="application/json").status_code)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [200] + [409] * 11
    r.refresh_from_db()
    assert r.status == "claimed" and r.claimed_by.startswith("job-")
    assert AuditEvent.objects.filter(action="rewind.claimed").count() == 1


def test_write_into_the_store_only_while_the_job_is_stopped(stack, unique_name, olga, amir):
    """Store mode against the real HBase stand-in: refused while batches come, then written,
    then verified from the row the collectors read."""
    import time

    from collectors.cycle import collect_once
    from tests.factories import hbase_store_setup, save

    s = hbase_store_setup(stack, unique_name, partitions=2, records=40)
    now = int(time.time() * 1000)
    for i, ms in enumerate((now - 4_000, now - 2_000, now)):
        save(s, "etl", ms, {0: 5 * (i + 1), 1: 5 * (i + 1)})
    collect_once()
    from dashboard.models import Pipeline

    pipeline = Pipeline.objects.get(store=s.store)
    r = rewind_request(pipeline=pipeline, user=olga, kind="earliest", spec={}, reason="replay all",
                       mode="store")
    r = rewind_decide(rewind=r, user=amir, approve=True)
    with pytest.raises(RewindRefused, match="not observed stopped .*its last batch was"):
        rewind_write_to_store(rewind=r, user=olga)
    # The job stops: its last batch is now older than the stop threshold.
    Pipeline.objects.filter(pk=pipeline.pk).update(last_batch_ms=now - 600_000)
    r = rewind_write_to_store(rewind=r, user=olga)
    assert r.status == "applied"
    assert s.hbase.load_latest(s.topic, "etl").offsets == {0: 0, 1: 0}  # the row the job will start from
    collect_once()
    r.refresh_from_db()
    assert r.status == "verified"
    assert audit_verify().ok


def test_request_and_approval_notify_with_before_and_after(payments, olga, amir, django_capture_on_commit_callbacks, settings):
    """Each transition writes one outbox row per channel routed to for rewinds, handed to a
    worker after commit; the summary carries the offsets and the people."""
    from dashboard.alerting.rewind_notify import rewind_message
    from dashboard.models import Channel, Notification, Route
    from dashboard.rewinds.services import rewind_summary

    settings.PUBLIC_URL = "https://offsetwatch.example.com"
    channel = Channel.objects.create(name="rewinds", kind="webhook", url="json://127.0.0.1:9/hook")
    Route.objects.create(name="rewinds only", channel=channel, statuses=[], rewinds=True)
    Route.objects.create(name="incidents only", channel=Channel.objects.create(
        name="pager", kind="webhook", url="json://127.0.0.1:9/pager"), rewinds=False)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        r = request(payments, olga)
        rewind_decide(rewind=r, user=amir, approve=True)
    assert len(callbacks) == 2  # requested, approved: each handed to a worker after its commit
    assert list(Notification.objects.filter(pipeline=payments).order_by("pk").values_list("event", "channel__name")) == [
        ("rewind.requested", "rewinds"), ("rewind.approved", "rewinds")]
    summary = rewind_summary(RewindRequest.objects.get(pk=r.pk))
    assert summary["before"] == {"0": 60, "1": 50} and summary["after"] == {"0": 30, "1": 20}
    assert summary["requested_by"] == "olga" and summary["approved_by"] == "amir"
    assert summary["url"] == f"https://offsetwatch.example.com/rewinds/{r.pk}/"
    text = str(rewind_message(event="approved", rewind_summary=summary))
    assert "amir" in text and "bad deploy wrote garbage" in text
    assert "p0: 60 → 30" in Notification.objects.get(event="rewind.approved").body


def test_a_point_in_time_from_the_broker_s_index(payments, olga, monkeypatch):
    """Tansu answers every timestamp lookup with 0, so the broker's answer enters at its seam here;
    tests/integration/test_restart_kafka.py checks the lookup itself on a full Kafka (KAFKA_BOOTSTRAP)."""
    from dashboard.rewinds import services as rewinds

    asked = []

    def broker(*, pipeline, time_ms):
        asked.append((pipeline.pk, time_ms))
        return {0: 42, 1: 17}

    monkeypatch.setattr(rewinds, "broker_offsets_for_time", broker)
    r = request(payments, olga, kind="time", spec={"time_ms": T0 + 5_000, "source": "broker"})
    assert asked == [(payments.pk, T0 + 5_000)]
    assert r.target_offsets == {"0": 42, "1": 17}
    assert r.target_text == "the first records at or after 2023-11-14 22:13:25.000 UTC (broker's timestamp index)"


def test_the_broker_timestamp_lookup_runs_against_the_real_broker(stack, unique_name):
    """The real call on Tansu: every partition answered, within the topic's offsets (Tansu's
    answer itself is its known bug: 0 whatever the time)."""
    from reference_job.producer import ensure_topic, produce
    from streamoffsets.kafka import KafkaWatermarkReader

    topic = unique_name("orders")
    ensure_topic(stack.kafka_bootstrap, topic, 2)
    produce(stack.kafka_bootstrap, topic, 2, 10)
    answer = KafkaWatermarkReader(stack.kafka_bootstrap).offsets_for_time(topic, T0)
    assert set(answer) == {0, 1} and all(0 <= o <= 5 for o in answer.values())


def test_a_claim_never_applied_fails_after_the_timeout(payments, olga, amir, settings):
    r = approved(payments, olga, amir)
    job_client(payments).post(f"/api/v1/rewinds/{r.pk}/claim", {"instance": "host-a:1"}, content_type="application/json")
    rewinds_expire(now=timezone.now() + timedelta(seconds=settings.REWIND_VERIFY_TIMEOUT_S + 1))
    r.refresh_from_db()
    assert r.status == "failed" and r.outcome.startswith("claimed by host-a:1 at ")
    assert "no `applied` report and no batch at the target (the job's marker) seen in the store within 1 h" in r.outcome


def test_a_store_without_history_keeps_the_sample_that_verifies_even_if_unchanged(unique_name, olga, amir):
    """Offsets files, ZooKeeper and Kafka groups are sampled: a sample equal to the previous one and
    not written since is dropped, except the first after an applied rewind's marker (the replay
    ended where it was)."""
    from dashboard.models import Store

    p = offline_pipeline(unique_name, partitions={0: (0, 100)}, batches=[(T0, {0: 10}), (T0 + 10_000, {0: 50})])
    Store.objects.filter(pk=p.store_id).update(kind="file", url="file:///nonexistent")
    r = rewind_decide(rewind=rewind_request(pipeline=p, user=olga, kind="batch",
                                            spec={"batch_time_ms": T0}, reason="replay"), user=amir, approve=True)
    job = job_client(p)
    job.post(f"/api/v1/rewinds/{r.pk}/claim", {"instance": "a"}, content_type="application/json")
    job.post(f"/api/v1/rewinds/{r.pk}/applied", {"instance": "a", "offsets": {"0": 10}, "marker_batch_ms": T0 + 20_000},
             content_type="application/json")
    key = PipelineKey(p.topic, p.group)
    # The replay ran between two polls and ended at 50 again: the same offsets as the last sample.
    store_reading_record(store=p.store, reading=StoreReading(
        pipelines=[key], keeps_history=False, batches={key: [BatchOffsets(p.topic, p.group, T0 + 30_000, {0: 50})]}))
    assert p.batches.filter(batch_time_ms=T0 + 30_000).exists()
    rewinds_verify(pipeline_ids=[p.pk])
    r.refresh_from_db()
    assert r.status == "verified"
    # Once verified, an unchanged sample is dropped again: read again with its time, or with
    # only the time it was read at (a store that keeps no write time; a newer write time with
    # the same offsets is a batch written again, issue #13).
    count = p.batches.count()
    store_reading_record(store=p.store, reading=StoreReading(
        pipelines=[key], keeps_history=False, batches={key: [BatchOffsets(p.topic, p.group, T0 + 30_000, {0: 50})]}))
    store_reading_record(store=p.store, reading=StoreReading(
        pipelines=[key], keeps_history=False,
        batches={key: [BatchOffsets(p.topic, p.group, T0 + 40_000, {0: 50}, time_observed=True)]}))
    assert not p.batches.filter(batch_time_ms=T0 + 40_000).exists() and p.batches.count() == count
