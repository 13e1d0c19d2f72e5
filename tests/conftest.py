"""Session-wide real servers for the tests: one local stack and one SparkSession per run; the
cast of people (tests/actors.py) as fixtures; the `unit` mark.

The tests are laid out by what they need: tests/unit/ (no server: `pytest -m unit` or
`pytest tests/unit`), tests/integration/ (PostgreSQL, Redis, the local stack, Spark, the deployed
processes), tests/e2e/ (a browser against the live server). Collection fails if a test in
tests/unit/ needs a server.

Servers start on free loopback ports under a temporary run directory. Set
`HBASE_THRIFT_URL=host:port` to run every HBase test against a real HBase Thrift server
instead of the stand-in.
"""
from __future__ import annotations

import os
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from devstack.components import LOOPBACK, Stack, StackPorts, free_port
from tests.actors import actor

pytest_plugins = ["tests.peers.fixtures"]  # the notification services' local peers


@dataclass(frozen=True)
class RunningStack:
    kafka_bootstrap: str
    hbase_host: str
    hbase_port: int
    zookeeper_hosts: str
    run_dir: Path
    real_hbase: bool


def _external_hbase() -> tuple[str, int] | None:
    url = os.environ.get("HBASE_THRIFT_URL", "").strip()
    if not url:
        return None
    url = url.removeprefix("hbase://").split("/", 1)[0]
    host, _, port = url.partition(":")
    return host, int(port or 9090)


@pytest.fixture(scope="session")
def stack(tmp_path_factory) -> RunningStack:
    run_dir = tmp_path_factory.mktemp("stack")
    ports = StackPorts(kafka=free_port(), hbase=free_port(), zookeeper=free_port(), redis=0)
    local = Stack(run_dir, ports, with_redis=False)  # tests use REDIS_URL's server
    external = _external_hbase()
    lines: list[str] = []
    components = [c for c in local.components() if not (external and c.name == "hbase")]
    local.log_dir.mkdir(parents=True, exist_ok=True)
    local.pid_dir.mkdir(parents=True, exist_ok=True)
    try:
        for comp in components:
            local.start_component(comp, progress=lines.append)
        hbase_host, hbase_port = external or (LOOPBACK, ports.hbase)
        yield RunningStack(
            kafka_bootstrap=f"{LOOPBACK}:{ports.kafka}",
            hbase_host=hbase_host,
            hbase_port=hbase_port,
            zookeeper_hosts=f"{LOOPBACK}:{ports.zookeeper}",
            run_dir=run_dir,
            real_hbase=external is not None,
        )
    finally:
        for comp in reversed(components):
            local.stop_component(comp.name)
        sys.stderr.write("\n".join(lines) + "\n")


@pytest.fixture
def unique_name():
    """A fresh name per test so tests sharing one server never see each other's data."""
    def make(prefix: str = "t") -> str:
        return f"{prefix}-{uuid.uuid4().hex[:10]}"
    return make


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    """One local SparkSession for the whole run (starting one costs ~5 s and ~1 GiB)."""
    from reference_job.spark_session import build_spark_session

    session = build_spark_session("offset-watch-tests", tmp_path_factory.mktemp("spark"))
    yield session
    session.stop()


@pytest.fixture
def collectors_ticking(db):
    """The collectors as if running: beat's collect_all just ran on a worker (its heartbeat row),
    and no stale "beat sent" mark of an earlier test is left in Redis."""
    import redis
    from django.conf import settings
    from django.utils import timezone

    from dashboard.monitoring import health as collector_health
    from dashboard.monitoring.redis_keys import BEAT_SENT_KEY
    from dashboard.monitoring.services import source_health_record

    try:
        redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2).delete(BEAT_SENT_KEY)
    except redis.exceptions.RedisError:
        pass  # a test that points REDIS_URL at a dead server: nothing to clear
    return source_health_record(source=collector_health.BEAT_SOURCE, label=collector_health.BEAT_LABEL,
                                         started_at=timezone.now(), duration_ms=0)


@pytest.fixture(autouse=True)
def _fresh_chart_cache_and_heavy_slots(request):
    """Database tests start with no cached chart and no heavy-request slot held: both live in
    Redis, outside the test's transaction, and primary keys repeat from one run to the next."""
    if "db" not in request.fixturenames and request.node.get_closest_marker("django_db") is None:
        yield
        return
    import redis

    from dashboard import heavy
    from dashboard.charts import cache as chart_cache

    def reset() -> None:
        try:
            chart_cache.reset()
            heavy.reset()
        except redis.exceptions.RedisError:
            pass  # a test that points REDIS_URL at a dead server: nothing to clear
    reset()
    yield
    reset()


# --- the cast (tests/actors.py): each named person, made when a test asks for them ---------------

@pytest.fixture
def vera(db):
    """The viewer."""
    return actor("vera")


@pytest.fixture
def vera_logged_in(vera, client):
    """The viewer, with the test client logged in as her."""
    client.force_login(vera)
    return vera


@pytest.fixture
def vera_client(vera_logged_in, client):
    """The test client, logged in as the viewer."""
    return client


@pytest.fixture
def erin(db):
    """A second viewer."""
    return actor("erin")


@pytest.fixture
def olga(db):
    """The operator (requests rewinds)."""
    return actor("olga")


@pytest.fixture
def otto(db):
    """A second operator."""
    return actor("otto")


@pytest.fixture
def amir(db):
    """The approver (decides rewinds)."""
    return actor("amir")


@pytest.fixture
def sam(db):
    """An operator who is also an approver."""
    return actor("sam")


@pytest.fixture
def dave(db):
    """Logged in with no role."""
    return actor("dave")


@pytest.fixture
def prometheus(db):
    """The viewer account a scraper's API token belongs to."""
    return actor("prometheus")


# --- the fast set: `pytest -m unit` runs the tests that need no server, in seconds --------------
# A test is "unit" unless it asks for a server: a database (the django_db mark or a db fixture),
# the local stack, a live or browser server, Spark, the deployed processes, or the mark `server`
# (for tests that start or reach a server by other means, e.g. Redis through the code under test).
_SERVER_FIXTURES = {"db", "transactional_db", "django_db_reset_sequences", "django_db_serialized_rollback",
                    "live_server", "client", "admin_client", "stack", "spark", "browser", "page",
                    "collectors_ticking"}
_SERVER_MARKS = ("django_db", "spark", "deployed", "server")


_UNIT_DIR = Path(__file__).resolve().parent / "unit"


def pytest_collection_modifyitems(config, items):
    misplaced = []
    for item in items:
        if _SERVER_FIXTURES.isdisjoint(getattr(item, "fixturenames", ())) and not any(
                item.get_closest_marker(m) for m in _SERVER_MARKS):
            item.add_marker(pytest.mark.unit)
        elif _UNIT_DIR in item.path.parents:
            misplaced.append(item.nodeid)
    if misplaced:  # tests/unit/ must run without servers: move these to tests/integration/
        raise pytest.UsageError("tests in tests/unit/ that need a server: " + ", ".join(misplaced))
