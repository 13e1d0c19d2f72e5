"""Forms: every value a person types or picks is validated here before a selector sees it."""
from __future__ import annotations

from django import forms

from streamoffsets.evaluation import Status


class OverviewFilterForm(forms.Form):
    """The overview's filters; an invalid value is shown next to its field, never a 500."""

    status = forms.MultipleChoiceField(
        required=False, choices=[(s.name, s.name) for s in sorted(Status, reverse=True)],
        widget=forms.CheckboxSelectMultiple,
    )
    store = forms.ChoiceField(required=False)
    cluster = forms.ChoiceField(required=False)
    q = forms.CharField(required=False, max_length=200, strip=True, label="topic or group contains")

    def __init__(self, data, *, stores: list[str], clusters: list[str]):
        super().__init__(data)
        self.fields["store"].choices = [("", "any store")] + [(s, s) for s in stores]
        self.fields["cluster"].choices = [("", "any cluster")] + [(c, c) for c in clusters]

    def clean_q(self) -> str:
        q = self.cleaned_data["q"]
        if "\x00" in q:
            raise forms.ValidationError("the text contains a NUL character")
        return q

    def filters(self) -> dict:
        """Keyword arguments for selectors.pipelines_filtered (no filter where the form is invalid)."""
        if not self.is_valid():
            return {}
        data = self.cleaned_data
        return {
            "statuses": [int(Status[name]) for name in data["status"]] or None,
            "store": data["store"] or None,
            "cluster": data["cluster"] or None,
            "q": data["q"] or None,
        }


def _utc_datetime(raw: str):
    """A date-time typed on the audit page: ISO 8601; without an offset it is UTC (the page shows
    UTC)."""
    from datetime import datetime, timezone

    try:
        value = datetime.fromisoformat(raw.strip())
        if value.tzinfo is None:
            value = value.replace(tzinfo=timezone.utc)
        value.timestamp()  # out-of-range instants fail here, not in the database
    except (ValueError, OverflowError):
        raise forms.ValidationError("not a date-time: use ISO 8601, e.g. 2026-11-22T13:00 (UTC) or "
                                    "2026-11-22T13:00+01:00") from None
    return value


class AuditFilterForm(forms.Form):
    """The audit page's and exports' filters; an invalid value is shown next to its field."""

    pipeline = forms.IntegerField(required=False, min_value=1, max_value=2**63 - 1, label="pipeline id")
    actor = forms.CharField(required=False, max_length=300, strip=True, label="who contains")
    action = forms.ChoiceField(required=False)
    q = forms.CharField(required=False, max_length=200, strip=True, label="subject or pipeline contains")
    since = forms.CharField(required=False, max_length=40, label="from (UTC)")
    until = forms.CharField(required=False, max_length=40, label="to (UTC)")
    before = forms.IntegerField(required=False, min_value=1, max_value=2**63 - 1, widget=forms.HiddenInput)

    def __init__(self, data):
        from dashboard.audit import ACTION_FAMILIES, KNOWN_ACTIONS

        super().__init__(data)
        self.fields["action"].choices = [("", "any action")] + [
            (label, [(family, f"any of {label}")] + [(a, a) for a in KNOWN_ACTIONS if a.startswith(family + ".")])
            for family, label in ACTION_FAMILIES.items()
        ]

    def clean_since(self):
        raw = self.cleaned_data["since"]
        return _utc_datetime(raw) if raw else None

    def clean_until(self):
        raw = self.cleaned_data["until"]
        return _utc_datetime(raw) if raw else None

    def clean(self):
        data = super().clean()
        since, until = data.get("since"), data.get("until")
        if since and until and since >= until:
            self.add_error("until", "must be after 'from'")
        return data

    def filters(self) -> dict:
        """Keyword arguments for selectors.audit_events_page/_export; {} where the form is invalid
        (the page then shows the errors and the unfiltered log is not mistaken for a result)."""
        if not self.is_valid():
            return {}
        d = self.cleaned_data
        return {"pipeline_id": d["pipeline"], "actor": d["actor"] or None, "action": d["action"] or None,
                "q": d["q"] or None, "since": d["since"], "until": d["until"]}

    def query(self, **changes) -> str:
        """The valid filters as a query string (for the export and paging links)."""
        from urllib.parse import urlencode

        if not self.is_valid():
            return ""
        keep = {k: self.data.get(k, "") for k in ("pipeline", "actor", "action", "q", "since", "until")}
        keep.update(changes)
        return urlencode({k: v for k, v in keep.items() if v not in ("", None)})
