"""Reads of alerting for the pages: a pipeline's open incident and the silence covering it, the
overview rows' "silenced" mark, the silences page. A fixed number of queries each, whatever the
number of pipelines or silences."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Q

from dashboard.alerting.selectors import pipeline_names, silence_covering, silences_active
from dashboard.models import Incident, Pipeline, Silence

RECENT_SILENCES = timedelta(days=7)
SILENCES_SHOWN = 200


@dataclass
class PipelineAlerting:
    incident: Incident | None  # the pipeline's own open incident, its acknowledgement with it
    silence: Silence | None  # the active silence covering it that lasts longest


def pipeline_alerting(*, pipeline: Pipeline, now: datetime) -> PipelineAlerting:
    incident = (Incident.objects.filter(pipeline=pipeline, partition=None, closed_at=None)
                .select_related("acknowledged_by").first())
    silence = silence_covering(pipeline, pipeline_names(pipeline), _with_people(silences_active(now)))
    return PipelineAlerting(incident, silence)


def _with_people(silences: list[Silence]) -> list[Silence]:
    """The silences with who set them and their pipeline, in one more query (none when empty)."""
    if not silences:
        return silences
    return list(Silence.objects.filter(pk__in=[s.pk for s in silences])
                .select_related("created_by", "pipeline", "pipeline__store").order_by("ends_at"))


def rows_silenced(rows: list[dict], *, now: datetime) -> list[dict]:
    """The overview's rows (dashboard.monitoring.overview.overview_rows: pk, topic, group,
    store_name, owner), each with `silenced_until` (the end of the longest active silence
    covering it, or None). One query, for the active silences."""
    silences = silences_active(now)
    for row in rows:
        row["silenced_until"] = None
        if not silences:
            continue
        names = {"store": row["store_name"], "topic": row["topic"], "group": row["group"], "owner": row["owner"] or ""}
        ends = [s.ends_at for s in silences if s.matches(pipeline_id=row["pk"], **names)]
        row["silenced_until"] = max(ends, default=None)
    return rows


@dataclass
class SilencesPage:
    active: list[Silence]  # in force now, ending soonest first
    planned: list[Silence]  # starting later
    recent: list[Silence]  # ended or cancelled in the last RECENT_SILENCES, newest first


def silences_page(*, now: datetime) -> SilencesPage:
    rows = list(Silence.objects.filter(Q(cancelled_at=None, ends_at__gt=now)
                                       | Q(ends_at__gt=now - RECENT_SILENCES) | Q(cancelled_at__gt=now - RECENT_SILENCES))
                .select_related("created_by", "pipeline", "pipeline__store").order_by("-ends_at")[:SILENCES_SHOWN])
    live = [s for s in rows if s.cancelled_at is None and s.ends_at > now]
    return SilencesPage(
        active=sorted((s for s in live if s.starts_at <= now), key=lambda s: s.ends_at),
        planned=sorted((s for s in live if s.starts_at > now), key=lambda s: s.starts_at),
        recent=[s for s in rows if s not in live],
    )
