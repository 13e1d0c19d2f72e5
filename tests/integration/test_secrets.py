"""Secrets never leave the admin (issue #12, observation 1).

Stores and a cluster whose URLs carry credentials (zk://user:password@, kafka://user:password@,
?sasl_password=..., a bootstrap list user:password@host) are polled by the real collectors
against the test stack, successfully and failing; then every output a viewer, an API client or a
pipeline token can read is rendered, and no secret is found in any of them, nor in a log record
or a notification.
"""
from __future__ import annotations

import importlib
import json
import logging
import time

import pytest
from django.apps import apps as django_apps
from django.contrib.auth.models import User
from django.urls import reverse

from collectors import cycle
from dashboard.accounts.tokens import api_token_issue, pipeline_token_issue
from dashboard.alerting.rewind_notify import rewind_message
from dashboard.models import Cluster, Incident, PipelineEvaluation, SourceHealth, Store
from dashboard.rewinds import services as rewinds
from devstack.components import free_port
from reference_job.producer import ensure_topic, produce
from streamoffsets.stores.registry import open_store
from streamoffsets.types import BatchOffsets

ZK_PASSWORD = "S3cretPw"
SASL_PASSWORD = "Sasl5ecretQ"
KAFKA_PASSWORD = "K4fkaPw77"
CLUSTER_PASSWORD = "Clu5terPw9"
SECRETS = (ZK_PASSWORD, SASL_PASSWORD, KAFKA_PASSWORD, CLUSTER_PASSWORD)


def _leaks(text: str) -> list[str]:
    return [s for s in SECRETS if s in text]


def _body(response) -> str:
    if getattr(response, "streaming", False):
        data = b"".join(response.streaming_content)
    else:
        data = response.content
    return data.decode("utf-8", errors="replace")


@pytest.fixture
def world(stack, unique_name, settings, olga, amir, prometheus):
    """A ZooKeeper store with credentials and a secret query parameter (polled successfully,
    then failing), a Kafka group store with a password (failing), a cluster polled with its
    real bootstrap list and then with one carrying a password (failing), and a rewind."""
    settings.POLL_PROBE_TIMEOUT_S = 1.0
    settings.IO_TIMEOUT_S = 2.0
    topic, group = unique_name("orders"), "etl"
    ensure_topic(stack.kafka_bootstrap, topic, 2)
    produce(stack.kafka_bootstrap, topic, 2, 20)
    chroot = "/" + unique_name("ow")
    zk_url = f"zk://user:{ZK_PASSWORD}@{stack.zookeeper_hosts}{chroot}?sasl_password={SASL_PASSWORD}"
    batch_ms = int(time.time() * 1000) - 60_000
    with open_store(zk_url) as zk:
        zk.save_batch(BatchOffsets(topic, group, batch_ms, {0: 5, 1: 5}))

    cluster = Cluster.objects.create(name=unique_name("cluster"), bootstrap_servers=stack.kafka_bootstrap)
    store = Store.objects.create(name=unique_name("zk"), kind="zookeeper", url=zk_url, cluster=cluster)
    kafka_store = Store.objects.create(
        name=unique_name("groups"), kind="kafka", cluster=cluster,
        url=f"kafka://svc:{KAFKA_PASSWORD}@127.0.0.1:{free_port()}?sasl_password={SASL_PASSWORD}&protocol=x")

    assert cycle.poll_store(store.pk) >= 1  # the store's credentials work: a successful poll
    assert cycle.poll_cluster(cluster.pk) == 1
    # Now the ZooKeeper store is away (same credentials, a dead port): its polls fail.
    Store.objects.filter(pk=store.pk).update(url=f"zk://user:{ZK_PASSWORD}@127.0.0.1:{free_port()}{chroot}"
                                                 f"?sasl_password={SASL_PASSWORD}")
    with pytest.raises(cycle.SourceFailed):
        cycle.poll_store(store.pk)
    with pytest.raises(cycle.SourceFailed):
        cycle.poll_store(kafka_store.pk)
    assert cycle.poll_cluster(cluster.pk) == 1  # evaluated with the store failing: reasons name it
    Cluster.objects.filter(pk=cluster.pk).update(bootstrap_servers=f"u:{CLUSTER_PASSWORD}@127.0.0.1:{free_port()}")
    with pytest.raises(cycle.SourceFailed):
        cycle.poll_cluster(cluster.pk)

    pipeline = store.pipelines.get(topic=topic, group=group)
    rewind = rewinds.rewind_request(pipeline=pipeline, user=olga, kind="shift",
                                    spec={"shift": -2}, reason="replay")
    rewind = rewinds.rewind_decide(rewind=rewind, user=amir, approve=True)
    token = pipeline_token_issue(pipeline=pipeline, name="job")[1]
    api_token = api_token_issue(user=prometheus, name="prometheus")[1]
    return {"store": store, "kafka_store": kafka_store, "cluster": cluster, "pipeline": pipeline, "rewind": rewind,
            "token": token, "api_token": api_token, "zk_url": zk_url}


def test_no_output_shows_a_store_or_cluster_secret(world, client, sam, caplog, settings):
    caplog.set_level(logging.DEBUG)
    pipeline, rewind = world["pipeline"], world["rewind"]
    # What the polls recorded is already masked, and still says which store it is.
    health = SourceHealth.objects.get(source=f"store:{world['store'].pk}")
    assert health.consecutive_failures == 1 and health.last_error
    assert "zk://user:***@" in health.label and "sasl_password=***" in health.label
    failing = [h.label + h.last_error + h.warning for h in SourceHealth.objects.all()]
    assert not _leaks(" ".join(failing))
    assert SourceHealth.objects.get(source=f"cluster:{world['cluster'].pk}").label.endswith("(u:***@" + (
        Cluster.objects.get(pk=world["cluster"].pk).bootstrap_servers.split("@", 1)[1]) + ")")

    # The admin's own audit of a store added with credentials.
    root = User.objects.create_superuser("root", password="root's long passphrase")
    client.force_login(root)
    response = client.post(reverse("admin:dashboard_store_add"), {
        "name": "added", "kind": "zookeeper", "url": f"zk://user:{ZK_PASSWORD}@127.0.0.1:1/x?token={SASL_PASSWORD}",
        "cluster": world["cluster"].pk, "enabled": "on"})
    assert response.status_code == 302, _body(response)[:2000]

    client.force_login(sam)  # every role: every page
    pid = pipeline.pk
    chart_query = "?range=24h"
    pages = [
        reverse("overview"), reverse("overview_live"), reverse("pipeline", args=[pid]),
        reverse("pipeline_live", args=[pid]), reverse("pipeline_status", args=[pid]),
        reverse("pipeline_lag_chart", args=[pid]) + chart_query, reverse("pipeline_chart_svg", args=[pid]) + chart_query,
        reverse("pipeline_chart_png", args=[pid]) + chart_query, reverse("pipeline_chart_csv", args=[pid]) + chart_query,
        reverse("pipeline_chart_json", args=[pid]) + chart_query, reverse("pipeline_batches_csv", args=[pid]),
        reverse("export_jobs"), reverse("export_jobs_live"), reverse("collectors"),
        reverse("rewind_new", args=[pid]), reverse("rewinds"), reverse("rewind", args=[rewind.pk]),
        reverse("audit"), reverse("audit_export_csv"), reverse("audit_export_json"), reverse("metrics"),
        reverse("api_pipelines"), reverse("api_pipeline", args=[pid]), reverse("api_pipeline_partitions", args=[pid]),
        reverse("api_pipeline_batches", args=[pid]), reverse("api_pipeline_lag", args=[pid]),
        reverse("api_collectors"), reverse("api_openapi"),
    ]
    rendered = {}
    for url in pages:
        response = client.get(url)
        assert response.status_code == 200, (url, response.status_code)
        rendered[url] = _body(response)
    rendered["healthz"] = _body(client.get(reverse("healthz")))  # 200 or 503: either way, no secret
    response = client.post(reverse("audit_verify"))
    rendered["audit verify"] = _body(response)
    # The new-rewind page with a plan to preview, and an export in the background.
    rendered["rewind preview"] = _body(client.post(reverse("rewind_new", args=[pid]), {
        "kind": "shift", "shift": "-1", "reason": "why", "mode": "job", "action": "preview"}))

    # Machines: /metrics with an API token, the job's API with its pipeline token.
    client.logout()
    response = client.get(reverse("metrics"), HTTP_AUTHORIZATION=f"Bearer {world['api_token']}")
    assert response.status_code == 200
    rendered["metrics by token"] = _body(response)
    response = client.get(reverse("api_rewind_pending") + f"?topic={pipeline.topic}&group={pipeline.group}",
                          HTTP_AUTHORIZATION=f"Bearer {world['token']}")
    rendered["pending rewinds"] = _body(response)

    # The pages say what failed, with the URL masked (not hidden altogether).
    assert "zk://user:***@" in rendered[reverse("collectors")]
    assert "zk://user:***@" in rendered[reverse("pipeline", args=[pid])]
    assert 'label="store ' in rendered[reverse("metrics")]
    for url, text in rendered.items():
        assert not _leaks(text), (url, _leaks(text))

    # Notifications of the rewind, as each channel would send them.
    for event in ("requested", "approved"):
        message = rewind_message(event=event, rewind_summary=rewinds.rewind_summary(rewind))
        assert not _leaks(json.dumps(message, ensure_ascii=False))

    # Everything stored for people to read: evaluation and incident reasons, outcomes.
    stored = json.dumps([list(PipelineEvaluation.objects.values_list("reasons", flat=True)),
                         list(Incident.objects.values_list("reasons", flat=True))])
    assert not _leaks(stored)

    # And every log record of the whole test, tracebacks included.
    formatter = logging.Formatter()
    for record in caplog.records:
        text = record.getMessage() + (formatter.formatException(record.exc_info) if record.exc_info else "")
        assert not _leaks(text), (record.name, text[:500])


def test_the_console_log_filter_masks_urls_and_tracebacks():
    from offsetwatch.lib.logmask import MaskSecretsFilter

    try:
        raise RuntimeError(f"cannot reach zk://user:{ZK_PASSWORD}@h:2181/c")
    except RuntimeError:
        import sys

        record = logging.LogRecord("x", logging.ERROR, __file__, 1, "poll of %s failed",
                                   (f"kafka://svc:{KAFKA_PASSWORD}@b:9092?sasl_password={SASL_PASSWORD}",), sys.exc_info())
    assert MaskSecretsFilter().filter(record) is True
    assert record.getMessage() == "poll of kafka://svc:***@b:9092?sasl_password=*** failed"
    assert "zk://user:***@h:2181/c" in record.exc_text and not _leaks(record.exc_text)


def test_the_migration_masks_what_was_stored_before(db):
    """0016_mask_source_secrets: labels, errors and reasons written before masking existed."""
    cluster = Cluster.objects.create(name="c", bootstrap_servers="127.0.0.1:9")
    url = f"zk://user:{ZK_PASSWORD}@127.0.0.1:9/c"
    store = Store.objects.create(name="s", kind="zookeeper", url=url, cluster=cluster)
    SourceHealth.objects.create(source=f"store:{store.pk}", label=f"store s ({url})",
                                last_error=f"auth with {ZK_PASSWORD} refused", warning="")
    pipeline = store.pipelines.create(topic="t", group="g")
    from django.utils import timezone

    Incident.objects.create(pipeline=pipeline, opened_at=timezone.now(), worst_status=3,
                            reasons=[f"store s ({url}): the last 2 poll(s) failed"])
    migration = importlib.import_module("dashboard.migrations.0016_mask_source_secrets")
    migration.mask(django_apps, None)
    health = SourceHealth.objects.get(source=f"store:{store.pk}")
    assert health.label == "store s (zk://user:***@127.0.0.1:9/c)"
    assert health.last_error == "auth with *** refused"
    assert Incident.objects.get(pipeline=pipeline).reasons == ["store s (zk://user:***@127.0.0.1:9/c): the last 2 poll(s) failed"]
    assert Store.objects.get(pk=store.pk).url == url  # the admin's copy is the real one
