"""Issue #13: the numbers reported for what real stores hold, written as their writers leave them
and read back through the API and the pages after real collector polls."""
from __future__ import annotations

import pytest
from django.urls import reverse

from collectors.cycle import collect_once
from dashboard.models import Pipeline
from dashboard.monitoring.services import cluster_get_or_create, store_get_or_create, watermarks_record
from reference_job.producer import ensure_topic, produce
from tests.corpus import spark_batch

pytestmark = pytest.mark.django_db

T0 = 1_700_000_000_000


def test_a_checkpoints_numbers_come_from_its_newest_committed_batch_not_the_planned_one(
    client, stack, tmp_path, unique_name, vera,
):
    topic = unique_name("orders")
    ensure_topic(stack.kafka_bootstrap, topic, 2)
    produce(stack.kafka_bootstrap, topic, 2, 40)  # 20 records per partition
    ckpt = tmp_path / "ckpts" / "orders-enricher"
    for batch_id in range(5):  # batches 0-4 done: 2, 4, 6, 8, 10 per partition
        spark_batch(ckpt, batch_id, topic, {0: 2 * batch_id + 2, 1: 2 * batch_id + 2}, T0 + batch_id * 1000, True)
    # Batch 5 planned: Spark wrote offsets/5 and is running it (or will re-run it after a crash).
    spark_batch(ckpt, 5, topic, {0: 17, 1: 19}, T0 + 5000, committed=False)
    cluster = cluster_get_or_create(name=unique_name("c"), bootstrap_servers=stack.kafka_bootstrap)
    store = store_get_or_create(name=unique_name("s"), kind="checkpoint",
                                         url=f"checkpoint://{ckpt.parent}", cluster=cluster)
    assert collect_once().errors == []
    pipeline = Pipeline.objects.get(store=store, topic=topic, group="orders-enricher")

    client.force_login(vera)
    detail = client.get(f"/api/v1/pipelines/{pipeline.pk}").json()
    parts = {r["partition"]: r for r in detail["partitions"]}
    # Batch 4's offsets (what a restart resumes from), not batch 5's.
    assert {p: (r["committed"], r["lag"]) for p, r in parts.items()} == {0: (10, 10), 1: (10, 10)}
    assert detail["total_lag"] == 20
    partitions = client.get(f"/api/v1/pipelines/{pipeline.pk}/partitions").json()["partitions"]
    assert {r["partition"]: r["committed"] for r in partitions} == {0: 10, 1: 10}
    # The batches table keeps showing #5 as planned.
    batches = client.get(f"/api/v1/pipelines/{pipeline.pk}/batches").json()["batches"]
    assert [(b["batch_id"], b["committed"]) for b in batches][:2] == [(5, False), (4, True)]
    assert "planned, not committed" in client.get(reverse("pipeline", args=[pipeline.pk])).content.decode()

    # Spark commits batch 5: now it is the position.
    spark_batch(ckpt, 5, topic, {0: 17, 1: 19}, T0 + 5000, committed=True)
    assert collect_once().errors == []
    parts = {r["partition"]: r for r in client.get(f"/api/v1/pipelines/{pipeline.pk}").json()["partitions"]}
    assert {p: (r["committed"], r["lag"]) for p, r in parts.items()} == {0: (17, 3), 1: (19, 1)}


def test_an_out_of_range_partition_has_no_lag_numbers_and_says_why(client, stack, tmp_path, unique_name, vera):
    """The state wins over every derived number: no lag, no lag in seconds, no "caught up"."""
    from django.utils import timezone

    from dashboard.models import PipelineEvaluation
    from streamoffsets.kafka import WatermarkResult
    from streamoffsets.stores.registry import open_store
    from streamoffsets.types import BatchOffsets, Watermarks

    topic, group = unique_name("orders"), "etl"
    ensure_topic(stack.kafka_bootstrap, topic, 2)
    produce(stack.kafka_bootstrap, topic, 2, 402)  # 201 per partition
    url = f"file://{tmp_path / 'offsets'}"
    cluster = cluster_get_or_create(name=unique_name("c"), bootstrap_servers=stack.kafka_bootstrap)
    store = store_get_or_create(name=unique_name("s"), kind="file", url=url, cluster=cluster)
    now_ms = int(timezone.now().timestamp() * 1000)
    with open_store(url) as writer:  # partition 0 beyond the topic's end (re-created topic?)
        writer.save_batch(BatchOffsets(topic, group, now_ms, {0: 1000, 1: 150}))
    assert collect_once().errors == []
    pipeline = Pipeline.objects.get(store=store, topic=topic, group=group)

    client.force_login(vera)
    detail = client.get(f"/api/v1/pipelines/{pipeline.pk}").json()
    parts = {r["partition"]: r for r in detail["partitions"]}
    p0 = parts[0]
    assert (p0["committed"], p0["high"], p0["state"]) == (1000, 201, "high out-of-range")
    assert (p0["lag"], p0["lag_seconds"], p0["lag_method"]) == (None, None, "")
    assert p0["lag_absent"] == "out of range: committed 1000 above the high watermark 201"
    assert (parts[1]["lag"], parts[1]["lag_absent"]) == (51, None)
    assert client.get(f"/api/v1/pipelines/{pipeline.pk}/partitions").json()["partitions"] == detail["partitions"]
    assert detail["status"] == "ERR"
    # The total counts the partitions with a lag; the pipeline's lag in seconds is absent and says why.
    assert (detail["total_lag"], detail["lag_seconds"]) == (51, None)
    assert detail["lag_seconds_method"] == "none: partition 0 is out of range"
    assert "caught up" not in str(detail) and all(r["lag"] is None or r["lag"] >= 0 for r in detail["partitions"])

    page = client.get(reverse("pipeline", args=[pipeline.pk])).content.decode()
    row = page.split('data-partition="0"', 1)[1].split("</tr>", 1)[0]
    assert "out of range: committed 1000 above the high watermark 201" in row
    assert " s</td>" not in row and "caught up" not in row
    overview = client.get(reverse("overview")).content.decode()
    line = overview.split(f'data-pipeline="{pipeline.pk}"', 1)[1].split("</tr>", 1)[0]
    assert 'title="none: partition 0 is out of range">—</td>' in line  # the lag (time) column, not "0 s"

    # Below the low watermark (Tansu cannot move one: the watermarks enter at the service seam).
    result = WatermarkResult(by_topic={topic: {0: Watermarks(0, 2_000, 5_000), 1: Watermarks(1, 0, 201)}})
    watermarks_record(cluster=cluster, result=result, sampled_at=timezone.now())
    p0 = PipelineEvaluation.objects.get(pipeline=pipeline).partitions[0]
    assert (p0["state"], p0["lag"], p0["lag_seconds"], p0["lag_method"]) == ("low out-of-range", None, None, "")
    assert p0["retention_margin"] == -1000  # negative: the data lost (what the metrics export)
    assert p0["lag_absent"] == ("out of range: committed 1000 below the low watermark 2000 "
                                "(1000 messages deleted before being read)")


@pytest.fixture
def zk_root(stack, unique_name):
    """A plain kazoo client (as an old consumer or a Storm spout writes) and a fresh chroot."""
    from kazoo.client import KazooClient

    client = KazooClient(hosts=stack.zookeeper_hosts, timeout=5)
    client.start(timeout=5)
    chroot = f"/{unique_name('ow')}"
    client.create(chroot)
    yield client, chroot
    client.delete(chroot, recursive=True)
    client.stop()
    client.close()


def test_a_zookeeper_group_rewriting_unchanged_offsets_while_messages_wait_is_stalled(
    client, stack, zk_root, unique_name, vera,
):
    """Every partition node re-written with the same offset (its mtime moves): the store says a
    batch was written, so the batches keep coming while no offset moves: STALLED, not stopped."""
    import time

    zk, chroot = zk_root
    topic, group = unique_name("orders"), "spout"
    ensure_topic(stack.kafka_bootstrap, topic, 2)
    produce(stack.kafka_bootstrap, topic, 2, 40)  # 20 per partition; the spout is stuck at 5
    base = f"{chroot}/consumers/{group}/offsets/{topic}"
    for p in (0, 1):
        zk.create(f"{base}/{p}", b"5", makepath=True)
    cluster = cluster_get_or_create(name=unique_name("c"), bootstrap_servers=stack.kafka_bootstrap)
    store = store_get_or_create(name=unique_name("s"), kind="zookeeper",
                                         url=f"zk://{stack.zookeeper_hosts}{chroot}", cluster=cluster)
    assert collect_once().errors == []
    for _ in range(4):  # the spout commits every ~1 s, the same offsets each time
        time.sleep(1.0)
        for p in (0, 1):
            zk.set(f"{base}/{p}", b"5")
        assert collect_once().errors == []
    pipeline = Pipeline.objects.get(store=store, topic=topic, group=group)
    # Each rewrite is a batch written (records 0), dated by the nodes' mtime.
    assert pipeline.batches.count() == 5
    assert set(pipeline.batches.exclude(records=None).values_list("records", flat=True)) == {0}

    client.force_login(vera)
    detail = client.get(f"/api/v1/pipelines/{pipeline.pk}").json()
    assert detail["status"] == "STALLED", detail["reasons"]
    assert any("batches keep coming but no offset moved" in r and "30 messages wait" in r for r in detail["reasons"])


def test_a_recurring_torn_write_warning_is_one_row_with_a_count(client, stack, zk_root, unique_name, vera):
    """A per-partition writer whose partition 0 stopped while partition 1 keeps committing: the
    torn-write warning recurs at every poll, its text unchanged, so it stays one row whose count
    and last-seen time grow (it held the changing times and added a row per poll)."""
    import time

    from dashboard.models import StoreProblem

    zk, chroot = zk_root
    topic, group = unique_name("orders"), "spout"
    ensure_topic(stack.kafka_bootstrap, topic, 2)
    base = f"{chroot}/consumers/{group}/offsets/{topic}"
    zk.create(f"{base}/0", b"3", makepath=True)
    zk.create(f"{base}/1", b"3")
    cluster = cluster_get_or_create(name=unique_name("c"), bootstrap_servers=stack.kafka_bootstrap)
    store = store_get_or_create(name=unique_name("s"), kind="zookeeper",
                                         url=f"zk://{stack.zookeeper_hosts}{chroot}", cluster=cluster)
    seen = []
    for i in range(3):  # partition 1 advances, partition 0 lags further behind at every poll
        time.sleep(1.2)
        zk.set(f"{base}/1", str(4 + i).encode())
        assert collect_once().errors == []
        seen.append(list(StoreProblem.objects.filter(store=store).values_list("occurrences", "last_seen_at")))
    [problem] = StoreProblem.objects.filter(store=store)
    assert problem.problem.startswith("torn write: partitions 0 behind the others (1)")
    assert problem.occurrences == 3 and [len(s) for s in seen] == [1, 1, 1]
    assert seen[0][0][1] < seen[2][0][1]  # the last-seen time moves on, in its own field

    pipeline = Pipeline.objects.get(store=store, topic=topic, group=group)
    client.force_login(vera)
    html = client.get(reverse("pipeline", args=[pipeline.pk])).content.decode()
    assert html.count("torn write: partitions 0 behind") == 1 and '<td class="num">3</td>' in html
