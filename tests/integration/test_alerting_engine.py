"""Incident notifications decided by the collection cycle (dashboard.alerting.services), written
to the outbox and delivered to a real HTTP peer: opened, no flapping, resolved, reminders stopped
by an acknowledgement, silences, routes, archived pipelines. The stores are the real HBase
stand-in and Tansu (through collect_once, as the worker runs it); delivery is the outbox's, to
the JSON-webhook peer (tests/peers)."""
from __future__ import annotations

import logging
import subprocess
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from collectors.cycle import collect_once
from dashboard.alerting import outbox
from dashboard.audit.actor import Actor
from dashboard.models import AuditEvent, Channel, Incident, Notification, Pipeline, PipelineEvaluation, Route, Silence
from devstack.components import free_port
from reference_job.producer import produce
from streamoffsets.evaluation import Status
from streamoffsets.types import BatchOffsets
from tests.factories import hbase_store_setup, save

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def alerting(settings, peers):
    settings.RESOLVE_AFTER_SAMPLES = 3
    settings.RENOTIFY_AFTER_S = 3600.0
    settings.PUBLIC_URL = "https://offsetwatch.example.com"
    channel = Channel.objects.create(name="payments on-call", kind="webhook", url=peers.urls["webhook"])
    Route.objects.create(name="payments", channel=channel, owner_pattern="payments-*")
    return channel


def now_ms() -> int:
    return int(time.time() * 1000)


def stopped_pipeline(stack, unique_name, owner="payments-team"):
    """A job that stopped ten minutes ago with 6 messages waiting: ERR at the first cycle."""
    s = hbase_store_setup(stack, unique_name, partitions=1, records=10)
    save(s, "etl", now_ms() - 600_000, {0: 2})
    save(s, "etl", now_ms() - 599_000, {0: 4})
    collect_once()
    pipeline = Pipeline.objects.get(store=s.store)
    pipeline.owner = owner
    pipeline.save(update_fields=["owner"])
    return s, pipeline


def sent(pipeline) -> list[str]:
    return list(Notification.objects.filter(pipeline=pipeline).order_by("pk").values_list("event", flat=True))


def test_an_incident_is_sent_once_with_its_reason_lag_and_link_and_reaches_the_channel(stack, unique_name, alerting,
                                                                                      peers):
    s, pipeline = stopped_pipeline(stack, unique_name)
    # The owner was set after the first cycle: the incident opened then, nothing matched "payments-*".
    assert sent(pipeline) == []
    collect_once()
    [n] = Notification.objects.filter(pipeline=pipeline)
    assert n.event == "incident.opened" and n.channel == alerting and n.status == "pending"
    assert n.title == f"[Offset Watch] ERR: {s.topic} / etl ({s.store.name})"
    assert "stopped with 6 messages waiting" in n.body and "Lag: 6 messages" in n.body
    assert "Owner: payments-team" in n.body
    assert f"https://offsetwatch.example.com/pipelines/{pipeline.pk}/" in n.body
    incident = Incident.objects.get(pipeline=pipeline, partition=None, closed_at=None)
    assert (incident.notified_status, n.incident_id) == (Status.ERR, incident.pk)

    assert outbox.notifications_sweep() == 1
    n.refresh_from_db()
    assert (n.status, n.attempts) == ("sent", 1)
    [got] = peers.received("webhook")
    assert got.json["title"] == n.title and "stopped with 6 messages waiting" in got.json["message"]

    collect_once()  # still ERR: nothing new to say
    assert sent(pipeline) == ["incident.opened"]


def test_a_stalled_job_pages_its_owner_in_the_cycle_that_first_shows_stalled(stack, unique_name, alerting):
    """Batches keep coming every second with the same offsets while messages wait: STALLED once no
    offset moved for two batch intervals. The notification is decided in that very cycle."""
    s = hbase_store_setup(stack, unique_name, partitions=1, records=10)
    save(s, "etl", now_ms(), {0: 2})
    collect_once()
    pipeline = Pipeline.objects.get(store=s.store)
    Pipeline.objects.filter(pk=pipeline.pk).update(owner="payments-team")
    statuses = []
    for _ in range(8):
        time.sleep(1.1)
        save(s, "etl", now_ms(), {0: 2})  # a new batch, the same offsets
        collect_once()
        statuses.append(PipelineEvaluation.objects.get(pipeline=pipeline).status)
        if statuses[-1] == Status.STALLED:
            break
    assert statuses[-1] == Status.STALLED, statuses
    [n] = Notification.objects.filter(pipeline=pipeline)  # written by the cycle that first showed STALLED
    assert n.event == "incident.opened" and n.title.startswith("[Offset Watch] STALLED: ")
    assert "batches keep coming but no offset moved" in n.body and "Owner: payments-team" in n.body


def test_no_flapping_a_relapse_is_the_same_incident_and_resolved_comes_after_three_ok_cycles(stack, unique_name,
                                                                                             alerting):
    s, pipeline = stopped_pipeline(stack, unique_name)
    collect_once()
    incident = Incident.objects.get(pipeline=pipeline, partition=None, closed_at=None)
    save(s, "etl", now_ms(), {0: 10})  # back and caught up
    collect_once()
    incident.refresh_from_db()
    assert incident.closed_at is None and (incident.status, incident.ok_samples) == (Status.OK, 1)
    assert PipelineEvaluation.objects.get(pipeline=pipeline).status == Status.OK
    for _ in range(2):
        collect_once()
    incident.refresh_from_db()
    assert incident.closed_at is not None and incident.ok_samples == 3
    assert sent(pipeline) == ["incident.opened", "incident.resolved"]
    resolved = Notification.objects.get(pipeline=pipeline, event="incident.resolved")
    assert resolved.title.startswith("[Offset Watch] RESOLVED (was ERR): ")


def test_a_relapse_while_holding_ok_reopens_nothing(stack, unique_name, alerting):
    s, pipeline = stopped_pipeline(stack, unique_name)
    collect_once()
    incident = Incident.objects.get(pipeline=pipeline, partition=None, closed_at=None)
    save(s, "etl", now_ms(), {0: 10})
    collect_once()  # OK once
    save(s, "etl", now_ms(), {0: 3})  # offsets go back: REWOUND
    collect_once()
    incident.refresh_from_db()
    assert incident.closed_at is None and incident.ok_samples == 0 and incident.status == Status.REWOUND
    assert Incident.objects.filter(pipeline=pipeline, partition=None).count() == 1
    assert sent(pipeline) == ["incident.opened"]  # REWOUND is below the ERR already sent


def test_worsened_is_sent_when_the_status_goes_above_what_was_sent(stack, unique_name, alerting):
    s = hbase_store_setup(stack, unique_name, partitions=1, records=10)
    save(s, "etl", now_ms() - 600_000, {0: 8})
    save(s, "etl", now_ms() - 599_000, {0: 10})  # caught up, then nothing: STOPPED, nothing waiting
    collect_once()
    pipeline = Pipeline.objects.get(store=s.store)
    Pipeline.objects.filter(pk=pipeline.pk).update(owner="payments-team")
    collect_once()
    assert sent(pipeline) == ["incident.opened"]
    assert Notification.objects.get(event="incident.opened").title.startswith("[Offset Watch] STOPPED: ")
    produce(stack.kafka_bootstrap, s.topic, 1, 5)  # messages arrive while the job is stopped: ERR
    collect_once()
    assert sent(pipeline) == ["incident.opened", "incident.worsened"]
    worse = Notification.objects.get(event="incident.worsened")
    assert worse.title.startswith("[Offset Watch] worse: ERR: ") and "worse than the STOPPED sent before" in worse.body
    assert "stopped with 5 messages waiting" in worse.body


def test_reminders_until_acknowledged(settings, stack, unique_name, alerting, amir):
    _, pipeline = stopped_pipeline(stack, unique_name)
    collect_once()
    incident = Incident.objects.get(pipeline=pipeline, partition=None, closed_at=None)
    Incident.objects.filter(pk=incident.pk).update(notified_at=timezone.now() - timedelta(hours=2))
    collect_once()
    assert sent(pipeline) == ["incident.opened", "incident.reminder"]
    assert Notification.objects.get(pipeline=pipeline, event="incident.reminder").title.startswith(
        "[Offset Watch] still ERR: ")
    Incident.objects.filter(pk=incident.pk).update(notified_at=timezone.now() - timedelta(hours=2),
                                                   acknowledged_at=timezone.now(), acknowledged_by=amir)
    collect_once()
    assert sent(pipeline) == ["incident.opened", "incident.reminder"]


def test_a_silenced_pipeline_sends_nothing_until_the_silence_ends(stack, unique_name, alerting):
    _, pipeline = stopped_pipeline(stack, unique_name)
    silence = Silence.objects.create(pipeline=pipeline, starts_at=timezone.now() - timedelta(minutes=1),
                                     ends_at=timezone.now() + timedelta(hours=1), reason="maintenance")
    collect_once()
    assert sent(pipeline) == []
    assert Incident.objects.filter(pipeline=pipeline, partition=None, closed_at=None).exists()  # still shown
    Silence.objects.filter(pk=silence.pk).update(ends_at=timezone.now())
    collect_once()
    assert sent(pipeline) == ["incident.opened"]


def test_a_pattern_silence_covers_every_matching_pipeline(stack, unique_name, alerting):
    _, pipeline = stopped_pipeline(stack, unique_name)
    Silence.objects.create(owner_pattern="payments-*", starts_at=timezone.now() - timedelta(minutes=1),
                           ends_at=timezone.now() + timedelta(hours=1), reason="broker upgrade")
    collect_once()
    assert sent(pipeline) == []


def test_routes_choose_channels_by_names_and_statuses(stack, unique_name, alerting, peers):
    _, pipeline = stopped_pipeline(stack, unique_name, owner="search-team")
    err_only = Channel.objects.create(name="errors", kind="webhook", url=peers.urls["webhook"] + "/errors")
    Route.objects.create(name="stalls only", channel=err_only, topic_pattern=pipeline.topic, statuses=["STALLED"])
    Route.objects.create(name="rewinds only", channel=err_only, topic_pattern=pipeline.topic, statuses=[])
    collect_once()
    assert sent(pipeline) == []  # owner search-team: not payments-*; the topic's routes do not take ERR
    Route.objects.create(name="all of this topic", channel=err_only, topic_pattern=pipeline.topic)
    Route.objects.create(name="twice", channel=err_only, group_pattern="et?")
    collect_once()
    assert list(Notification.objects.filter(pipeline=pipeline).values_list("event", "channel__name")) == [
        ("incident.opened", "errors")]  # one channel once, however many routes match


def test_a_retired_job_is_archived_ok_without_incident_and_a_new_batch_brings_it_back(settings, stack, unique_name,
                                                                                   alerting):
    s, pipeline = stopped_pipeline(stack, unique_name)
    collect_once()
    assert sent(pipeline) == ["incident.opened"]
    settings.ARCHIVE_AFTER_S = 300.0  # the last batch is ten minutes old
    Pipeline.objects.filter(pk=pipeline.pk).update(retired=True)
    collect_once()
    pipeline.refresh_from_db()
    evaluated = PipelineEvaluation.objects.get(pipeline=pipeline)
    assert pipeline.archived_at is not None and evaluated.status == Status.OK
    assert evaluated.reasons == ["archived: no batch for 10 min and its job is retired"]
    assert not Incident.objects.filter(pipeline=pipeline, closed_at=None).exists()
    assert sent(pipeline) == ["incident.opened"]  # closed silently: nothing was resolved
    assert AuditEvent.objects.filter(action="pipeline.archived", pipeline_id=pipeline.pk, actor="system").exists()
    collect_once()
    assert not Incident.objects.filter(pipeline=pipeline, closed_at=None).exists()

    save(s, "etl", now_ms(), {0: 10})  # the job runs again
    collect_once()
    pipeline.refresh_from_db()
    assert pipeline.archived_at is None
    assert AuditEvent.objects.filter(action="pipeline.unarchived", pipeline_id=pipeline.pk).exists()


def test_a_pipeline_whose_topic_is_gone_is_archived_after_the_age(settings, stack, unique_name, alerting):
    s = hbase_store_setup(stack, unique_name, partitions=1)
    gone = unique_name("deleted-topic")
    s.hbase.save_batch(BatchOffsets(gone, "old-job", now_ms() - 600_000, {0: 5}))  # a topic Tansu does not have
    collect_once()
    pipeline = Pipeline.objects.get(store=s.store, topic=gone)
    assert pipeline.archived_at is None  # 10 min is below the default 7 days
    settings.ARCHIVE_AFTER_S = 300.0
    collect_once()
    pipeline.refresh_from_db()
    assert pipeline.archived_at is not None
    assert not Incident.objects.filter(pipeline=pipeline, closed_at=None).exists()


@pytest.fixture
def own_broker(tmp_path):
    """A Redis server of this test's own as the Celery broker of this process, to be killed (the
    suite's Redis keeps serving the locks and caches)."""
    import redis
    from celery import current_app

    port = free_port()
    server = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                               "--appendonly", "no", "--dir", str(tmp_path)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = redis.Redis(port=port)
    for _ in range(100):
        try:
            client.ping()
            break
        except redis.ConnectionError:
            time.sleep(0.05)
    saved = current_app.conf.broker_url, current_app._pool, current_app.amqp._producer_pool
    # The app's producer pools are made for the broker URL on first use: fresh ones for this broker.
    current_app.conf.broker_url, current_app._pool, current_app.amqp._producer_pool = (
        f"redis://127.0.0.1:{port}/0", None, None)
    try:
        yield server, client
    finally:
        server.kill()
        server.wait()
        ours = current_app.amqp._producer_pool
        current_app.conf.broker_url, current_app._pool, current_app.amqp._producer_pool = saved
        if ours is not None:
            ours.force_close_all()  # this broker's pool only: the suite's stays open


def test_a_cycle_goes_on_when_the_broker_is_down_and_the_sweep_sends_what_it_decided(stack, unique_name, alerting,
                                                                                    peers, own_broker, caplog):
    server, broker = own_broker
    outbox.channel_test(channel=alerting, actor=Actor.SYSTEM)  # with the broker up: handed off after commit
    assert sum(broker.llen(k) for k in broker.keys() if broker.type(k) == b"list") == 1
    server.kill()  # the broker goes away
    server.wait()
    _, pipeline = stopped_pipeline(stack, unique_name)
    with caplog.at_level(logging.WARNING, logger="dashboard.alerting.outbox"):
        collect_once()  # decides the notification; the hand-off to the broker fails
    assert "not queued now (is Redis running?), the sweep will send it" in caplog.text
    [n] = Notification.objects.filter(pipeline=pipeline)
    assert n.status == "pending"  # the cycle finished and recorded it; the row waits for the sweep
    assert PipelineEvaluation.objects.get(pipeline=pipeline).status == Status.ERR
    assert outbox.notifications_sweep() == 2  # the test message and the incident, both still due
    n.refresh_from_db()
    assert n.status == "sent" and len(peers.received("webhook")) == 2
