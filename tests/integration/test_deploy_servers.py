"""The deployment against servers: the health checks the compose file runs (a real Celery worker,
/healthz with PostgreSQL and Redis), client configurations for secured clusters (librdkafka
options, ZooKeeper digest credentials), Spark's own Kafka source and the HBase Thrift transport
options. Without servers: tests/unit/test_deploy.py.
"""
from __future__ import annotations

import socket
import subprocess
import sys
import uuid

import pytest

from tests.paths import ROOT

# --- health -------------------------------------------------------------------------------------

@pytest.mark.server
def test_worker_health_check_answers_while_the_worker_runs():
    """The compose healthcheck's command against a real worker: 0 while it runs, not 0 after."""
    node = f"health-{uuid.uuid4().hex[:8]}@{socket.gethostname()}"
    ping = [sys.executable, "-m", "celery", "-A", "offsetwatch.celery", "inspect", "ping", "--destination", node,
            "--timeout", "5"]
    worker = subprocess.Popen([sys.executable, "-m", "celery", "-A", "offsetwatch.celery", "worker", "-n", node,
                               "--pool", "solo", "--loglevel", "WARNING", "-Q", "default"],
                              cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        answered = False
        for _ in range(10):
            if subprocess.run(ping, cwd=ROOT, capture_output=True, timeout=60).returncode == 0:
                answered = True
                break
        assert answered
    finally:
        worker.terminate()
        worker.wait(30)
    assert subprocess.run(ping, cwd=ROOT, capture_output=True, timeout=60).returncode != 0


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed when the socket is: nothing listens there


@pytest.mark.django_db
def test_healthz_ok_with_database_and_redis(client, collectors_ticking):
    response = client.get("/healthz")
    assert (response.status_code, response.json()) == (200, {"status": "ok"})


@pytest.mark.django_db
def test_healthz_names_redis_when_it_is_unreachable(client, settings, collectors_ticking):
    settings.REDIS_URL = f"redis://127.0.0.1:{closed_port()}/0"
    response = client.get("/healthz")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "error" and body["failed"] == ["redis"]
    assert "ConnectionError" in body["redis"] and "database" not in body


# --- client configuration for secured clusters --------------------------------------------------

@pytest.mark.django_db
def test_a_clusters_kafka_client_config_reaches_its_clients(settings):
    """An invalid librdkafka value makes the client itself refuse: proof the config is passed to
    the watermark reader (cluster poll) and the Kafka group store (store poll) of that cluster."""
    from collectors import cycle
    from dashboard.models import SourceHealth
    from dashboard.monitoring.services import cluster_get_or_create, store_get_or_create

    name = f"secured-{uuid.uuid4().hex[:6]}"
    bootstrap = f"127.0.0.1:{closed_port()}"
    cluster = cluster_get_or_create(name=name, bootstrap_servers=bootstrap)
    store = store_get_or_create(name=f"{name}-groups", kind="kafka", url=f"kafka://{bootstrap}", cluster=cluster)
    settings.KAFKA_CLIENT_CONFIGS = {name: {"security.protocol": "not-a-protocol"}}
    for poll, pk, source in [(cycle.poll_cluster, cluster.pk, f"cluster:{cluster.pk}"),
                             (cycle.poll_store, store.pk, f"store:{store.pk}")]:
        with pytest.raises(cycle.SourceFailed):
            poll(pk)
        error = SourceHealth.objects.get(source=source).last_error
        assert "security.protocol" in error and "not-a-protocol" in error, error
    # A config for another cluster only: this one's client starts, and its poll (no topic
    # tracked yet, so nothing to ask the broker) succeeds.
    settings.KAFKA_CLIENT_CONFIGS = {"other": {"security.protocol": "not-a-protocol"}}
    cycle.poll_cluster(cluster.pk)
    assert SourceHealth.objects.get(source=f"cluster:{cluster.pk}").consecutive_failures == 0


def test_zookeeper_store_with_digest_credentials(stack, unique_name):
    """zk://user:password@hosts/chroot authenticates; nodes it creates are writable only by that
    identity and readable by anyone (the dashboard's collectors included)."""
    from streamoffsets.errors import OffsetStoreError
    from streamoffsets.stores.registry import open_store
    from streamoffsets.types import BatchOffsets

    chroot = f"/{unique_name('acl')}"
    plain = f"zk://{stack.zookeeper_hosts}"
    with open_store(plain) as root:  # the chroot must exist (kazoo never creates it)
        root._connection().ensure_path(chroot)
    job = open_store(f"zk://job:s%40cret@{stack.zookeeper_hosts}{chroot}")
    anonymous = open_store(f"{plain}{chroot}")
    intruder = open_store(f"zk://job:wrong@{stack.zookeeper_hosts}{chroot}")
    try:
        assert "s@cret" not in job.name and "s%40cret" not in job.name
        job.save_batch(BatchOffsets("orders", "etl", 1_700_000_000_000, {0: 10, 1: 20}))
        assert anonymous.load_latest("orders", "etl").offsets == {0: 10, 1: 20}
        for other in (anonymous, intruder):
            with pytest.raises(OffsetStoreError, match="NoAuth"):
                other.save_batch(BatchOffsets("orders", "etl", 1_700_000_001_000, {0: 11, 1: 21}))
        job.save_batch(BatchOffsets("orders", "etl", 1_700_000_002_000, {0: 12, 1: 22}))
        assert anonymous.load_latest("orders", "etl").offsets == {0: 12, 1: 22}
    finally:
        for s in (job, anonymous, intruder):
            s.close()


# --- the job's Kafka source and the HBase transport --------------------------------------------

@pytest.mark.spark
def test_official_source_is_sparks_own_kafka_format(spark):
    """Spark's `kafka` format needs the spark-sql-kafka jar (--packages): without it, loading
    fails naming the data source, which shows the job really asks Spark for its own source."""
    from pyspark.errors import AnalysisException

    from reference_job.sources import kafka_stream_reader

    reader = kafka_stream_reader(spark, source="official", bootstrap="127.0.0.1:9", topic="orders",
                                 starting_offsets='{"orders": {"0": 0}}', partitions=1)
    with pytest.raises(AnalysisException, match="(?i)kafka"):
        reader.load()


def test_hbase_url_chooses_the_thrift_transport_and_protocol(stack):
    """The stand-in, like `hbase thrift start` by default, speaks buffered transport and binary
    protocol: a framed or compact client gets no answer from it, so the options reach happybase."""
    from streamoffsets.errors import OffsetStoreError
    from streamoffsets.stores.hbase import HBaseOffsetStore

    base = f"hbase://{stack.hbase_host}:{stack.hbase_port}/stream_kafka_offsets"
    store = HBaseOffsetStore.from_url(base + "?transport=framed&protocol=compact", timeout_ms=1500)
    assert (store.transport, store.protocol) == ("framed", "compact")
    with pytest.raises(OffsetStoreError):
        store.list_pipelines()
    store.close()
    with HBaseOffsetStore.from_url(base + "?transport=buffered&protocol=binary") as ok:
        ok.ensure_table()
        assert isinstance(ok.list_pipelines()[0], list)
    with pytest.raises(ValueError, match="transport='http' is not one of buffered, framed"):
        HBaseOffsetStore.from_url(base + "?transport=http")
    with pytest.raises(ValueError, match="unknown option"):
        HBaseOffsetStore.from_url(base + "?compat=0.92")
