"""The conformance corpus (issue #13): named real-world situations, each written through the
public clients into the running stack (Tansu, ZooKeeper, the HBase Thrift stand-in, files,
checkpoint directories), collected by the real collection code and read back through the API.

THE TABLE IS THE SPEC: one row = a name, the store kinds it runs on, how it is written and every
number the API must report per partition and per pipeline (committed, lag, state, lag in seconds
and its method, why a lag is absent, total lag, status and its reasons). Writers and checks are in
tests/corpus.py. A row that Tansu cannot produce enters at the watermark seam and says why
(`seam`).

Fields that the two other parts of #13 still change are asserted as main reports them now, with
a comment `# main now:` saying what changes when they land: lag in seconds from the record at
every group's position (today only the most lagging group's position per partition is read, so
the other groups' lagging partitions are "unknown" until the high watermark has moved), and
partition-level STALLED/STOPPED (no row here runs long enough for either).
"""
from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from collectors.cycle import collect_once
from dashboard import services
from dashboard.models import Pipeline, StoreProblem
from dashboard.roles import VIEWER
from pipeline.producer import ensure_topic, produce
from tests.corpus import KINDS, STORE_KIND, Expect, Part, Row, World, check_pipeline
from tests.factories import person

pytestmark = pytest.mark.django_db

OK, LAGGING, HIGH_OOR, MISSING = "ok", "lagging", "high out-of-range", "missing in store"
CAUGHT_UP, RECORD = "caught up", "record timestamp"
NO_SAMPLES = "unknown: not enough watermark samples yet"
NORMAL = ["consuming normally"]


def _topic(w: World, prefix: str, partitions: int, records: int) -> str:
    topic = w.unique_name(prefix)
    ensure_topic(w.bootstrap, topic, partitions)
    if records:
        produce(w.bootstrap, topic, partitions, records)  # round-robin: records / partitions each
    return topic


# --- 1. many groups on one topic at different positions ------------------------------------------


def many_groups(w: World) -> dict[str, Expect]:
    topic = _topic(w, "orders", 2, 40)  # 20 per partition
    g = {name: w.unique_name(name) for name in ("done", "near", "middle", "start")}
    w.commit(topic, g["done"], {0: 20, 1: 20})
    w.commit(topic, g["near"], {0: 19, 1: 20})
    w.commit(topic, g["middle"], {0: 10, 1: 5})
    w.commit(topic, g["start"], {0: 0, 1: 0})
    collect_once_clean()
    return {
        g["done"]: Expect({0: Part(20, 0, OK, CAUGHT_UP), 1: Part(20, 0, OK, CAUGHT_UP)}, 0, "OK", ["caught up"],
                          lag_seconds_method=CAUGHT_UP),
        # main now: only the most lagging group's position ("start") is read per partition, so
        # this group's lagging partition is unknown; with every group's position read it is
        # RECORD (and so is the pipeline's method).
        g["near"]: Expect({0: Part(19, 1, LAGGING, NO_SAMPLES), 1: Part(20, 0, OK, CAUGHT_UP)}, 1, "OK", NORMAL,
                          lag_seconds_method="unknown: partition 0 is 1 behind with no estimate yet"),
        g["middle"]: Expect({0: Part(10, 10, LAGGING, NO_SAMPLES), 1: Part(5, 15, LAGGING, NO_SAMPLES)}, 25, "OK", NORMAL,
                            lag_seconds_method="unknown: partition 0 is 10 behind with no estimate yet"),
        g["start"]: Expect({0: Part(0, 20, LAGGING, RECORD), 1: Part(0, 20, LAGGING, RECORD)}, 40, "OK", NORMAL,
                           lag_seconds_method=RECORD),
    }


# --- 2. an idle topic: records produced, then nothing ----------------------------------------------


def idle_topic(w: World) -> dict[str, Expect]:
    topic = _topic(w, "audit", 2, 8)  # 4 per partition, then the topic receives nothing
    g = {name: w.unique_name(name) for name in ("done", "behind", "further")}
    w.commit(topic, g["done"], {0: 4, 1: 4})
    w.commit(topic, g["behind"], {0: 3, 1: 4})
    w.commit(topic, g["further"], {0: 1, 1: 2})
    for _ in range(2):  # the high watermark stays flat over several cycles
        collect_once_clean()
        time.sleep(0.5)
    collect_once_clean()
    return {
        g["done"]: Expect({0: Part(4, 0, OK, CAUGHT_UP), 1: Part(4, 0, OK, CAUGHT_UP)}, 0, "OK", ["caught up"],
                          lag_seconds_method=CAUGHT_UP),
        # main now: "behind" is not the most lagging group, and a flat high watermark gives
        # interpolation nothing: unknown (issue #13 observation 3). With every group's position
        # read both are RECORD.
        g["behind"]: Expect({0: Part(3, 1, LAGGING, NO_SAMPLES), 1: Part(4, 0, OK, CAUGHT_UP)}, 1, "OK", NORMAL,
                            lag_seconds_method="unknown: partition 0 is 1 behind with no estimate yet"),
        g["further"]: Expect({0: Part(1, 3, LAGGING, RECORD), 1: Part(2, 2, LAGGING, RECORD)}, 5, "OK", NORMAL,
                             lag_seconds_method=RECORD),
    }


def collect_once_clean() -> None:
    summary = collect_once()
    assert summary.errors == [], summary.errors


ROWS = [
    Row("many groups on one topic at different positions", KINDS, many_groups),
    Row("an idle topic with lagging and caught-up groups", KINDS, idle_topic),
]


def _cases():
    for row in ROWS:
        for kind in row.kinds:
            marks = [row.xfail] if getattr(row, "xfail", None) else []
            yield pytest.param(row, kind, id=f"{row.name} [{kind}]", marks=marks)


@pytest.fixture
def viewer(client):
    client.force_login(person("corpus-viewer", VIEWER))
    return client


@pytest.mark.parametrize("row,kind", list(_cases()))
def test_situation(row: Row, kind: str, viewer, stack, tmp_path, unique_name):
    world = World(kind, stack, tmp_path, unique_name)
    cluster = services.cluster_get_or_create(name=unique_name("cluster"), bootstrap_servers=stack.kafka_bootstrap)
    store = services.store_get_or_create(name=unique_name("store"), kind=STORE_KIND[kind], url=world.url,
                                         cluster=cluster)
    try:
        expected = row.write(world)
        elapsed = world.elapsed_s()
        for group, expect in expected.items():
            pipeline = Pipeline.objects.get(store=store, group=group)
            detail = viewer.get(f"/api/v1/pipelines/{pipeline.pk}").json()
            partitions = viewer.get(f"/api/v1/pipelines/{pipeline.pk}/partitions").json()
            check_pipeline(detail, partitions, expect, elapsed)
    finally:
        world.close()
