"""When each partition was last written (dashboard.monitoring.partition_writes), on the real
Redis: one hash per store, a store poll replaces only its readings' pipelines, and a Redis that
is away costs the refinement, never the poll."""
from __future__ import annotations

import logging

import pytest

from dashboard.heavy import redis_client
from dashboard.monitoring import partition_writes


@pytest.fixture
def stores():
    a, b = 10**9 + 1, 10**9 + 2  # ids no test store has
    keys = [f"{partition_writes.KEY_PREFIX}{s}" for s in (a, b)]
    redis_client().delete(*keys)
    yield a, b
    redis_client().delete(*keys)


def test_a_poll_replaces_its_pipelines_times_and_leaves_the_others(stores):
    a, b = stores
    partition_writes.record(a, {1: {0: 1_000, 1: 2_000}, 2: {0: 7_000}})
    partition_writes.record(b, {3: {5: 9_000}})
    assert partition_writes.read([(1, a), (2, a), (3, b), (4, b)]) == {1: {0: 1_000, 1: 2_000}, 2: {0: 7_000},
                                                                      3: {5: 9_000}}
    # The next reading of store a: pipeline 1 no longer says (its old times go), 2 is not in it.
    partition_writes.record(a, {1: None})
    assert partition_writes.read([(1, a), (2, a), (3, b)]) == {2: {0: 7_000}, 3: {5: 9_000}}
    partition_writes.record(a, {2: {0: 8_000}})
    assert partition_writes.read([(2, a)]) == {2: {0: 8_000}}
    assert 0 < redis_client().ttl(f"{partition_writes.KEY_PREFIX}{a}") <= partition_writes.TTL_S
    assert partition_writes.read([]) == {}


def test_a_redis_that_is_away_costs_the_times_not_the_poll(stores, settings, caplog):
    a, _ = stores
    partition_writes.record(a, {1: {0: 1_000}})
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens there
    with caplog.at_level(logging.WARNING, logger=partition_writes.__name__):
        partition_writes.record(a, {1: {0: 2_000}})  # logged, not raised
        assert partition_writes.read([(1, a)]) == {}
    assert "not recorded" in caplog.text and "not read" in caplog.text
