"""The admin refuses a bad store URL with a form error, and asks the server of a store once: a port
that answers as another kind is named, credentials masked (issue #12, observation 8). The URL
checks alone: tests/unit/test_store_urls.py."""
from __future__ import annotations

import pytest


@pytest.mark.django_db
def test_the_admin_shows_a_bad_store_url_as_a_form_error(client, settings):
    from django.contrib.auth.models import User
    from django.urls import reverse

    from dashboard.models import Cluster, Store

    settings.FILE_STORE_ROOTS = ["/srv/offsets"]
    client.force_login(User.objects.create_superuser("root", password="root's long passphrase"))
    cluster = Cluster.objects.create(name="prod", bootstrap_servers="k1:9092")
    form = {"name": "etc", "kind": "file", "url": "file:///srv/offsets/../../etc", "cluster": cluster.pk, "enabled": "on"}
    response = client.post(reverse("admin:dashboard_store_add"), form)
    assert response.status_code == 200  # the form again, with its error
    assert "&#x27;/etc&#x27; is not under a directory allowed by OFFSETWATCH_FILE_STORE_ROOTS" in response.content.decode()
    assert not Store.objects.filter(name="etc").exists()

    form.update(url="file:///srv/offsets/team-a")
    assert client.post(reverse("admin:dashboard_store_add"), form).status_code == 302
    assert Store.objects.filter(name="etc").exists()


@pytest.mark.django_db
def test_the_admin_refuses_hbase_at_a_zookeeper_port_with_a_masked_message(client, settings, stack):
    """Observation 8: hbase:// pointed at ZooKeeper was accepted and its Thrift error shown to
    every viewer. The admin asks the server once: it answers as ZooKeeper, not as HBase."""
    from django.contrib.auth.models import User
    from django.urls import reverse

    from dashboard.models import Cluster, Store
    from devstack.components import free_port

    settings.POLL_PROBE_TIMEOUT_S = 1.0
    client.force_login(User.objects.create_superuser("root", password="root's long passphrase"))
    cluster = Cluster.objects.create(name="prod", bootstrap_servers=stack.kafka_bootstrap)
    zk_port = stack.zookeeper_hosts.rpartition(":")[2]
    form = {"name": "wrong", "kind": "hbase", "url": f"hbase://127.0.0.1:{zk_port}/offsets",
            "cluster": cluster.pk, "enabled": "on"}
    response = client.post(reverse("admin:dashboard_store_add"), form)
    page = response.content.decode()
    assert response.status_code == 200 and not Store.objects.filter(name="wrong").exists()
    assert f"127.0.0.1:{zk_port} accepts connections but does not answer as an HBase Thrift server" in page
    assert "it answers as ZooKeeper" in page

    # ZooKeeper with credentials at the HBase port: refused, the message masks them.
    form.update(kind="zookeeper", url=f"zk://svc:S3cretPw@127.0.0.1:{stack.hbase_port}/ow")
    page = client.post(reverse("admin:dashboard_store_add"), form).content.decode()
    assert f"127.0.0.1:{stack.hbase_port} accepts connections but does not answer as ZooKeeper" in page
    assert page.count("S3cretPw") == 1  # only in the form's own field, never in the message

    # The right kind at that port is saved; so is a server that is not up yet (not judged).
    form.update(name="right", kind="zookeeper", url=f"zk://{stack.zookeeper_hosts}/ow")
    assert client.post(reverse("admin:dashboard_store_add"), form).status_code == 302
    form.update(name="later", kind="hbase", url=f"hbase://127.0.0.1:{free_port()}/offsets")
    assert client.post(reverse("admin:dashboard_store_add"), form).status_code == 302
