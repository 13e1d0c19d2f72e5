"""What the collectors record and the pages show.

Over 400 lines because the models stay in the one module Django and the migrations know them by
(issue #14 keeps models and migrations unchanged); each area's code lives in its own package. The
alerting models are here too: in dashboard/alerting/ they would make it and this module import
each other (import-linter's no-cycle contract)."""
from __future__ import annotations

from datetime import datetime, timezone
from fnmatch import fnmatchcase

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models.functions import MD5

from dashboard.fields import PackedIntsField, PartitionRowsField, RowsJSONField
from offsetwatch.lib.packing import unpack_map, unpack_watermarks
from streamoffsets.evaluation import Status
from streamoffsets.stores.registry import store_kind_of_url
from streamoffsets.urls import validate_bootstrap_servers, validate_store_url


class Cluster(models.Model):
    """A Kafka cluster whose watermarks are polled."""

    name = models.CharField(max_length=200, unique=True)
    bootstrap_servers = models.CharField(max_length=1000)
    # Its poll is split in this many shards of its topics (dashboard.monitoring.shards): set by
    # the fan-out only, so the fan-out, the polls and the pages read one number (not editable).
    shards = models.PositiveSmallIntegerField(default=1, editable=False)

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        # host:port list, no credentials (they go in OFFSETWATCH_KAFKA_CLIENT_CONFIGS).
        try:
            validate_bootstrap_servers(self.bootstrap_servers)
        except ValueError as exc:
            raise ValidationError({"bootstrap_servers": str(exc)}) from None


class Store(models.Model):
    """An offset store (e.g. one HBase table) holding the offsets of jobs reading `cluster`."""

    class Kind(models.TextChoices):
        HBASE = "hbase", "HBase (Cloudera layout)"
        ZOOKEEPER = "zookeeper", "ZooKeeper (/consumers layout)"
        KAFKA = "kafka", "Kafka consumer-group offsets"
        FILE = "file", "Offset file (<root>/<group>/<topic>/gtoffset)"
        CHECKPOINT = "checkpoint", "Spark Structured Streaming checkpoint (read-only)"

    name = models.CharField(max_length=200, unique=True)
    kind = models.CharField(max_length=20, choices=Kind.choices)
    url = models.CharField(
        max_length=1000,
        help_text="hbase://host:9090/table, zk://host:2181/chroot, kafka://bootstrap:9092, file:///root "
        "or checkpoint:///path",
    )
    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="stores")
    enabled = models.BooleanField(default=True)
    # When the store was last listed for new pipelines (STORE_DISCOVERY_INTERVAL_S apart).
    discovered_at = models.DateTimeField(null=True, blank=True, editable=False)

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        try:
            kind = store_kind_of_url(self.url)
        except ValueError as exc:
            raise ValidationError({"url": str(exc)}) from None
        if self.kind and kind != self.kind:
            raise ValidationError({"url": f"a {self.get_kind_display()} store needs a {self.kind} URL, not {kind}"})
        # By kind, without connecting: host and port, HBase table name, local paths only under
        # OFFSETWATCH_FILE_STORE_ROOTS (the dashboard host's disk is not for anyone to list).
        try:
            validate_store_url(self.url, settings.FILE_STORE_ROOTS)
        except ValueError as exc:
            raise ValidationError({"url": str(exc)}) from None


class ClusterTopic(models.Model):
    """A tracked topic's partition count, as a poll of its cluster last read it: what a cluster's
    shard count is derived from (dashboard.monitoring.shards). Its own table, not a field of
    Cluster: pages join the cluster of every pipeline they show, and need none of this."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="topic_counts")
    topic = models.CharField(max_length=255)
    partitions = models.PositiveIntegerField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["cluster", "topic"], name="cluster_topic_unique")]


class SourceHealth(models.Model):
    """The last poll of one source (a store or a cluster's watermarks): success or error and when."""

    # "store:<id>", "cluster:<id>", or "cluster:<id>/<shard>" for a cluster polled in shards
    source = models.CharField(max_length=100, unique=True)
    label = models.CharField(max_length=300)
    last_attempt_at = models.DateTimeField(null=True)
    last_success_at = models.DateTimeField(null=True)
    last_error = models.TextField(blank=True)
    last_error_at = models.DateTimeField(null=True)
    # Who the last error is on: "source" (the server failed or refused) or "collector" (the poll
    # was cut by the worker's own time limit: the source may be fine, the worker was too slow).
    last_error_by = models.CharField(max_length=20, blank=True, default="")
    consecutive_failures = models.PositiveIntegerField(default=0)
    last_duration_ms = models.PositiveIntegerField(null=True)
    # A successful poll that found something to tell (e.g. a tracked topic no longer exists).
    warning = models.TextField(blank=True)

    @property
    def is_unreachable(self) -> bool:
        return self.consecutive_failures > 0


class Pipeline(models.Model):
    """One streaming job's position in one store: (store, topic, group)."""

    store = models.ForeignKey(Store, on_delete=models.CASCADE, related_name="pipelines")
    topic = models.CharField(max_length=255)
    group = models.CharField(max_length=1000)
    first_seen_at = models.DateTimeField(auto_now_add=True)
    # Denormalised from the newest Batch so the overview sorts without a subquery.
    last_batch_ms = models.BigIntegerField(null=True)
    # The newest batches' times (at most RECENT_BATCHES), oldest first: the pipeline's own cadence
    # for the status rules, kept here so a cycle needs no query per pipeline.
    recent_batch_ms = models.JSONField(default=list)

    # True while the store's retained history is still being read, a page per cycle.
    history_importing = models.BooleanField(default=False)
    # The team that owns the job: shown on the pages, matched by alert routes and silences.
    owner = models.CharField(max_length=200, blank=True, default="")
    # A job known retired (set by an operator): archived once silent long enough (see archived_at).
    retired = models.BooleanField(default=False)
    # Set when the job has had no batch for OFFSETWATCH_ARCHIVE_AFTER and its topic is gone or it
    # is retired: no status above OK, no incident, hidden from the default overview. Cleared by
    # any new batch.
    archived_at = models.DateTimeField(null=True, blank=True)

    RECENT_BATCHES = 21

    class Meta:
        # On digests of the names: a btree entry holds at most ~2700 bytes, and a group id of
        # 1000 characters outside ASCII is more than that (dashboard.monitoring.storable sets the limits).
        constraints = [models.UniqueConstraint(
            models.F("store"), MD5("topic"), MD5("group"), name="pipeline_unique_on_name_hashes",
        )]

    def __str__(self) -> str:
        return f"{self.topic} / {self.group}"

    @property
    def last_batch_time(self) -> datetime | None:
        if self.last_batch_ms is None:
            return None
        return datetime.fromtimestamp(self.last_batch_ms / 1000, tz=timezone.utc)


class Batch(models.Model):
    """One batch's saved offsets: partition (as text) -> next offset to read.

    For stores without history (ZooKeeper, Kafka groups, offset files) a Batch is a sample whose
    offsets differed from the previous one.
    """

    pipeline = models.ForeignKey(Pipeline, on_delete=models.CASCADE, related_name="batches")
    batch_time_ms = models.BigIntegerField()
    offsets = models.JSONField()
    # Spark checkpoints number their batches; a planned batch has offsets/N but no commits/N yet.
    batch_id = models.BigIntegerField(null=True)
    committed = models.BooleanField(default=True)
    # Records in the batch = sum over partitions of (offset - previous batch's offset);
    # null for the first batch seen, whose start is unknown.
    records = models.BigIntegerField(null=True)
    collected_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["pipeline", "batch_time_ms"], name="batch_unique")]
        indexes = [models.Index(fields=["pipeline", "-batch_time_ms"], name="batch_pipeline_time")]


class WatermarkSample(models.Model):
    """A topic's low/high watermarks at one collection cycle: one row for all its partitions,
    numbers packed as int64 arrays (offsetwatch.lib.packing) to keep history cheap."""

    # No surrogate id: the key is also the only index the readers need (a topic's history in time
    # order). On PostgreSQL the table is partitioned by day on sampled_at (migration 0021,
    # dashboard.monitoring.sample_partitions).
    pk = models.CompositePrimaryKey("cluster", "topic", "sampled_at")
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="watermark_samples")
    topic = models.CharField(max_length=255)
    sampled_at = models.DateTimeField()
    partitions = PackedIntsField()  # empty when the partitions are 0..n-1
    lows = PackedIntsField()
    highs = PackedIntsField()

    def watermarks(self) -> dict[int, tuple[int, int]]:
        return unpack_watermarks(self.partitions, self.lows, self.highs)


class LagSample(models.Model):
    """A pipeline at one collection cycle: its committed offsets (packed) and total lag; the
    watermarks of the same cycle are in the WatermarkSample with the same `sampled_at`."""

    pk = models.CompositePrimaryKey("pipeline", "sampled_at")  # as WatermarkSample's: the read index
    pipeline = models.ForeignKey(Pipeline, on_delete=models.CASCADE, related_name="lag_samples")
    sampled_at = models.DateTimeField()
    total_lag = models.BigIntegerField()
    partitions = PackedIntsField()  # empty when the partitions are 0..n-1
    committed = PackedIntsField()
    # The newest batch the store held at this sample: the status rules need its age over time.
    last_batch_ms = models.BigIntegerField(null=True)
    # Some committed offset lower than in the pipeline's sample before it (evaluation.went_back):
    # stored so the window rule "went backwards" compares only the newest pair each cycle.
    # None: not known (samples from before this column, or none before it in the window).
    went_back = models.BooleanField(null=True)

    def committed_offsets(self) -> dict[int, int]:
        return {p: c for p, c in unpack_map(self.partitions, self.committed).items() if c is not None}


class StoreProblem(models.Model):
    """A stored record that could not be read (e.g. a malformed HBase row), kept visible."""

    store = models.ForeignKey(Store, on_delete=models.CASCADE, related_name="problems")
    key = models.CharField(max_length=500)
    problem = models.CharField(max_length=1000)
    first_seen_at = models.DateTimeField(auto_now_add=True)
    last_seen_at = models.DateTimeField(auto_now=True)
    occurrences = models.PositiveIntegerField(default=1)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["store", "key", "problem"], name="problem_unique")]


class PipelineEvaluation(models.Model):
    """The newest judgement of a pipeline (one row per pipeline, replaced every cycle)."""

    pipeline = models.OneToOneField(Pipeline, on_delete=models.CASCADE, related_name="evaluation")
    evaluated_at = models.DateTimeField()
    status = models.PositiveSmallIntegerField()  # streamoffsets.evaluation.Status
    reasons = RowsJSONField(default=list)
    # [{"partition", "committed", "low", "high", "lag", "state", "messages_lost", "lag_seconds",
    #   "lag_method", "retention_margin", "retention_seconds_left"}]
    partitions = PartitionRowsField(default=list)  # stored with the keys once (json_rows)
    total_lag = models.BigIntegerField(null=True)
    # The largest per-partition lag in seconds; null when unknown (never 0 for unknown).
    lag_seconds = models.FloatField(null=True)
    lag_seconds_method = models.CharField(max_length=100, blank=True)
    batch_interval_s = models.FloatField(null=True)
    # Seconds until the first partition loses unprocessed data to retention; null: no risk seen.
    retention_seconds_left = models.FloatField(null=True)
    # [[minute start (epoch s), largest total lag in that minute], ...] for the last hour, oldest
    # first: the overview's sparkline, carried from one evaluation to the next (offsetwatch.lib.sparkline).
    sparkline = RowsJSONField(default=list)
    # The same, drawn once when evaluated (SVG polyline points) with its largest value: the
    # overview prints them instead of decoding and scaling a thousand series per render.
    sparkline_svg = models.TextField(blank=True, default="")
    sparkline_max = models.BigIntegerField(null=True)
    # The partition with the largest lag (null when none lags): kept as columns so the overview of
    # a thousand pipelines never decodes every evaluation's partitions.
    worst_partition = models.IntegerField(null=True)
    worst_partition_lag = models.BigIntegerField(null=True)

    @property
    def status_name(self) -> str:
        return Status(self.status).name


class ChartRollup(models.Model):
    """A pipeline's lag over one minute or one hour (its bucket), written at each cluster poll from
    the evaluation's numbers (dashboard.charts.rollups): the largest seen in the bucket, so a
    spike inside a minute survives into the hour. Charts over long ranges read these instead of
    walking every sample."""

    MINUTE, HOUR = 60, 3600

    pipeline = models.ForeignKey(Pipeline, on_delete=models.CASCADE, related_name="chart_rollups")
    resolution_s = models.PositiveIntegerField()  # MINUTE or HOUR
    bucket = models.DateTimeField()  # the bucket's start (UTC, a whole minute or hour)
    # Partition ids (empty when 0..n-1) and, per partition, the largest lag in messages and in
    # seconds (offsetwatch.lib.rollup_packing: its own format, compressed).
    partitions = models.BinaryField(default=b"")
    lags = models.BinaryField(default=b"")
    # The largest total lag, and the largest lag in seconds of the pipeline (its most-behind
    # partition's), in the bucket; null when never known there.
    total_lag = models.BigIntegerField(null=True)
    lag_seconds = models.FloatField(null=True)
    samples = models.PositiveIntegerField(default=0)  # evaluations merged into the bucket

    class Meta:
        # Also the index of the charts' reads (pipeline, resolution, range of buckets).
        constraints = [models.UniqueConstraint(fields=["pipeline", "resolution_s", "bucket"], name="rollup_unique")]
        # Pruning drops buckets by age for each resolution.
        indexes = [models.Index(fields=["resolution_s", "bucket"], name="rollup_resolution_bucket")]


class Incident(models.Model):
    """A stretch of time a pipeline's status was above OK (`partition` None), or one partition's
    own status (STALLED or STOPPED by the partition rules) while its neighbours moved."""

    pipeline = models.ForeignKey(Pipeline, on_delete=models.CASCADE, related_name="incidents")
    partition = models.IntegerField(null=True, blank=True)
    opened_at = models.DateTimeField()
    closed_at = models.DateTimeField(null=True)
    worst_status = models.PositiveSmallIntegerField()
    reasons = models.JSONField(default=list)
    # The status at the newest evaluation (OK while it is held before closing), and for how many
    # evaluations in a row it has been OK: it closes after OFFSETWATCH_RESOLVE_AFTER_SAMPLES, and a
    # relapse before that is the same incident (no flapping).
    status = models.PositiveSmallIntegerField(null=True)
    ok_samples = models.PositiveIntegerField(default=0)
    # The worst status notified so far and when the last notification was decided (re-notify).
    notified_status = models.PositiveSmallIntegerField(null=True)
    notified_at = models.DateTimeField(null=True)
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    acknowledged_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
                                        related_name="+")
    ack_note = models.TextField(blank=True)

    class Meta:
        indexes = [models.Index(fields=["pipeline", "-opened_at"], name="incident_pipeline_time")]
        constraints = [
            # At most one open incident per pipeline, and one per partition of it (two partial
            # constraints: NULLs are distinct in a unique index, so one would not hold the first).
            models.UniqueConstraint(fields=["pipeline"], condition=models.Q(closed_at=None, partition=None),
                                    name="one_open_incident"),
            models.UniqueConstraint(fields=["pipeline", "partition"],
                                    condition=models.Q(closed_at=None, partition__isnull=False),
                                    name="one_open_partition_incident"),
        ]

    @property
    def worst_status_name(self) -> str:
        return Status(self.worst_status).name


class PipelineToken(models.Model):
    """A machine credential for one pipeline's job: stored hashed, shown once, revocable."""

    pipeline = models.ForeignKey(Pipeline, on_delete=models.CASCADE, related_name="tokens")
    name = models.CharField(max_length=200)
    # sha256 of the token; the token itself is never stored.
    token_hash = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(max_length=12)  # shown in lists so people can tell tokens apart
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.name})"


class ApiToken(models.Model):
    """A machine credential for the JSON API and /metrics: acts with its user's roles; stored
    hashed (like PipelineToken), shown once, revocable."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=200)
    # sha256 of the token; the token itself is never stored.
    token_hash = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(max_length=12)  # shown in lists so people can tell tokens apart
    created_at = models.DateTimeField(auto_now_add=True)
    # Updated at most once a minute (services.api_token_user): a scrape every 15 s must not
    # turn every read into a write.
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.name}, {self.user})"


class StartReport(models.Model):
    """Where a job decided to start (streamoffsets.restart's report), sent by the job itself."""

    pipeline = models.ForeignKey(Pipeline, on_delete=models.CASCADE, related_name="start_reports")
    received_at = models.DateTimeField(auto_now_add=True)
    report = models.JSONField()
    first_start = models.BooleanField(default=False)
    clamped_partitions = models.PositiveIntegerField(default=0)
    messages_lost = models.BigIntegerField(default=0)

    class Meta:
        indexes = [models.Index(fields=["pipeline", "-received_at"], name="start_pipeline_time")]


class ExportJob(models.Model):
    """An export too large to stream in a request, written to a file by a Celery worker."""

    class Kind(models.TextChoices):
        BATCHES_CSV = "batches_csv", "per-batch history (CSV)"
        CHART_CSV = "chart_csv", "chart data (CSV)"

    class Status(models.TextChoices):
        QUEUED = "queued", "queued"
        RUNNING = "running", "running"
        DONE = "done", "done"
        FAILED = "failed", "failed"

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="export_jobs")
    pipeline = models.ForeignKey(Pipeline, on_delete=models.CASCADE, related_name="export_jobs")
    kind = models.CharField(max_length=20, choices=Kind.choices)
    # What to export, frozen when asked: {"since", "until" (ISO, UTC), "preset", "kind", "unit"}.
    params = models.JSONField(default=dict)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED)
    rows_done = models.BigIntegerField(default=0)
    rows_total = models.BigIntegerField(null=True)
    file_path = models.CharField(max_length=1000, blank=True)  # under settings.EXPORT_DIR, set when done
    file_name = models.CharField(max_length=300, blank=True)  # the download's name
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True)
    finished_at = models.DateTimeField(null=True)

    class Meta:
        indexes = [models.Index(fields=["user", "-created_at"], name="export_user_time")]

    @property
    def percent(self) -> int | None:
        if not self.rows_total:
            return 100 if self.status == self.Status.DONE else None
        return min(100, int(100 * self.rows_done / self.rows_total))


class AuditEvent(models.Model):
    """One entry of the append-only, hash-chained audit log (dashboard.audit.services).

    No foreign keys on purpose: deleting a user or a pipeline must never touch the log. Rows are
    only inserted (dashboard.audit.services.audit_append); PostgreSQL refuses UPDATE and DELETE on this
    table (a trigger), and each row's hash covers the previous row's, so an edit made behind the
    application's back is found by `manage.py verify_audit`.
    """

    at = models.DateTimeField()
    actor = models.CharField(max_length=300)  # "alice", "pipeline token owp_abc… (payments/etl)", "system"
    actor_user_id = models.BigIntegerField(null=True)
    remote_addr = models.CharField(max_length=100, blank=True)
    action = models.CharField(max_length=100)  # "rewind.requested", "store.changed", "token.revoked", ...
    subject = models.CharField(max_length=500)  # what it is about, in words
    pipeline_id = models.BigIntegerField(null=True)
    pipeline_label = models.CharField(max_length=1300, blank=True)  # "topic / group (store)", kept after deletion
    before = models.JSONField(null=True)  # e.g. offsets per partition before
    after = models.JSONField(null=True)
    details = models.JSONField(default=dict)
    prev_hash = models.CharField(max_length=64)
    hash = models.CharField(max_length=64, unique=True)

    class Meta:
        indexes = [
            models.Index(fields=["pipeline_id", "-id"], name="audit_pipeline"),
            models.Index(fields=["actor", "-id"], name="audit_actor"),
        ]


class RewindRequest(models.Model):
    """A rewind of one pipeline: requested by an operator, approved by someone else, claimed and
    applied by the job on restart (or written into the store), then verified from the data.

    Never deleted (PROTECT): with the audit log it is the record of what was replayed and why.
    """

    class Status(models.TextChoices):
        REQUESTED = "requested"
        APPROVED = "approved"
        REJECTED = "rejected"
        EXPIRED = "expired"
        CANCELLED = "cancelled"
        CLAIMED = "claimed"
        APPLIED = "applied"
        VERIFIED = "verified"
        FAILED = "failed"

    OPEN = (Status.REQUESTED, Status.APPROVED, Status.CLAIMED, Status.APPLIED)

    class Mode(models.TextChoices):
        JOB = "job", "the job applies it when it restarts (job library)"
        STORE = "store", "written into the store while the job is stopped"

    pipeline = models.ForeignKey(Pipeline, on_delete=models.PROTECT, related_name="rewinds")
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.REQUESTED)
    mode = models.CharField(max_length=10, choices=Mode.choices, default=Mode.JOB)
    target_kind = models.CharField(max_length=20)  # streamoffsets.rewind.KINDS
    target_spec = models.JSONField(default=dict)  # what was asked: {"batch_time_ms": ...}, {"shift": -100}, ...
    target_offsets = models.JSONField()  # partition (text) -> offset
    before_offsets = models.JSONField()  # the committed offsets when requested
    preview = models.JSONField()  # streamoffsets.rewind.Preview.as_dict() when requested
    reason = models.TextField()
    ticket_url = models.URLField(max_length=1000, blank=True)
    requested_by = models.ForeignKey("auth.User", on_delete=models.PROTECT, related_name="+")
    requested_at = models.DateTimeField()
    decided_by = models.ForeignKey("auth.User", on_delete=models.PROTECT, related_name="+", null=True)
    decided_at = models.DateTimeField(null=True)
    decision_comment = models.TextField(blank=True)
    # Until approval: the approval deadline; once approved: the deadline for a job to claim it.
    expires_at = models.DateTimeField()
    claimed_at = models.DateTimeField(null=True)
    claimed_by = models.CharField(max_length=300, blank=True)  # the job instance that won the claim
    applied_at = models.DateTimeField(null=True)
    applied_offsets = models.JSONField(null=True)  # where the job says it started
    # The store batch that marks the start (the target written by the job or the dashboard).
    marker_batch_ms = models.BigIntegerField(null=True)
    finished_at = models.DateTimeField(null=True)
    outcome = models.TextField(blank=True)  # verification or failure in words

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["pipeline"], condition=models.Q(status__in=["requested", "approved", "claimed", "applied"]),
                name="one_open_rewind",
            )
        ]
        indexes = [models.Index(fields=["pipeline", "-requested_at"], name="rewind_pipeline_time")]

    @property
    def is_open(self) -> bool:
        return self.status in self.OPEN

    @property
    def target_text(self) -> str:
        """The target as people say it: "the batch of 2026-11-22 13:45:01.123 UTC", "shift by -500"."""
        spec = self.target_spec or {}

        def when(ms) -> str:
            return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"

        if self.target_kind == "batch" and isinstance(spec.get("batch_time_ms"), int):
            return f"the batch of {when(spec['batch_time_ms'])}"
        if self.target_kind == "time" and isinstance(spec.get("time_ms"), int):
            if spec.get("source") == "broker":
                return f"the first records at or after {when(spec['time_ms'])} (broker's timestamp index)"
            return f"the newest batch at or before {when(spec['time_ms'])}"
        if self.target_kind == "shift":
            return f"shift every partition by {spec.get('shift'):+,} messages"
        if self.target_kind == "offsets":
            return "explicit offsets"
        return self.target_kind


# --- on-call alerting (issue #15): where notifications go (Channel), which pipelines and statuses
# go where (Route), maintenance windows (Silence), and every notification to deliver
# (Notification, the outbox: written in the transaction that decided it, delivered after,
# retried until sent). The code is in dashboard/alerting/.


class Channel(models.Model):
    """One place notifications go, as an apprise URL (docs/alerting.md lists the kinds). The URL
    carries secrets (webhook tokens, routing keys, passwords): it is masked wherever shown."""

    class Kind(models.TextChoices):
        SLACK = "slack", "Slack"
        MSTEAMS = "msteams", "Microsoft Teams"
        PAGERDUTY = "pagerduty", "PagerDuty"
        OPSGENIE = "opsgenie", "Opsgenie"
        DINGTALK = "dingtalk", "DingTalk"
        WECOM = "wecom", "WeCom"
        FEISHU = "feishu", "Feishu / Lark"
        EMAIL = "email", "Email"
        WEBHOOK = "webhook", "JSON webhook"

    name = models.CharField(max_length=200, unique=True)
    kind = models.CharField(max_length=20, choices=Kind.choices, editable=False)  # derived from the URL
    url = models.CharField(max_length=2000, help_text="An apprise URL, e.g. slack://T000/B000/XXXX or "
                                                      "json://hooks.example.com/offsetwatch (docs/alerting.md)")
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # The channel's delivery state, kept by the outbox at every attempt so the pages and /metrics
    # can say "alerts are not reaching people" without scanning the outbox.
    last_sent_at = models.DateTimeField(null=True, blank=True, editable=False)
    last_failure_at = models.DateTimeField(null=True, blank=True, editable=False)
    last_failure = models.TextField(blank=True, default="", editable=False)  # masked reason

    def __str__(self) -> str:
        return f"{self.name} ({self.get_kind_display()})"

    @property
    def failing(self) -> bool:
        """Its newest attempt failed (a retry pending or given up): messages are not arriving."""
        return self.last_failure_at is not None and (self.last_sent_at is None or self.last_failure_at > self.last_sent_at)


def patterns_match(row, *, store: str, topic: str, group: str, owner: str) -> bool:
    """A route's or a silence's store, topic, group and owner globs against a pipeline's names
    (case-sensitive; a blank pattern matches anything)."""
    return all(not pattern or fnmatchcase(value, pattern) for pattern, value in (
        (row.store_pattern, store), (row.topic_pattern, topic), (row.group_pattern, group), (row.owner_pattern, owner)))


def route_statuses_default() -> list[str]:
    return ["WARN", "STALLED", "STOPPED", "REWOUND", "ERR"]


class Route(models.Model):
    """Which pipelines' incidents (and rewinds) go to a channel. Patterns are shell globs
    (`payments-*`), case-sensitive; blank matches anything. A pipeline matched by several routes
    to the same channel is notified there once."""

    name = models.CharField(max_length=200)
    channel = models.ForeignKey(Channel, on_delete=models.CASCADE, related_name="routes")
    store_pattern = models.CharField(max_length=1000, blank=True)
    topic_pattern = models.CharField(max_length=1000, blank=True)
    group_pattern = models.CharField(max_length=1000, blank=True)
    owner_pattern = models.CharField(max_length=1000, blank=True)
    # Status names (streamoffsets.evaluation.Status) whose incidents are sent: opened at, or worsened
    # to, one of them. Empty: no incident (a route for rewinds only).
    statuses = models.JSONField(default=route_statuses_default, blank=True)
    rewinds = models.BooleanField(default=True, help_text="Also send the rewinds of matching pipelines")
    enabled = models.BooleanField(default=True)

    class Meta:
        ordering = ["name", "pk"]

    def __str__(self) -> str:
        return f"{self.name} -> {self.channel.name}"

    def matches(self, *, store: str, topic: str, group: str, owner: str) -> bool:
        return patterns_match(self, store=store, topic=topic, group=group, owner=owner)


class Silence(models.Model):
    """No notification for one pipeline, or for every pipeline matching the patterns, from
    `starts_at` until `ends_at` (maintenance). Incidents still open and show on the pages."""

    pipeline = models.ForeignKey(Pipeline, on_delete=models.CASCADE, null=True, blank=True,
                                 related_name="silences")
    store_pattern = models.CharField(max_length=1000, blank=True)
    topic_pattern = models.CharField(max_length=1000, blank=True)
    group_pattern = models.CharField(max_length=1000, blank=True)
    owner_pattern = models.CharField(max_length=1000, blank=True)
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField()
    reason = models.TextField()
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    cancelled_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["ends_at"], name="silence_ends")]

    def matches(self, *, pipeline_id: int, store: str, topic: str, group: str, owner: str) -> bool:
        if self.pipeline_id is not None:
            return self.pipeline_id == pipeline_id
        return patterns_match(self, store=store, topic=topic, group=group, owner=owner)


class Notification(models.Model):
    """One message to one channel, written in the transaction that decided it (so a crash after
    the decision loses nothing) and delivered after it commits, retried with backoff on transient
    errors until sent or given up (`failed`, with the reason)."""

    class Status(models.TextChoices):
        PENDING = "pending"
        SENT = "sent"
        FAILED = "failed"

    channel = models.ForeignKey(Channel, on_delete=models.CASCADE, related_name="notifications")
    event = models.CharField(max_length=40)  # incident.opened|worsened|reminder|resolved, rewind.<event>, channel.test
    incident = models.ForeignKey(Incident, on_delete=models.SET_NULL, null=True, related_name="+")
    pipeline = models.ForeignKey(Pipeline, on_delete=models.SET_NULL, null=True, related_name="+")
    title = models.CharField(max_length=500)
    body = models.TextField()
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField()
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField()
    sent_at = models.DateTimeField(null=True)

    class Meta:
        indexes = [
            models.Index(fields=["next_attempt_at"], condition=models.Q(status="pending"), name="notification_due"),
            models.Index(fields=["incident", "-created_at"], name="notification_incident"),
        ]
