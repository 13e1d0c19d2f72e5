"""The deployed topology: gunicorn, one Celery worker, one beat, a private PostgreSQL and Redis, each
its own process as docker-compose runs them (devstack/deployment.py), against the session's local stack.

What crosses a process boundary is tested here: a background export asked for on a page is
written by the worker and downloaded through web; an approved rewind's notification, sent from
the web process, reaches a webhook through the worker; beat's polls come at the configured
interval; the API answers JSON 503 while PostgreSQL is away and recovers when it is back.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from datetime import datetime

import pytest

from devstack.deployment import ROOT, Deployment, wait_for
from reference_job.producer import ensure_topic, produce
from streamoffsets.dashboard_client import DashboardClient, DashboardError
from streamoffsets.stores.hbase import HBaseOffsetStore
from streamoffsets.types import BatchOffsets

pytestmark = pytest.mark.deployed

POLL_INTERVAL_S = 2.0
PASSWORD = "correct horse battery staple"


@pytest.fixture(scope="module")
def deployed(stack, peer_network, tmp_path_factory):
    deployment = Deployment(tmp_path_factory.mktemp("deployed"), stack=stack, poll_interval_s=POLL_INTERVAL_S,
                            # The worker reaches the notification services' peers (tests/peers) by environment.
                            env={**peer_network.env, "OFFSETWATCH_PUBLIC_URL": "http://offsetwatch.example"})
    t0 = time.monotonic()
    deployment.start()
    deployment.startup_s = time.monotonic() - t0
    try:
        yield deployment
    finally:
        deployment.stop()


@pytest.fixture(scope="module")
def world(deployed, stack, peer_network):
    """Named people and one pipeline the deployed collectors discovered: a topic on Tansu, an HBase
    store with three batches of it, registered through `manage.py shell` like an operator would."""
    deployed.create_user("alice", "viewer", password=PASSWORD)
    deployed.create_user("olivia", "viewer", "operator", password=PASSWORD)
    deployed.create_user("april", "viewer", "approver", password=PASSWORD)
    suffix = f"{os.getpid()}_{int(time.time())}"
    topic, table = f"deployed-orders-{suffix}", f"deployed_offsets_{suffix}"
    ensure_topic(stack.kafka_bootstrap, topic, 2)
    produce(stack.kafka_bootstrap, topic, 2, 20)
    url = f"hbase://{stack.hbase_host}:{stack.hbase_port}/{table}"
    hbase = HBaseOffsetStore.from_url(url)
    hbase.ensure_table()
    for i, offsets in enumerate(({0: 1, 1: 1}, {0: 3, 1: 4}, {0: 6, 1: 5})):
        hbase.save_batch(BatchOffsets(topic, "etl", 1_700_000_000_000 + i * 60_000, offsets))
    ids = deployed.shell_json(
        "from dashboard.monitoring.services import cluster_get_or_create, store_get_or_create\n"
        f"c = cluster_get_or_create(name='deployed', bootstrap_servers={stack.kafka_bootstrap!r})\n"
        f"s = store_get_or_create(name='deployed-hbase', kind='hbase', url={url!r}, cluster=c)\n"
        "result = {'cluster': c.pk, 'store': s.pk}")
    # The collectors find the pipeline and sample its lag on their own (beat -> worker).
    pipeline = wait_for(lambda: deployed.shell_json(
        "from dashboard.models import LagSample, Pipeline\n"
        f"p = Pipeline.objects.filter(store_id={ids['store']}, topic={topic!r}, group='etl').first()\n"
        "result = p and LagSample.objects.filter(pipeline=p).exists() and p.batches.count() == 3 and p.pk"),
        timeout_s=60, interval_s=0.5)
    assert pipeline, f"the deployed collectors never recorded the pipeline\n{deployed.logs()}"
    # The payments team's channels, as an admin sets them up: its incidents to Slack (through the
    # HTTPS peer standing in for hooks.slack.com), its rewinds to a JSON webhook.
    deployed.shell_json(
        "from dashboard.models import Channel, Pipeline, Route\n"
        f"slack = Channel.objects.create(name='payments on-call', kind='slack', url={peer_network.urls['slack']!r})\n"
        f"hook = Channel.objects.create(name='payments rewinds', kind='webhook', url={peer_network.urls['webhook']!r})\n"
        "Route.objects.create(name='payments incidents', channel=slack, owner_pattern='payments-*', rewinds=False)\n"
        "Route.objects.create(name='payments rewinds', channel=hook, owner_pattern='payments-*', statuses=[])\n"
        f"Pipeline.objects.filter(pk={pipeline}).update(owner='payments-team')\n"
        "result = slack.pk")
    return {**ids, "pipeline": pipeline, "topic": topic}


def test_the_harness_starts_quickly(deployed):
    assert deployed.startup_s < 30, f"the deployment took {deployed.startup_s:.1f} s to start"


def test_a_background_export_asked_for_on_the_page_is_written_by_the_worker_and_downloaded(deployed, world):
    """Issue #11, observation 9: the web process queued the task on Celery's default app
    (amqp://localhost), so the job stayed "queued" (or failed to queue) and no worker ever saw it."""
    alice = deployed.session("alice", PASSWORD)
    status, headers, _ = alice.post(f"/pipelines/{world['pipeline']}/exports/",
                                    {"export": "batches_csv", "range": "all"})
    assert status == 302 and headers["Location"].endswith("/exports/"), status

    def finished():
        html = alice.get("/exports/live/")[2].decode()
        return re.search(r'href="/exports/(\d+)/download"', html) or ("failed" in html and html)

    found = wait_for(finished, timeout_s=30, interval_s=0.3)
    page = alice.get("/exports/live/")[2].decode()
    assert isinstance(found, re.Match), f"the export never finished; the page says:\n{page}\n{deployed.logs()}"
    status, headers, body = alice.get(f"/exports/{found.group(1)}/download")
    assert status == 200 and "attachment" in headers["Content-Disposition"]
    rows = body.decode().splitlines()
    assert len([r for r in rows if r and not r.startswith("#")]) == 1 + 3, rows  # a header and three batches
    assert "received" in deployed.logs(["worker"], lines=400) and "export_run" in deployed.logs(["worker"], lines=400)


def test_a_stopped_job_pages_its_owners_channel_through_beat_and_the_worker(deployed, world, peer_network):
    """Issue #15: the pipeline's last batch is old and messages wait (ERR); once its owner is set,
    the collectors (beat -> worker) decide the notification and the worker delivers it to Slack."""
    def paged():
        return [json.dumps(r.json) for r in peer_network.received("slack")
                if r.status == 200 and "ERR: " in json.dumps(r.json) and world["topic"] in json.dumps(r.json)]

    assert wait_for(paged, timeout_s=30), (
        f"no incident reached Slack: {peer_network.received('slack')}\n{deployed.logs()}")
    message = paged()[0]
    assert "stopped with" in message and "Owner: payments-team" in message
    assert f"http://offsetwatch.example/pipelines/{world['pipeline']}/" in message
    sent = deployed.shell_json("from dashboard.models import Notification\n"
                               f"result = list(Notification.objects.filter(pipeline_id={world['pipeline']}, "
                               "event='incident.opened').values_list('status', flat=True))")
    assert sent == ["sent"]
    # The worker's delivery is kept on the channel: what the overview's banner and /metrics read.
    state = deployed.shell_json("from dashboard.models import Channel\n"
                                "c = Channel.objects.get(name='payments on-call')\n"
                                "result = [c.last_sent_at is not None, c.failing]")
    assert state == [True, False]


def test_the_workers_cluster_polls_write_the_charts_roll_ups(deployed, world):
    """Issue #16: the roll-ups the long charts read are written by the deployed worker's cluster
    polls (beat -> worker), per minute and per hour, with the pipeline's partitions. A minute
    goes into its hour when the pipeline's next minute opens: the charts' hours include the
    newest minute meanwhile, and the stored hour row follows within a minute."""
    def stored():
        return deployed.shell_json(
            "from dashboard.models import ChartRollup\n"
            f"rows = ChartRollup.objects.filter(pipeline_id={world['pipeline']})\n"
            "result = sorted({r.resolution_s for r in rows if r.lags})")

    def hours_charted():
        return deployed.shell_json(
            "from datetime import datetime, timezone\n"
            "from dashboard.charts.rollups import rollup_points\n"
            f"points = rollup_points(pipeline_id={world['pipeline']}, resolution_s=3600, per_partition=True, "
            "since=datetime(2000, 1, 1, tzinfo=timezone.utc), until=datetime(2100, 1, 1, tzinfo=timezone.utc))\n"
            "result = [len(p.partitions) for _, p in points]")

    assert 60 in (wait_for(stored, timeout_s=30, interval_s=0.5) or []), deployed.logs(["worker"], lines=200)
    assert (wait_for(hours_charted, timeout_s=30, interval_s=0.5) or [0])[-1] == 2
    assert wait_for(lambda: stored() == [60, 3600], timeout_s=90, interval_s=3), deployed.logs(["worker"], lines=200)


def test_an_approved_rewind_is_announced_on_the_webhook_through_the_worker(deployed, world, peer_network):
    """Issue #11, observation 9: approvers were never notified (the web process's task went to
    amqp://localhost:5672)."""
    olivia, april = deployed.session("olivia", PASSWORD), deployed.session("april", PASSWORD)
    status, headers, body = olivia.post(f"/pipelines/{world['pipeline']}/rewind/", {
        "kind": "offsets", "offsets": "0:2, 1:2", "reason": "replay after the bad deploy", "mode": "job",
        "action": "submit"})
    assert status == 302, body.decode()[-2000:]
    rewind_id = int(re.search(r"/rewinds/(\d+)/", headers["Location"]).group(1))
    status, _, body = april.post(f"/rewinds/{rewind_id}/decide", {"decision": "approve", "comment": "ok"})
    assert status == 302, body.decode()[-2000:]

    def announced(event):
        return [r.json for r in peer_network.received("webhook")
                if r.json["title"].startswith(f"[Offset Watch] rewind {rewind_id} {event}:")]

    assert wait_for(lambda: announced("approved"), timeout_s=30), (
        f"no 'approved' notification reached the webhook; received: {peer_network.received('webhook')}\n"
        f"{deployed.logs()}")
    assert wait_for(lambda: announced("requested"), timeout_s=30)  # two tasks, two worker processes: any order
    message = announced("approved")[0]["message"]
    assert "approved by: april" in message and "requested by: olivia" in message
    assert "notification" in deployed.logs(["worker"], lines=400)


def test_beat_polls_each_source_at_the_configured_interval(deployed, world):
    """Beat enqueues a cycle every OFFSETWATCH_POLL_INTERVAL and the worker polls each source:
    the store's last attempt, read through the API, advances about every interval."""
    alice = deployed.session("alice", PASSWORD)
    source = f"store:{world['store']}"

    def last_attempt():
        status, _, body = alice.get("/api/v1/collectors")
        assert status == 200, body
        answer = json.loads(body)
        rows = [c for c in answer["sources"] if c["source"] == source]
        return rows[0]["last_attempt_at"] if rows else None

    seen, t0 = [last_attempt()], time.monotonic()
    while len(seen) < 4 and time.monotonic() - t0 < 8 * POLL_INTERVAL_S:
        value = last_attempt()
        if value != seen[-1]:
            seen.append(value)
        time.sleep(0.2)
    assert len(seen) >= 4, f"the store was polled {len(seen) - 1} times in {8 * POLL_INTERVAL_S:.0f} s: {seen}"
    stamps = [datetime.fromisoformat(s) for s in seen[1:]]
    gaps = [(b - a).total_seconds() for a, b in zip(stamps, stamps[1:])]
    assert all(0.5 * POLL_INTERVAL_S <= g <= 2.5 * POLL_INTERVAL_S for g in gaps), gaps


@pytest.mark.parametrize("how", ["stopped", "killed"])
def test_the_api_answers_json_503_while_postgresql_is_away_and_recovers(deployed, world, how):
    """Issue #11, observation 7: with PostgreSQL down every API answer was Django's HTML 500 page
    (and a job read "500" instead of "unavailable")."""
    token = deployed.manage("issue_api_token", "--user", "alice", "--name", f"probe-{how}").stdout.strip()
    job_token = deployed.manage("issue_pipeline_token", "--store", "deployed-hbase", "--topic", world["topic"],
                                "--group", "etl", "--name", f"job-{how}").stdout.strip()
    alice = deployed.session("alice", PASSWORD)
    bearer = {"Authorization": f"Bearer {token}"}
    assert alice.get("/api/v1/pipelines", headers=bearer)[0] == 200
    assert alice.get("/api/v1/rewinds/pending", headers={"Authorization": f"Bearer {job_token}"})[0] == 200

    if how == "stopped":
        deployed.stop_process("postgres")  # pg_ctl stop -m fast
    else:
        deployed.kill("postgres")  # a crash: every connection reset, new ones refused
    try:
        for path, headers in [("/api/v1/pipelines", bearer), ("/api/v1/collectors", {}),
                              (f"/api/v1/pipelines/{world['pipeline']}/batches", bearer),
                              ("/api/v1/rewinds/pending", {"Authorization": f"Bearer {job_token}"})]:
            status, answer_headers, body = alice.get(path, headers=headers)
            assert status == 503, (path, status, body[:300])
            assert answer_headers["Content-Type"] == "application/json", (path, answer_headers["Content-Type"])
            assert json.loads(body)["error"].startswith("database unavailable: "), body
            assert int(answer_headers["Retry-After"]) > 0
        status, _, body = alice.post("/api/v1/rewinds/1/claim", headers={"Authorization": f"Bearer {job_token}",
                                                                           "Content-Type": "application/json"})
        assert status == 503 and json.loads(body)["error"].startswith("database unavailable")
        # The job's client reads it as the dashboard being unavailable, with the reason.
        with pytest.raises(DashboardError) as err:
            DashboardClient(deployed.base_url, job_token).pending_rewind()
        assert err.value.status == 503 and "HTTP 503: database unavailable" in str(err.value)
        # A page says so too, as a 503 rather than a server error.
        status, _, body = alice.get("/")
        assert status == 503 and b"database unavailable" in body.lower()
        assert deployed.session().get("/healthz")[0] == 503
    finally:
        deployed.start_process("postgres")
    assert wait_for(lambda: alice.get("/api/v1/pipelines", headers=bearer)[0] == 200, timeout_s=15)
    assert alice.get("/api/v1/rewinds/pending", headers={"Authorization": f"Bearer {job_token}"})[0] == 200


def test_every_process_binds_the_tasks_to_the_projects_celery_app(tmp_path):
    """Issue #11, observation 9 at its root: outside the worker and beat (which name the app on
    their command line) dashboard.tasks was bound to Celery's default app, whose broker is
    amqp://localhost. After django.setup() alone, as in gunicorn or a management command, the
    tasks must use the project's app and its Redis broker."""
    code = ("import django; django.setup()\n"
            "from dashboard import tasks\n"
            "print(tasks.export_run.app.main, tasks.export_run.app.conf.broker_url,"
            " tasks.notification_deliver.app.conf.broker_url)")
    env = {k: v for k, v in os.environ.items() if k != "CELERY_BROKER_URL"}
    env.update(DJANGO_SETTINGS_MODULE="offsetwatch.settings", REDIS_URL="redis://127.0.0.1:6399/7")
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True,
                         check=True, timeout=60).stdout.split()
    assert out == ["offsetwatch", "redis://127.0.0.1:6399/7", "redis://127.0.0.1:6399/7"]


def test_the_celery_app_imports_first_as_worker_and_beat_load_it():
    """`celery -A offsetwatch.celery` imports the app before Django: the app's own imports
    must not come back to it through the dashboard package (a cycle once stopped beat)."""
    code = "import offsetwatch.celery as m; print(m.app.main)"
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "offsetwatch.settings"}
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.split() == ["offsetwatch"], out.stderr
