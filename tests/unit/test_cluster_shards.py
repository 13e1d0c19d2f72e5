"""Which shard of a cluster's poll reads a topic, and how many shards a cluster has (issue #16):
pure functions, no server. Integration: tests/integration/test_cluster_shards.py."""
from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter

import pytest

from dashboard.monitoring.shards import cluster_source, cluster_sources, shard_label, shard_topics, source_parse
from offsetwatch.lib.shards import shard_count, shard_of
from tests.paths import ROOT

TOPICS = [f"team-{i % 7}.events-{i}" for i in range(1000)]


def test_a_topics_shard_is_pinned_by_its_name():
    # Pinned values: a change of the hash moves every topic, which is a change of behaviour
    # (each shard's record-time memory and health row start over), not a refactoring.
    assert [shard_of(t, 5) for t in ["orders", "payments", "clicks", "é-topic"]] == [3, 2, 2, 5]
    assert {shard_of(t, 1) for t in TOPICS} == {1}
    assert {shard_of(t, 0) for t in ["orders"]} == {1}  # no shard count yet: the whole cluster


def test_the_shard_is_the_same_in_every_process_whatever_its_hash_seed():
    # Python's own hash() of a str changes per process: the fan-out, the polls and the pages would disagree.
    code = "from offsetwatch.lib.shards import shard_of; print([shard_of(f'topic-{i}', 7) for i in range(50)])"
    outputs = {subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True,
                              env={**os.environ, "PYTHONHASHSEED": seed}).stdout for seed in ("1", "2")}
    assert outputs == {str([shard_of(f"topic-{i}", 7) for i in range(50)]) + "\n"}


@pytest.mark.parametrize("shards", [2, 5, 13])
def test_shards_split_topics_evenly_enough(shards):
    per_shard = Counter(shard_of(t, shards) for t in TOPICS)
    assert set(per_shard) == set(range(1, shards + 1))
    mean = len(TOPICS) / shards
    assert max(per_shard.values()) <= 1.25 * mean and min(per_shard.values()) >= 0.75 * mean, per_shard


def test_adding_or_removing_a_topic_moves_no_other_topic():
    before = {t: shard_of(t, 5) for t in TOPICS}
    assert {t: shard_of(t, 5) for t in TOPICS[1:] + ["a-new-topic"] if t in before} == {t: before[t] for t in TOPICS[1:]}


def test_each_shard_reads_its_topics_and_together_they_read_each_topic_once():
    parts = [shard_topics(topics=TOPICS, shard=k, shards=5) for k in range(1, 6)]
    assert sorted(t for part in parts for t in part) == sorted(TOPICS)
    assert all(shard_of(t, 5) == k for k, part in enumerate(parts, 1) for t in part)
    assert shard_topics(topics=TOPICS, shard=None, shards=1) == TOPICS


@pytest.mark.parametrize("case, partitions, per_shard, expected", [
    (1, 0, 10_000, 1),          # nothing read yet: one poll, as before shards
    (2, 10_000, 10_000, 1),     # at the limit: still one
    (3, 10_001, 10_000, 2),     # one partition over: two
    (4, 50_000, 10_000, 5),     # the fleet bench's cluster
    (5, 50_001, 10_000, 6),
    (6, 10_000_000, 10_000, 64),  # capped: a task and a health row per shard
    (7, 50_000, 0, 1),          # 0 turns sharding off
    (8, 50_000, -5, 1),
])
def test_shard_count(case, partitions, per_shard, expected):
    assert shard_count(partitions, per_shard) == expected, case


def test_source_names_and_labels():
    assert cluster_sources(7, 1) == ["cluster:7"]
    assert cluster_sources(7, 3) == ["cluster:7/1", "cluster:7/2", "cluster:7/3"]
    assert [source_parse(s) for s in ["cluster:7", "cluster:7/3"]] == [(7, None), (7, 3)]
    assert cluster_source(7, None) == "cluster:7"
    # The longest name fits SourceHealth.source (100 characters).
    assert len(cluster_source(2**63 - 1, 64)) <= 100
    assert shard_label("cluster prod (kafka-1:9092)", 2, 5) == "cluster prod (kafka-1:9092) part 2 of 5"
    assert shard_label("cluster prod (kafka-1:9092)", None, 1) == "cluster prod (kafka-1:9092)"
