"""Incident notifications: which changes of a collection cycle reach people, on which channels.

Called by the evaluation (dashboard.monitoring.evaluation.pipelines_evaluate) in the cycle's
transaction with the pipelines' incidents as that cycle left them; the notifications it returns
are written to the outbox (dashboard.alerting.outbox) in that same transaction and delivered
after it commits, so a cycle never waits on a channel. Rules, for a pipeline's incident (a
partition's own incidents are named in the pipeline's reasons and not sent apart):
1. an archived pipeline, or one under an active silence, sends nothing (its incident stays on the
   pages; what was not sent is sent as "opened" once the silence ends, if still open);
2. opened: the incident's status is above OK and nothing was sent for it yet;
3. worsened: its status is above the worst one sent for it;
4. reminder: still above OK, not acknowledged, and the last notification was at least
   OFFSETWATCH_RENOTIFY_AFTER ago (0: never);
5. resolved: it closed (after OFFSETWATCH_RESOLVE_AFTER_SAMPLES OK evaluations in a row) and
   something was sent for it.
Each goes to the channels of the enabled routes that match the pipeline (store, topic, group,
owner) and take the status (for "resolved": the worst status sent), each channel once.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from django.conf import settings
from django.urls import reverse

from dashboard.alerting import selectors
from dashboard.alerting.outbox import notification_new
from dashboard.models import Channel, Incident, Notification, Pipeline, PipelineEvaluation, Route, Silence
from offsetwatch.lib.timefmt import utc_seconds
from streamoffsets.evaluation import Status, human_duration
from streamoffsets.visible import visible


@dataclass
class CycleAlerting:
    """One evaluation pass's view of alerting: the routes and silences, read once and only if an
    incident needs them (most cycles have none)."""

    now: datetime
    store_names: dict[int, str]
    _routes: list[Route] | None = None
    _silences: list[Silence] | None = None
    # (incident, channel, event, the worst status sent before this one)
    decided: list[tuple[Incident, Channel, str, int | None]] = field(default_factory=list)

    def routes(self) -> list[Route]:
        if self._routes is None:
            self._routes = selectors.routes_enabled()
        return self._routes

    def silences(self) -> list[Silence]:
        if self._silences is None:
            self._silences = selectors.silences_active(self.now)
        return self._silences

    def decide(self, pipeline: Pipeline, incident: Incident) -> bool:
        """Decide what this incident sends now (kept in `decided`, rows made by `notifications`),
        updating its notified status and time. Returns whether the incident changed."""
        if incident.partition is not None or pipeline.archived_at is not None:
            return False
        event = incident_event(incident, self.now)
        if event is None:
            return False
        incident.pipeline = pipeline  # the message reads it: no query per incident
        names = selectors.pipeline_names(pipeline, self.store_names.get(pipeline.store_id, ""))
        if selectors.silence_covering(pipeline, names, self.silences()) is not None:
            return False
        current = incident.status if incident.status is not None else incident.worst_status
        status = incident.notified_status if event == "resolved" else current
        found = selectors.channels_for(names, self.routes(), status_name=Status(status).name)
        if not found:
            return False
        for channel in found:
            self.decided.append((incident, channel, event, incident.notified_status))
        if event != "resolved":
            incident.notified_status = max(incident.notified_status or 0, current)
        incident.notified_at = self.now
        return True

    def notifications(self, evaluations: dict[int, PipelineEvaluation]) -> list[Notification]:
        """The outbox rows of what was decided (call once the incidents are saved: rows refer to them)."""
        return [notification_new(channel=channel, event=f"incident.{event}", incident=incident,
                                 pipeline=incident.pipeline, now=self.now,
                                 **incident_message(incident, event, evaluations.get(incident.pipeline_id),
                                                    self.store_names.get(incident.pipeline.store_id, ""), self.now,
                                                    sent_before=before))
                for incident, channel, event, before in self.decided]


def incident_event(incident: Incident, now: datetime) -> str | None:
    """Rules 2-5 of the module: "opened", "worsened", "reminder", "resolved" or None."""
    if incident.closed_at is not None:
        return "resolved" if incident.notified_status is not None else None
    status = incident.status if incident.status is not None else incident.worst_status
    if status <= Status.OK:
        return None  # held OK, not yet resolved
    if incident.notified_status is None:
        return "opened"
    if status > incident.notified_status:
        return "worsened"
    every = settings.RENOTIFY_AFTER_S
    if (every > 0 and incident.acknowledged_at is None and incident.notified_at is not None
            and (now - incident.notified_at).total_seconds() >= every):
        return "reminder"
    return None


def pipeline_link(pipeline_id: int) -> str:
    """The pipeline page's address: absolute with OFFSETWATCH_PUBLIC_URL, else the path."""
    path = reverse("pipeline", args=[pipeline_id])
    return settings.PUBLIC_URL.rstrip("/") + path if settings.PUBLIC_URL else path


def incident_message(incident: Incident, event: str, evaluated: PipelineEvaluation | None, store_name: str,
                     now: datetime, *, sent_before: int | None = None) -> dict[str, str]:
    """Title and body of one incident notification, for people: the status and its reasons in
    words, the lag in messages and in seconds, the owner, and the link. `sent_before`: the worst
    status sent for the incident before this message. Names through `visible` (a name from a
    store anyone can write is shown, not obeyed)."""
    pipeline = incident.pipeline
    where = f"{visible(pipeline.topic)} / {visible(pipeline.group)} ({visible(store_name)})"
    status = Status(incident.status if incident.status is not None else incident.worst_status).name
    if event == "resolved":
        worst = Status(incident.notified_status or incident.worst_status).name
        lasted = human_duration(((incident.closed_at or now) - incident.opened_at).total_seconds())
        title = f"[Offset Watch] RESOLVED (was {worst}): {where}"
        head = f"Resolved after {lasted}: OK for {incident.ok_samples} evaluations in a row (worst: {worst})."
    else:
        words = {"opened": "", "worsened": "worse: ", "reminder": "still "}[event]
        title = f"[Offset Watch] {words}{status}: {where}"
        head = (f"{status}; the incident opened {utc_seconds(incident.opened_at)} "
                f"({human_duration((now - incident.opened_at).total_seconds())} ago)")
        if event == "worsened" and sent_before is not None:
            head += f", worse than the {Status(sent_before).name} sent before"
        if event == "reminder":
            head += "; not acknowledged"
    lines = [head, ""]
    reasons = (evaluated.reasons if evaluated is not None and event != "resolved" else incident.reasons) or []
    lines += ["Reasons:"] + [f"- {visible(r)}" for r in reasons] if reasons else []
    if evaluated is not None:
        lag = "unknown" if evaluated.total_lag is None else f"{evaluated.total_lag:,} messages"
        seconds = ("unknown" if evaluated.lag_seconds is None
                   else f"{human_duration(evaluated.lag_seconds)} ({evaluated.lag_seconds_method})")
        lines += [f"Lag: {lag}; in time: {seconds}"]
    lines += [f"Pipeline: topic {visible(pipeline.topic)}, group {visible(pipeline.group)}, store {visible(store_name)}",
              f"Owner: {visible(pipeline.owner) or '—'}", "", pipeline_link(pipeline.pk)]
    return {"title": title, "body": "\n".join(lines)}
