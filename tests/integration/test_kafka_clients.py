"""The collectors' Kafka admin clients are kept across reads, per process, and dropped when a
read fails (streamoffsets.kafka_clients), against Tansu."""
from __future__ import annotations

import os

import pytest

from devstack.components import free_port
from reference_job.producer import ensure_topic, produce
from streamoffsets import kafka_clients
from streamoffsets.errors import OffsetStoreError
from streamoffsets.stores.reading import ReadPlan, read_store, read_watermarks


@pytest.fixture(autouse=True)
def no_kept_clients():
    kafka_clients._clients.clear()
    yield
    kafka_clients._clients.clear()


def _kept() -> list:
    return list(kafka_clients._clients.values())


def test_reads_of_one_cluster_share_one_client_and_read_what_a_new_one_reads(stack, unique_name):
    topic = unique_name("kept")
    ensure_topic(stack.kafka_bootstrap, topic, 2)
    produce(stack.kafka_bootstrap, topic, 2, 6)
    first = read_watermarks(stack.kafka_bootstrap, [topic], timeout_s=5.0, ping_timeout_s=2.0)
    kept = _kept()
    assert len(kept) == 1
    produce(stack.kafka_bootstrap, topic, 2, 4)
    second = read_watermarks(stack.kafka_bootstrap, [topic], timeout_s=5.0, ping_timeout_s=2.0)
    assert _kept() == kept and _kept()[0] is kept[0]  # the same client, not a new one
    assert sum(w.high for w in second.by_topic[topic].values()) == sum(w.high for w in first.by_topic[topic].values()) + 4
    # The group-offsets store of the same cluster (same configuration) reads with the same client.
    plan = ReadPlan(discover=True)
    assert read_store(f"kafka://{stack.kafka_bootstrap}", plan, timeout_s=5.0, ping_timeout_s=2.0).discovered
    assert _kept() == kept
    # Another configuration (a probe's shorter timeout) is a client of its own.
    read_watermarks(stack.kafka_bootstrap, [topic], timeout_s=1.0, ping_timeout_s=1.0)
    assert len(_kept()) == 2


def test_a_failed_read_drops_the_clusters_clients(stack, unique_name):
    topic = unique_name("dropped")
    ensure_topic(stack.kafka_bootstrap, topic, 1)
    read_watermarks(stack.kafka_bootstrap, [topic], timeout_s=5.0, ping_timeout_s=2.0)
    assert len(_kept()) == 1
    nobody = f"127.0.0.1:{free_port()}"  # no broker listens there
    with pytest.raises(OffsetStoreError):
        read_watermarks(nobody, [topic], timeout_s=1.0, ping_timeout_s=0.5)
    with pytest.raises(OffsetStoreError):
        read_store(f"kafka://{nobody}", ReadPlan(discover=True),
                   timeout_s=1.0, ping_timeout_s=0.5)
    assert len(_kept()) == 1  # the unreachable cluster's clients are gone, the other one stays
    assert kafka_clients.clients_drop(stack.kafka_bootstrap) == 1 and _kept() == []


def test_a_forked_process_does_not_use_its_parents_clients(stack):
    conf = {"bootstrap.servers": stack.kafka_bootstrap}
    parents = kafka_clients.admin_client(conf)
    assert kafka_clients.admin_client(conf) is parents
    # A real fork (as a Celery pool process starts): the child sees its parent's dict, not its client.
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, then leave without running the parent's exit handlers
        try:
            mine = kafka_clients.admin_client(conf)
            os.write(write_end, f"{mine is not parents} {kafka_clients.clients_kept()}".encode())
        finally:
            os._exit(0)
    os.close(write_end)
    answer = os.read(read_end, 100).decode()
    os.waitpid(pid, 0)
    assert answer == "True 1"  # a client of its own, the parent's forgotten
    assert kafka_clients.admin_client(conf) is parents  # the parent's is still the parent's
