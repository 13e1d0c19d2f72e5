"""Named test data built by hand against the real servers."""
from __future__ import annotations

from dataclasses import dataclass

from dashboard.accounts.tokens import api_token_issue, pipeline_token_issue
from dashboard.accounts.users import user_create_or_update
from dashboard.models import Cluster, Store
from dashboard.monitoring.services import (
    cluster_get_or_create,
    source_health_record,
    store_get_or_create,
    store_reading_record,
    watermarks_record,
)
from dashboard.rewinds.start_reports import start_report_record
from reference_job.producer import ensure_topic, produce
from streamoffsets.stores.hbase import HBaseOffsetStore
from streamoffsets.types import BatchOffsets
from tests.actors import actor


@dataclass
class Setup:
    cluster: Cluster
    store: Store
    hbase: HBaseOffsetStore
    topic: str


def hbase_store_setup(stack, unique_name, partitions: int = 3, records: int = 0) -> Setup:
    """A cluster on the test broker, an HBase store with its own table, and a fresh topic."""
    table = unique_name("offsets").replace("-", "_")
    url = f"hbase://{stack.hbase_host}:{stack.hbase_port}/{table}"
    hbase = HBaseOffsetStore.from_url(url)
    hbase.ensure_table()
    cluster = cluster_get_or_create(name=unique_name("cluster"), bootstrap_servers=stack.kafka_bootstrap)
    store = store_get_or_create(name=unique_name("store"), kind="hbase", url=url, cluster=cluster)
    topic = unique_name("orders")
    ensure_topic(stack.kafka_bootstrap, topic, partitions)
    if records:
        produce(stack.kafka_bootstrap, topic, partitions, records)
    return Setup(cluster, store, hbase, topic)


def save(setup: Setup, group: str, batch_time_ms: int, offsets: dict[int, int]) -> BatchOffsets:
    batch = BatchOffsets(setup.topic, group, batch_time_ms, offsets)
    setup.hbase.save_batch(batch)
    return batch


def offline_pipeline(
    unique_name, *, partitions: dict[int, tuple[int, int]], batches: list[tuple[int, dict[int, int]]],
    group: str = "etl", topic: str | None = None, sampled_at=None, store: Store | None = None,
):
    """A pipeline recorded through the collectors' services without any server: its store's
    batches (time ms, {partition: offset}), then one watermark poll `partitions` =
    {partition: (low, high)} at `sampled_at`, which samples and evaluates it."""
    from django.utils import timezone

    from dashboard.models import Pipeline
    from streamoffsets.kafka import WatermarkResult
    from streamoffsets.stores.reading import StoreReading
    from streamoffsets.types import PipelineKey, Watermarks

    if store is None:
        cluster = cluster_get_or_create(name=unique_name("cluster"), bootstrap_servers="127.0.0.1:1")
        store = store_get_or_create(name=unique_name("store"), kind="hbase",
                                             url="hbase://127.0.0.1:1/unused", cluster=cluster)
    topic = topic or unique_name("orders")
    key = PipelineKey(topic, group)
    store_reading_record(store=store, reading=StoreReading(
        pipelines=[key], batches={key: [BatchOffsets(topic, group, ms, offsets) for ms, offsets in batches]}))
    watermarks_record(
        cluster=store.cluster, sampled_at=sampled_at or timezone.now(),
        result=WatermarkResult(by_topic={topic: {p: Watermarks(p, lo, hi) for p, (lo, hi) in partitions.items()}}))
    return Pipeline.objects.select_related("store", "store__cluster").get(store=store, topic=topic, group=group)


def person(name: str, *roles: str, password: str | None = None):
    """A named user with the given roles (dashboard.accounts.roles), made as `manage.py create_user` makes them;
    no roles: a bare account (a logged-in user nobody gave a role)."""
    from django.contrib.auth.models import User

    if not roles:
        return User.objects.create_user(name, password=password)
    user, _ = user_create_or_update(username=name, roles=list(roles), password=password)
    return user


def writable_store_url(kind: str, stack, tmp_path, unique_name) -> str:
    """A fresh place to keep offsets in each writable store kind of the test stack."""
    return {
        "hbase": f"hbase://{stack.hbase_host}:{stack.hbase_port}/{unique_name('offsets').replace('-', '_')}",
        "zookeeper": f"zk://{stack.zookeeper_hosts}",
        "kafka": f"kafka://{stack.kafka_bootstrap}",
        "file": f"file://{tmp_path / 'offsets'}",
    }[kind]


def pipeline_row(name: str, *, topic: str | None = None, group: str = "billing", store_name: str | None = None):
    """A pipeline in the database only (no server behind it): for pages and exports built from
    bulk-created samples and batches."""
    from dashboard.models import Pipeline

    cluster = Cluster.objects.create(name=f"{name}-cluster", bootstrap_servers="127.0.0.1:9")
    store = Store.objects.create(name=store_name or f"{name}-store", kind="hbase", url=f"hbase://127.0.0.1:9/{name}",
                                 cluster=cluster)
    return Pipeline.objects.create(store=store, topic=topic or f"{name}-topic", group=group)


def samples_bulk(pipeline, *, start, step_s: float, count: int, highs, committed, batch_size: int = 2000) -> None:
    """`count` collection cycles from `start`, every `step_s`: a WatermarkSample of the topic and a
    LagSample of the pipeline per cycle, as the collectors write them (packed arrays);
    `highs(i)` and `committed(i)` give cycle i's values of partitions 0..n-1."""
    from datetime import timedelta

    from dashboard.models import LagSample, WatermarkSample
    from offsetwatch.lib.packing import pack
    from streamoffsets.evaluation import sample_lag

    marks, lags = [], []
    for i in range(count):
        at = start + timedelta(seconds=i * step_s)
        hs, cs = highs(i), committed(i)
        marks.append(WatermarkSample(cluster_id=pipeline.store.cluster_id, topic=pipeline.topic, sampled_at=at,
                                     partitions=b"", lows=pack([0] * len(hs)), highs=pack(hs)))
        lags.append(LagSample(pipeline=pipeline, sampled_at=at, partitions=b"", committed=pack(cs),
                              total_lag=sample_lag(dict(enumerate(cs)), dict(enumerate(hs)))))
        if len(marks) >= batch_size:
            WatermarkSample.objects.bulk_create(marks)
            LagSample.objects.bulk_create(lags)
            marks, lags = [], []
    WatermarkSample.objects.bulk_create(marks)
    LagSample.objects.bulk_create(lags)


REPLAY_T0 = 1_700_000_000_000


def approved_replay(stack, unique_name, tmp_path) -> dict:
    """A topic with 10 records per partition; the job's offset file holds {0: 10, 1: 10}; the
    dashboard knows two batches ({4, 4} then {10, 10}) and the watermarks; a rewind to the first
    one requested by olga and approved by amir; a pipeline token for the job."""
    from dashboard.rewinds.services import rewind_decide, rewind_request
    from streamoffsets.stores.offsetfile import OffsetFileStore

    topic, group = unique_name("orders"), "etl"
    ensure_topic(stack.kafka_bootstrap, topic, 2)
    produce(stack.kafka_bootstrap, topic, 2, 20)
    root = tmp_path / "offsets"
    OffsetFileStore(root).save_batch(BatchOffsets(topic, group, REPLAY_T0 + 10_000, {0: 10, 1: 10}))
    cluster = cluster_get_or_create(name=unique_name("cluster"), bootstrap_servers=stack.kafka_bootstrap)
    store = store_get_or_create(name=unique_name("file"), kind="file", url=f"file://{root}", cluster=cluster)
    pipeline = offline_pipeline(unique_name, partitions={0: (0, 10), 1: (0, 10)}, group=group, topic=topic, store=store,
                                batches=[(REPLAY_T0, {0: 4, 1: 4}), (REPLAY_T0 + 10_000, {0: 10, 1: 10})])
    rewind = rewind_request(pipeline=pipeline, user=actor("olga"), kind="batch",
                            spec={"batch_time_ms": REPLAY_T0}, reason="replay")
    rewind = rewind_decide(rewind=rewind, user=actor("amir"), approve=True)
    token = pipeline_token_issue(pipeline=pipeline, name="job")[1]
    return {"topic": topic, "group": group, "root": root, "rewind": rewind, "token": token, "pipeline": pipeline}


# --- the security suite's actors and world (tests/integration/test_security.py, tests/integration/test_fuzz.py) ---------

# Everyone who can knock: people by role, a staff user with a few admin permissions, an API token
# (acting as a viewer, as Grafana or a script would hold one) and a job's pipeline token, for its
# own pipeline and for another pipeline.
ACTORS = ("anonymous", "norole", "viewer", "operator", "approver", "staff", "superuser", "api_token",
          "pipeline_token", "other_pipeline_token")
# The admin permissions of the "staff" actor: read pipelines, read and change stores; nothing else.
STAFF_PERMISSIONS = ("view_pipeline", "view_store", "change_store")


@dataclass
class Actor:
    name: str
    user: object | None = None  # a session user (force_login), None for anonymous and tokens
    token: str | None = None  # sent as `Authorization: Bearer <token>`

    def client(self, *, enforce_csrf_checks: bool = False):
        from django.test import Client

        headers = {"HTTP_AUTHORIZATION": f"Bearer {self.token}"} if self.token else {}
        client = Client(enforce_csrf_checks=enforce_csrf_checks, **headers)
        if self.user is not None:
            client.force_login(self.user)
        return client


@dataclass
class SecurityWorld:
    pipeline: object  # the pipeline of "pipeline_token"
    other_pipeline: object  # the pipeline of "other_pipeline_token"
    rewind: object  # requested (store mode) by olga, not one of the actors: nobody acting decided it
    export_job: object  # the viewer's finished export, its file on disk
    actors: dict[str, Actor]
    incident: object = None  # the pipeline's closed incident: acknowledging it is a 409
    silence: object = None  # olga's active silence of the pipeline: cancelling it is a 302


def security_world(unique_name, tmp_path) -> SecurityWorld:
    """One of everything a route can be about, and every actor (ACTORS). No server needed."""
    from django.contrib.auth.models import Permission, User
    from django.utils import timezone

    from dashboard.models import ExportJob, Incident, StoreProblem
    from dashboard.rewinds.services import rewind_request

    pipeline = offline_pipeline(unique_name, partitions={0: (0, 10), 1: (0, 10)},
                                batches=[(REPLAY_T0, {0: 4, 1: 4}), (REPLAY_T0 + 10_000, {0: 9, 1: 8})])
    other = offline_pipeline(unique_name, partitions={0: (0, 5)}, batches=[(REPLAY_T0, {0: 2})])
    rewind = rewind_request(pipeline=pipeline, user=actor("olga"), kind="batch",
                            spec={"batch_time_ms": REPLAY_T0}, reason="replay", mode="store")
    viewer = actor("vera")
    staff = person(unique_name("staff"))
    staff.is_staff = True
    staff.save()
    staff.user_permissions.add(*Permission.objects.filter(codename__in=STAFF_PERMISSIONS))
    export_file = tmp_path / "export.csv"
    export_file.write_text("a,b\n1,2\n")
    export_job = ExportJob.objects.create(user=viewer, pipeline=pipeline, kind=ExportJob.Kind.BATCHES_CSV,
                                          status=ExportJob.Status.DONE, file_path=str(export_file),
                                          file_name="export.csv", finished_at=timezone.now())
    # A row for every admin page to show (change, delete, history views).
    start_report_record(pipeline=pipeline, report={"topic": pipeline.topic, "group": pipeline.group,
                                                            "offsets": {"0": 9, "1": 8}})
    incident = Incident.objects.create(pipeline=pipeline, opened_at=timezone.now(), closed_at=timezone.now(),
                                       worst_status=2, reasons=["test"])  # closed: the evaluation may have opened one already
    # Alerting's rows (dashboard/alerting/admin.py): a channel, a route, a silence, a notification.
    from datetime import timedelta

    from dashboard.models import Channel, Notification, Route, Silence

    channel = Channel.objects.create(name=unique_name("channel"), kind="webhook", url="json://hooks.example.com/ow")
    Route.objects.create(name=unique_name("route"), channel=channel)
    silence = Silence.objects.create(pipeline=pipeline, starts_at=timezone.now(), created_by=actor("olga"),
                                     ends_at=timezone.now() + timedelta(hours=1), reason="maintenance")
    Notification.objects.create(channel=channel, event="channel.test", title="t", body="b",
                                next_attempt_at=timezone.now(), created_at=timezone.now())
    StoreProblem.objects.create(store=pipeline.store, key="row-1", problem="test")
    from dashboard.monitoring import health as collector_health

    source_health_record(source=collector_health.BEAT_SOURCE, label=collector_health.BEAT_LABEL,
                                  started_at=timezone.now(), duration_ms=0)
    from axes.models import AccessAttempt, AccessFailureLog  # login throttling's rows (dashboard/accounts/lockout.py)

    AccessAttempt.objects.create(username="mallory", ip_address="198.51.100.9", user_agent="t", failures_since_start=1)
    AccessFailureLog.objects.create(username="mallory", ip_address="198.51.100.9", user_agent="t")
    actors = {
        "anonymous": Actor("anonymous"),
        "norole": Actor("norole", actor("dave")),
        "viewer": Actor("viewer", viewer),
        "operator": Actor("operator", actor("otto")),  # not olga, who requested the rewind
        "approver": Actor("approver", actor("amir")),
        "staff": Actor("staff", staff),
        "superuser": Actor("superuser", User.objects.create_superuser(unique_name("root"), password=None)),
        "api_token": Actor("api_token", token=api_token_issue(user=viewer, name="grafana")[1]),
        "pipeline_token": Actor("pipeline_token", token=pipeline_token_issue(pipeline=pipeline, name="job")[1]),
        "other_pipeline_token": Actor("other_pipeline_token",
                                      token=pipeline_token_issue(pipeline=other, name="job")[1]),
    }
    return SecurityWorld(pipeline, other, rewind, export_job, actors, incident, silence)
