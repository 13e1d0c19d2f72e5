"""Reads of alerting: the active silences, the routes a pipeline matches, what the pages show."""
from __future__ import annotations

from datetime import datetime

from dashboard.models import Channel, Pipeline, Route, Silence


def pipeline_names(pipeline: Pipeline, store_name: str | None = None) -> dict[str, str]:
    """The names routes and silences match: store, topic, group, owner."""
    return {"store": store_name if store_name is not None else pipeline.store.name, "topic": pipeline.topic,
            "group": pipeline.group, "owner": pipeline.owner or ""}


def silences_active(now: datetime) -> list[Silence]:
    return list(Silence.objects.filter(starts_at__lte=now, ends_at__gt=now, cancelled_at=None).order_by("ends_at"))


def silence_covering(pipeline: Pipeline, names: dict[str, str], silences: list[Silence]) -> Silence | None:
    """The active silence (of `silences`) that covers the pipeline and lasts longest, or None."""
    covering = [s for s in silences if s.matches(pipeline_id=pipeline.pk, **names)]
    return max(covering, key=lambda s: s.ends_at, default=None)


def routes_enabled() -> list[Route]:
    return list(Route.objects.filter(enabled=True, channel__enabled=True).select_related("channel"))


def channels_for(names: dict[str, str], routes: list[Route], *, status_name: str | None = None,
                 rewinds: bool = False) -> list[Channel]:
    """The channels whose routes match the pipeline's names and take this status (or rewinds),
    each once, in route order."""
    out: dict[int, Channel] = {}
    for route in routes:
        if not route.matches(**names):
            continue
        if rewinds and not route.rewinds:
            continue
        if status_name is not None and status_name not in (route.statuses or ()):
            continue
        out.setdefault(route.channel_id, route.channel)
    return list(out.values())


def channels_failing() -> list[Channel]:
    """The enabled channels whose newest delivery attempt failed: on-call's messages are not
    arriving there (the overview says so; /metrics exports every channel's state)."""
    return [c for c in Channel.objects.filter(enabled=True, last_failure_at__isnull=False).order_by("name") if c.failing]


def channels_enabled() -> list[Channel]:
    return list(Channel.objects.filter(enabled=True).order_by("name"))
