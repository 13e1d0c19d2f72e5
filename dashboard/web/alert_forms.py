"""The forms of the people on call: acknowledge an incident, silence a pipeline or pipelines by
pattern. Numbers go through dashboard.params; the services (dashboard.alerting.actions) check
the rest (bounds, text, roles) and their refusals are shown as they say."""
from __future__ import annotations

from django import forms

from dashboard.alerting.actions import NOTE_MAX_CHARS, PATTERN_MAX_CHARS, SILENCE_MAX_S, SILENCE_MIN_S
from dashboard.params import form_value, whole_number

DURATIONS = [("3600", "1 hour"), ("14400", "4 hours"), ("86400", "1 day"), ("604800", "1 week"),
             ("custom", "custom (minutes)")]


class AcknowledgeForm(forms.Form):
    note = forms.CharField(required=False, max_length=NOTE_MAX_CHARS, widget=forms.Textarea(attrs={"rows": 2}),
                           help_text="what you are doing about it (optional)")


class SilenceForm(forms.Form):
    duration = forms.ChoiceField(choices=DURATIONS, initial="3600", label="for")
    minutes = forms.CharField(required=False, max_length=40, label="minutes", widget=forms.NumberInput,
                              help_text=f"with custom: {SILENCE_MIN_S // 60} to {SILENCE_MAX_S // 60} minutes")
    reason = forms.CharField(max_length=NOTE_MAX_CHARS, widget=forms.Textarea(attrs={"rows": 2}),
                             help_text="why no notification should be sent (maintenance, known outage, ticket)")

    def clean_minutes(self):
        return form_value(whole_number, "minutes", self.cleaned_data["minutes"], SILENCE_MIN_S // 60, SILENCE_MAX_S // 60)

    def clean(self):
        data = super().clean()
        if data.get("duration") == "custom":
            if data.get("minutes") is None and "minutes" not in self.errors:
                self.add_error("minutes", "give the number of minutes for a custom duration")
            data["duration_s"] = (data.get("minutes") or 0) * 60
        elif data.get("duration"):
            data["duration_s"] = int(data["duration"])
        return data


class PatternSilenceForm(SilenceForm):
    """A silence of every pipeline matching shell globs (`payments-*`); blank matches anything."""

    store_pattern = forms.CharField(required=False, max_length=PATTERN_MAX_CHARS, label="store")
    topic_pattern = forms.CharField(required=False, max_length=PATTERN_MAX_CHARS, label="topic")
    group_pattern = forms.CharField(required=False, max_length=PATTERN_MAX_CHARS, label="group")
    owner_pattern = forms.CharField(required=False, max_length=PATTERN_MAX_CHARS, label="owner")

    field_order = ["store_pattern", "topic_pattern", "group_pattern", "owner_pattern", "duration", "minutes", "reason"]

    def patterns(self) -> dict[str, str]:
        return {name: self.cleaned_data[name] for name in
                ("store_pattern", "topic_pattern", "group_pattern", "owner_pattern")}
