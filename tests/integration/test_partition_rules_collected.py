"""Partition rules through collection (issue #13, item 4): a ZooKeeper-stored group written one
partition node at a time, as the old Kafka consumer and Storm's spouts do, whose partitions 0-2
stall (the same offset re-written while messages wait) and then stop committing while partition
3 keeps advancing. Read back through the API and the pipeline page."""
from __future__ import annotations

import time

import pytest
from django.urls import reverse
from kazoo.client import KazooClient

from collectors.cycle import collect_once
from dashboard.models import Incident, Pipeline, PipelineEvaluation
from dashboard.monitoring.services import cluster_get_or_create, store_get_or_create
from reference_job.producer import ensure_topic, produce
from streamoffsets.evaluation import Status

pytestmark = pytest.mark.django_db

CYCLE_S = 0.4  # the consumer commits, then a collection cycle runs, every ~CYCLE_S + its own time


def test_stuck_partitions_are_stalled_then_stopped_while_the_control_partition_advances(client, stack, unique_name, vera):
    topic, group = unique_name("orders"), unique_name("spout")
    ensure_topic(stack.kafka_bootstrap, topic, 4)
    produce(stack.kafka_bootstrap, topic, 4, 400)  # 100 per partition: every partition lags throughout
    cluster = cluster_get_or_create(name=unique_name("c"), bootstrap_servers=stack.kafka_bootstrap)
    store_get_or_create(name=unique_name("zk"), kind="zookeeper", url=f"zk://{stack.zookeeper_hosts}",
                                 cluster=cluster)
    client.force_login(vera)
    zk = KazooClient(hosts=stack.zookeeper_hosts, timeout=5)
    zk.start(timeout=5)
    base = f"/consumers/{group}/offsets/{topic}"
    offsets = {p: 10 for p in range(4)}
    pipeline = None

    def commit(partitions):
        """One consumer commit: one node write per partition (re-written even when unchanged)."""
        for p in partitions:
            zk.ensure_path(base)
            path = f"{base}/{p}"
            if zk.exists(path):
                zk.set(path, str(offsets[p]).encode())
            else:
                zk.create(path, str(offsets[p]).encode())

    def cycle(advance, write):
        nonlocal pipeline
        for p in advance:
            offsets[p] += 3
        commit(write)
        time.sleep(CYCLE_S)
        assert collect_once().errors == []
        pipeline = pipeline or Pipeline.objects.get(topic=topic, group=group)
        rows = client.get(reverse("api_pipeline_partitions", args=[pipeline.pk])).json()["partitions"]
        by_partition = {r["partition"]: r for r in rows}
        # The control partition is never flagged, whatever the others do.
        assert by_partition[3]["status"] == "OK" and by_partition[3]["status_reason"] == "", by_partition[3]
        return by_partition

    try:
        for _ in range(4):  # normal: every partition advances
            rows = cycle(advance=range(4), write=range(4))
            assert {r["status"] for r in rows.values()} == {"OK"}
        assert PipelineEvaluation.objects.get(pipeline=pipeline).status == Status.OK

        # Stall: partitions 0-2 re-written unchanged (their znode mtimes move), 3 advances.
        for stall_cycles in range(1, 9):
            rows = cycle(advance=[3], write=range(4))
            if all(rows[p]["status"] == "STALLED" for p in (0, 1, 2)):
                break
        else:
            pytest.fail(f"partitions 0-2 never STALLED: {rows}")
        assert stall_cycles <= 4  # 2 commit intervals frozen, give or take the cycles' jitter
        for p in (0, 1, 2):
            assert rows[p]["status_reason"].startswith(f"partition {p} stalled at offset 22 for ")
            assert "messages waiting while partition 3 advanced" in rows[p]["status_reason"]
        evaluated = PipelineEvaluation.objects.get(pipeline=pipeline)
        assert evaluated.status == Status.STALLED
        assert [r.split()[1] for r in evaluated.reasons] == ["0", "1", "2"]
        assert Incident.objects.get(pipeline=pipeline, partition=None, closed_at=None).worst_status == Status.STALLED
        assert sorted(Incident.objects.filter(pipeline=pipeline, partition__isnull=False, closed_at=None)
                      .values_list("partition", flat=True)) == [0, 1, 2]
        page = client.get(reverse("pipeline", args=[pipeline.pk])).content.decode()
        assert "partition 1 stalled at offset 22" in page

        # Stop: partitions 0-2 no longer written at all, 3 keeps committing.
        for stop_cycles in range(1, 11):
            rows = cycle(advance=[3], write=[3])
            if all(rows[p]["status"] == "STOPPED" for p in (0, 1, 2)):
                break
        else:
            pytest.fail(f"partitions 0-2 never STOPPED: {rows}")
        assert stop_cycles <= 5  # 3 commit intervals without a write, give or take the jitter
        for p in (0, 1, 2):
            assert rows[p]["status_reason"].startswith(f"partition {p} stopped at offset 22: not committed for ")
            assert "while partition 3 kept committing" in rows[p]["status_reason"]
        evaluated = PipelineEvaluation.objects.get(pipeline=pipeline)
        assert evaluated.status == Status.STOPPED
        incident = Incident.objects.get(pipeline=pipeline, partition=None, closed_at=None)  # the same, raised
        assert incident.worst_status == Status.STOPPED and "partition 0 stopped" in incident.reasons[0]
        # Each stuck partition has its own incident, raised from STALLED to STOPPED, with its own
        # reason; the control partition has none.
        own = {i.partition: i for i in Incident.objects.filter(pipeline=pipeline, partition__isnull=False)}
        assert sorted(own) == [0, 1, 2]
        for p, i in own.items():
            assert (i.closed_at, i.worst_status) == (None, Status.STOPPED)
            assert i.reasons == [rows[p]["status_reason"]]

        # Recovery: every partition advances again; the flags clear and the incident closes.
        for _ in range(3):
            rows = cycle(advance=range(4), write=range(4))
        assert {r["status"] for r in rows.values()} == {"OK"}
        incident.refresh_from_db()
        assert incident.closed_at is not None
        assert not Incident.objects.filter(pipeline=pipeline, closed_at=None).exists()  # the partitions' too
    finally:
        zk.delete(f"/consumers/{group}", recursive=True)
        zk.stop()
        zk.close()


def test_zookeeper_readings_carry_each_partition_nodes_write_time(stack, unique_name):
    """The per-partition write times the STOPPED rule needs: each znode's mtime, outside equality."""
    from streamoffsets.stores.zookeeper import ZooKeeperOffsetStore
    from streamoffsets.types import BatchOffsets

    topic, group = unique_name("orders"), unique_name("spout")
    zk = KazooClient(hosts=stack.zookeeper_hosts, timeout=5)
    zk.start(timeout=5)
    try:
        zk.create(f"/consumers/{group}/offsets/{topic}/0", b"5", makepath=True)
        time.sleep(0.05)
        zk.create(f"/consumers/{group}/offsets/{topic}/1", b"7")
        mtimes = {p: zk.exists(f"/consumers/{group}/offsets/{topic}/{p}").mtime for p in (0, 1)}
        with ZooKeeperOffsetStore(stack.zookeeper_hosts, timeout_s=5) as store:
            latest = store.load_latest(topic, group)
            [batch] = store.history(topic, group).batches
        assert latest.written_ms == batch.written_ms == mtimes and mtimes[1] > mtimes[0]
        assert batch.batch_time_ms == mtimes[1]
        assert batch == BatchOffsets(topic, group, mtimes[1], {0: 5, 1: 7})  # write times are not compared
    finally:
        zk.delete(f"/consumers/{group}", recursive=True)
        zk.stop()
        zk.close()
