"""The audit page's filter form: times without an offset are UTC, numbers ASCII digits."""
from __future__ import annotations

from datetime import timezone

from django import forms

from dashboard.audit.services import ACTION_FAMILIES, KNOWN_ACTIONS
from dashboard.params import form_value, instant, whole_number


class AuditFilterForm(forms.Form):
    """The audit page's and exports' filters; an invalid value is shown next to its field."""

    # Ids and times are parsed by dashboard.params, as on every other page and in the API.
    pipeline = forms.CharField(required=False, max_length=40, label="pipeline id")
    actor = forms.CharField(required=False, max_length=300, strip=True, label="who contains")
    action = forms.ChoiceField(required=False)
    q = forms.CharField(required=False, max_length=200, strip=True, label="subject or pipeline contains")
    since = forms.CharField(required=False, max_length=40, label="from (UTC)")
    until = forms.CharField(required=False, max_length=40, label="to (UTC)")
    before = forms.CharField(required=False, max_length=40, widget=forms.HiddenInput)

    def __init__(self, data):
        super().__init__(data)
        self.fields["action"].choices = [("", "any action")] + [
            (label, [(family, f"any of {label}")] + [(a, a) for a in KNOWN_ACTIONS if a.startswith(family + ".")])
            for family, label in ACTION_FAMILIES.items()
        ]

    def clean_pipeline(self):
        return form_value(whole_number, "pipeline", self.cleaned_data["pipeline"], 1, 2**63 - 1)

    def clean_before(self):
        return form_value(whole_number, "before", self.cleaned_data["before"], 1, 2**63 - 1)

    # Without an offset a time is UTC: the page shows UTC.
    def clean_since(self):
        return form_value(instant, "since", self.cleaned_data["since"], naive_tz=timezone.utc)

    def clean_until(self):
        return form_value(instant, "until", self.cleaned_data["until"], naive_tz=timezone.utc)

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
