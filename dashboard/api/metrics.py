"""/metrics: the pipelines and collectors as Prometheus text (the format itself: offsetwatch.lib.prometheus).

`render` is pure: it takes the selector's plain rows (selectors.pipelines_metrics) and the
sources' health rows and returns the text; the view only reads settings and calls it.

Cardinality: every pipeline gives 5 series (plus one per partition with per_partition). Include
and exclude are fnmatch patterns over "store/topic/group"; a pipeline is exported when it
matches an include pattern (or there are none) and no exclude pattern. How many were left out is
itself exported, so a too-wide exclude is visible rather than silent.

Names (store, topic, group, cluster) are label values as they are, escaped as the format requires
(backslash, quote, newline): Prometheus queries must match the real names, and no text direction
applies to a label value. Source labels carry a store's URL: always masked.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime
from fnmatch import fnmatchcase

from offsetwatch.lib.prometheus import Family
from streamoffsets.evaluation import Status
from streamoffsets.urls import mask_secrets


def pipeline_selected(key: str, include: Sequence[str], exclude: Sequence[str]) -> bool:
    """Whether "store/topic/group" passes the include/exclude patterns (case-sensitive)."""
    if include and not any(fnmatchcase(key, pattern) for pattern in include):
        return False
    return not any(fnmatchcase(key, pattern) for pattern in exclude)


_STATUS_HELP = ("Pipeline status as a number, worst highest: " +
                ", ".join(f"{s.value}={s.name}" for s in Status) + "; the status label names it.")


def render(
    *, pipelines: Sequence, sources: Sequence, include: Sequence[str] = (), exclude: Sequence[str] = (),
    per_partition: bool = False, collectors: Sequence = (), now: datetime | None = None, channels: Sequence = (),
) -> str:
    """The exposition text. `pipelines`: selectors.PipelineMetrics rows; `sources`: objects with
    source, label, consecutive_failures, last_success_at and, when judged (collector_health.
    source_state), healthy and poll_age_s; `collectors`: collector_health.CollectorPart (name, up,
    last_seen_at) judged at `now`. Unknown values (no evaluation yet, lag in seconds not yet
    known, a collector part that cannot be told) are left out, never exported as 0."""
    lag = Family("offsetwatch_pipeline_lag_messages", "Total lag: messages between committed offsets and high watermarks.")
    lag_s = Family("offsetwatch_pipeline_lag_seconds",
                    "Largest per-partition lag in seconds (absent while unknown).")
    status = Family("offsetwatch_pipeline_status", _STATUS_HELP)
    margin = Family("offsetwatch_pipeline_retention_margin_messages",
                     "Smallest per-partition margin (committed - low watermark); negative: data was deleted unread.")
    left = Family("offsetwatch_pipeline_retention_seconds_left",
                   "Seconds until retention deletes unread data at the current rates; +Inf when no such risk is seen.")
    part = Family("offsetwatch_partition_lag_messages", "Lag of one partition (OFFSETWATCH_METRICS_PER_PARTITION).")
    exported = skipped = 0
    for p in pipelines:
        if not pipeline_selected(f"{p.store}/{p.topic}/{p.group}", include, exclude):
            skipped += 1
            continue
        exported += 1
        labels = {"store": p.store, "topic": p.topic, "group": p.group, "cluster": p.cluster}
        lag.add(labels, p.total_lag)
        lag_s.add(labels, p.lag_seconds)
        if p.status is not None:
            status.add({**labels, "status": Status(p.status).name}, p.status)
        margin.add(labels, p.retention_margin_min)
        if p.evaluated:
            left.add(labels, math.inf if p.retention_seconds_left is None else p.retention_seconds_left)
        if per_partition:
            for partition, value in p.partition_lags:
                part.add({**labels, "partition": str(partition)}, value)

    up = Family("offsetwatch_source_up", "1 when the last poll of the source (a store or a cluster's watermarks) succeeded.")
    last_ok = Family("offsetwatch_source_last_success_timestamp_seconds", "Unix time of the source's last successful poll.")
    failures = Family("offsetwatch_source_consecutive_failures", "Failed polls of the source in a row.")
    poll_age = Family("offsetwatch_source_seconds_since_last_poll",
                       "Seconds since the source's last poll (success or failure) ended.")
    for s in sources:
        # The label names the source's URL: masked (again: rows written before masking existed).
        labels = {"source": s.source, "label": mask_secrets(s.label)}
        # A source not polled for too long is down too, though its last poll worked.
        healthy = getattr(s, "healthy", s.consecutive_failures == 0 and s.last_success_at is not None)
        up.add(labels, int(bool(healthy) and s.last_success_at is not None))
        last_ok.add(labels, s.last_success_at.timestamp() if s.last_success_at else None)
        failures.add(labels, s.consecutive_failures)
        poll_age.add(labels, getattr(s, "poll_age_s", None))

    collector_up = Family("offsetwatch_collector_up",
                           "1 when a part of the collector system works (broker: Redis answers; beat: it ticked "
                           "within OFFSETWATCH_COLLECTOR_STALE_AFTER; workers: they ran a task or a poll within it). "
                           "Absent while it cannot be told (e.g. the workers while beat is down).")
    collector_age = Family("offsetwatch_collector_seconds_since_last_seen",
                            "Seconds since a part of the collector system was last seen working "
                            "(beat: its last tick; workers: their last collect_all or poll).")
    for piece in collectors:
        labels = {"part": piece.name}
        collector_up.add(labels, None if piece.up is None else int(piece.up))
        if now is not None and piece.name != "broker":
            collector_age.add(labels, piece.seconds_since(now))
    if now is not None and sources:
        ends = [s.last_attempt_at.timestamp() + (s.last_duration_ms or 0) / 1000 for s in sources if s.last_attempt_at]
        last_poll = Family("offsetwatch_collector_seconds_since_last_poll",
                            "Seconds since any source's poll last ended: the collectors' pulse.")
        last_poll.add({}, max(0.0, now.timestamp() - max(ends)) if ends else None)
    else:
        last_poll = None

    counts = Family("offsetwatch_metrics_pipelines",
                     "Pipelines known, by whether OFFSETWATCH_METRICS_INCLUDE/_EXCLUDE let them be exported.")
    counts.add({"exported": "true"}, exported)
    counts.add({"exported": "false"}, skipped)

    families = [lag, lag_s, status, margin, left] + ([part] if per_partition else []) + [up, last_ok, failures, poll_age]
    if collectors:
        families += [collector_up, collector_age]
    if last_poll is not None:
        families.append(last_poll)
    families.append(counts)
    if channels:
        families += _channel_families(channels)
    return "\n".join(line for family in families for line in family.lines()) + "\n"


def _channel_families(channels: Sequence) -> list[Family]:
    """Each enabled alert channel: up (its newest delivery attempt worked, or none was made yet)
    and when it last delivered. Alert on `offsetwatch_channel_up == 0`: a failing channel means
    on-call's pages are not arriving. Labels: the channel's name and kind, never its URL."""
    up = Family("offsetwatch_channel_up",
                "1 unless the alert channel's newest delivery attempt failed (retrying or given up).")
    last_sent = Family("offsetwatch_channel_last_success_timestamp_seconds",
                       "Unix time of the channel's last delivered notification (absent: none yet).")
    for c in channels:
        labels = {"channel": c.name, "kind": c.kind}
        up.add(labels, 0 if c.failing else 1)
        last_sent.add(labels, c.last_sent_at.timestamp() if c.last_sent_at else None)
    return [up, last_sent]
