"""Selectors for the collectors' own health, derived when read.

When Redis, beat or the workers stop, nothing is written by the collectors, so nothing they
would record can say so. Health is therefore derived from timestamps at read time:

- a source is "stale" when its last poll ended more than COLLECTOR_STALE_AFTER_S (plus its
  backoff, if failing) ago: "not polled for X s";
- "collector:broker": Redis answers a PING now;
- "collector:beat": beat's last tick, the later of the time beat last sent collect_all (a Redis
  key set as the message is published, in the beat process) and the time a worker last ran it
  (the SourceHealth row "collector:beat", kept in PostgreSQL so it outlives Redis);
- "collector:workers": the last work a worker did, the later of the last collect_all run and the
  last end of any source's poll; and whether the polls of the sources are keeping up.

Also here: which sources collect_all enqueues (`sources_due`) and the backoff of failing ones.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone

import redis
from django.conf import settings

from dashboard.models import Cluster, SourceHealth, Store
from dashboard.monitoring.redis_keys import BEAT_SENT_KEY, POLL_LOCK_PREFIX, POLLING_KEY
from dashboard.monitoring.shards import cluster_sources

COLLECTOR_PREFIX = "collector:"
BEAT_SOURCE = "collector:beat"  # the SourceHealth row collect_all writes each time it runs
BEAT_LABEL = "beat: collect_all (ran on a worker)"
# Celery's queues in Redis (kombu keeps each as a list of that name).
QUEUES = ("collect", "default")


def poll_ended_at(health: SourceHealth) -> datetime | None:
    if health.last_attempt_at is None:
        return None
    return health.last_attempt_at + timedelta(milliseconds=health.last_duration_ms or 0)


def sources_polled() -> list[str]:
    """The sources collect_all polls: every enabled store, every cluster (each of its shards when
    it is polled in shards: dashboard.monitoring.shards)."""
    sources = [f"store:{pk}" for pk in Store.objects.filter(enabled=True).order_by("pk").values_list("pk", flat=True)]
    for pk, shards in Cluster.objects.order_by("pk").values_list("pk", "shards"):
        sources += cluster_sources(pk, shards)
    return sources


def full_attempt_due(failures: int) -> bool:
    """Whether a source with this many consecutive failures gets a poll with the full I/O timeout
    this cycle. Those back off: at failure counts 0-2, then 4, 8, 16, ... (about interval x 2^k
    apart), then every POLL_BACKOFF_MAX_S. The cycles between poll it with POLL_PROBE_TIMEOUT_S
    only, so a server that is back is seen within one interval while a dead or frozen one holds
    a worker process briefly and the other sources keep their cadence."""
    if failures <= 2:
        return True
    cap_cycles = max(1, round(settings.POLL_BACKOFF_MAX_S / settings.POLL_INTERVAL_S))
    if failures < cap_cycles:
        return failures & (failures - 1) == 0
    return failures % cap_cycles == 0


def sources_due(*, now: datetime) -> tuple[list[str], list[str]]:
    """(full, probe): every enabled store and every cluster, split by the timeout its poll gets
    this cycle (full_attempt_due)."""
    sources = sources_polled()
    failures = dict(SourceHealth.objects.filter(source__in=sources, consecutive_failures__gt=0)
                    .values_list("source", "consecutive_failures"))
    probe = {s for s, f in failures.items() if not full_attempt_due(f)}
    return [s for s in sources if s not in probe], [s for s in sources if s in probe]


def _age_s(now: datetime, then: datetime | None) -> float | None:
    return None if then is None else max(0.0, (now - then).total_seconds())


def source_state(health: SourceHealth, *, now: datetime, polled: bool = True,
                 polling_since: datetime | None = None) -> SourceHealth:
    """Annotate a source's row with what it means now: `state` (ok, failing, hanging: a poll in flight too long, stale; idle for a
    store disabled or removed, `polled` False, unless its last poll failed), `healthy`,
    `poll_age_s` (seconds since its last poll ended) and `problem` (why it is not ok, in words)."""
    age = _age_s(now, poll_ended_at(health))
    allowed = settings.COLLECTOR_STALE_AFTER_S  # failing sources too are polled every cycle (probes)
    health.poll_age_s = age
    health.error_by_collector = health.consecutive_failures > 0 and health.last_error_by == "collector"
    if not polled and not health.consecutive_failures:
        health.state, health.healthy = "idle", True
        health.problem = "not polled: the store is disabled or was removed"
    elif polled and (age is None or age > allowed):
        health.state, health.healthy = "stale", False
        since = f"for {age:.0f} s" if age is not None else "yet"
        health.problem = f"not polled {since}: the collectors are not running or not keeping up"
        if health.consecutive_failures:
            health.problem += f"; the last poll failed: {health.last_error}"
    elif polling_since is not None and (waited := _age_s(now, polling_since)) > 1.5 * settings.POLL_INTERVAL_S:
        # A server that accepts connections and never answers (frozen, overloaded) holds the poll
        # until the I/O timeout: say so before that, not only when the poll fails.
        health.state, health.healthy = "hanging", False
        health.problem = (f"a poll has been running for {waited:.0f} s without finishing: the source may not be "
                          f"answering (each call times out after {settings.IO_TIMEOUT_S:g} s)")
    elif health.consecutive_failures:
        health.state, health.healthy = "failing", False
        health.problem = health.last_error
    else:
        health.state, health.healthy, health.problem = "ok", True, ""
    return health


@dataclass
class CollectorPart:
    """One part of the collector system: up True/False, or None when it cannot be told."""

    name: str  # broker, beat, workers
    label: str
    up: bool | None
    detail: str
    last_seen_at: datetime | None = None

    @property
    def source(self) -> str:
        return f"{COLLECTOR_PREFIX}{self.name}"

    def seconds_since(self, now: datetime) -> float | None:
        return _age_s(now, self.last_seen_at)


@dataclass
class CollectorHealth:
    now: datetime
    parts: list[CollectorPart]
    sources: list[SourceHealth] = field(default_factory=list)  # annotated by source_state
    queued: dict[str, int] = field(default_factory=dict)  # tasks waiting per Celery queue

    @property
    def down(self) -> list[CollectorPart]:
        return [p for p in self.parts if p.up is False]

    @property
    def healthy(self) -> bool:
        """The collector system works (each part up). A failing source is the source's problem."""
        return not self.down

    @property
    def last_poll_at(self) -> datetime | None:
        ends = [e for h in self.sources if h.state != "idle" and (e := poll_ended_at(h))]
        return max(ends) if ends else None


@dataclass
class _Broker:
    up: bool
    error: str = ""
    beat_sent_at: datetime | None = None
    queued: dict[str, int] = field(default_factory=dict)
    polling: dict[str, datetime] = field(default_factory=dict)  # sources whose poll runs now: since


def broker_read() -> _Broker:
    """PING Redis (0.5 s at most: a frozen broker must not hold the page) and read beat's last send and the queues' lengths with it."""
    client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=0.5, socket_connect_timeout=0.5)
    try:
        client.ping()
        pipe = client.pipeline(transaction=False)
        pipe.get(BEAT_SENT_KEY)
        pipe.hgetall(POLLING_KEY)
        for queue in QUEUES:
            pipe.llen(queue)
        sent, started, *lengths = pipe.execute()
        started = {k.decode(): float(v) for k, v in started.items()}
        pipe = client.pipeline(transaction=False)
        for source in started:
            pipe.exists(f"{POLL_LOCK_PREFIX}{source}")
        running = [s for s, held in zip(started, pipe.execute()) if held]  # a dead worker's entry has no lock
    except redis.exceptions.RedisError as exc:
        return _Broker(up=False, error=f"{type(exc).__name__}: {exc}")
    finally:
        client.close()
    sent_at = datetime.fromtimestamp(float(sent), tz=dt_timezone.utc) if sent else None
    polling = {s: datetime.fromtimestamp(started[s], tz=dt_timezone.utc) for s in running}
    return _Broker(up=True, beat_sent_at=sent_at, queued=dict(zip(QUEUES, lengths)), polling=polling)


def _latest(*times: datetime | None) -> datetime | None:
    present = [t for t in times if t is not None]
    return max(present) if present else None


def collector_health(*, now: datetime) -> CollectorHealth:
    """The broker, beat and workers parts and every source's row, all judged at `now`."""
    stale_after = settings.COLLECTOR_STALE_AFTER_S
    rows = list(SourceHealth.objects.order_by("-consecutive_failures", "source"))
    beat_row = next((h for h in rows if h.source == BEAT_SOURCE), None)
    polled = set(sources_polled())
    broker_state = broker_read()
    sources = [source_state(h, now=now, polled=h.source in polled, polling_since=broker_state.polling.get(h.source))
               for h in rows if not h.source.startswith(COLLECTOR_PREFIX)]
    sources.sort(key=lambda h: (h.healthy, -h.consecutive_failures, h.source))

    broker = CollectorPart("broker", "broker: Redis (Celery broker, poll locks)", broker_state.up,
                           "answers" if broker_state.up else f"Redis does not answer: {broker_state.error}",
                           last_seen_at=now if broker_state.up else None)

    ran_at = beat_row.last_success_at if beat_row else None
    tick_at = _latest(broker_state.beat_sent_at, ran_at)
    tick_age = _age_s(now, tick_at)
    beat_up = tick_age is not None and tick_age <= stale_after
    if beat_up:
        beat_detail = f"ticked {tick_age:.0f} s ago"
    else:
        beat_detail = (f"no tick for {tick_age:.0f} s (more than {stale_after:g} s): beat is not running"
                       if tick_age is not None else "beat has never ticked: beat is not running")
        if not broker_state.up:
            beat_detail += " or cannot reach the broker"
    beat = CollectorPart("beat", "beat: schedules a cycle every "
                         f"{settings.POLL_INTERVAL_S:g} s", beat_up, beat_detail, last_seen_at=tick_at)

    collection = CollectorHealth(now=now, parts=[broker, beat], sources=sources, queued=broker_state.queued)
    collection.parts.append(_workers_part(collection, ran_at=ran_at, beat_up=beat_up,
                                          beat_sent_at=broker_state.beat_sent_at, broker_up=broker_state.up))
    return collection


def _workers_part(collection: CollectorHealth, *, ran_at, beat_up: bool, beat_sent_at, broker_up: bool) -> CollectorPart:
    now, stale_after = collection.now, settings.COLLECTOR_STALE_AFTER_S
    label = "workers: run collect_all and the polls"
    last_work = _latest(ran_at, collection.last_poll_at)
    age = _age_s(now, last_work)
    waiting = ", ".join(f"{n} waiting in queue {q}" for q, n in collection.queued.items() if n)
    waiting = f" ({waiting})" if waiting else ""
    if beat_up and beat_sent_at and (ran_at is None or (beat_sent_at - ran_at).total_seconds() > stale_after):
        # beat sends collect_all, no worker runs it
        since = f"for {_age_s(now, ran_at):.0f} s" if ran_at else "ever"
        return CollectorPart("workers", label, False,
                             f"beat sends collect_all but no worker has run it {since}{waiting}: "
                             "no worker consumes queue default", last_seen_at=last_work)
    expected = [h for h in collection.sources if h.state != "idle"]
    polled = [h for h in expected if h.poll_age_s is not None]
    if beat_up and polled and all(h.state == "stale" for h in expected):
        return CollectorPart("workers", label, False,
                             f"no source polled for {min(h.poll_age_s for h in polled):.0f} s{waiting}: "
                             "no worker consumes queue collect", last_seen_at=last_work)
    if age is not None and age <= stale_after:
        return CollectorPart("workers", label, True, f"last worked {age:.0f} s ago{waiting}", last_seen_at=last_work)
    if not beat_up or not broker_up:
        cause = "the broker is down" if not broker_up else "beat is down"
        since = f"for {age:.0f} s" if age is not None else "yet"
        return CollectorPart("workers", label, None, f"no work done {since}: nothing to run while {cause}",
                             last_seen_at=last_work)
    since = f"for {age:.0f} s" if age is not None else "ever"
    return CollectorPart("workers", label, False, f"no task run {since}{waiting}", last_seen_at=last_work)
