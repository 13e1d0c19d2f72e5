"""The overview's filter form."""
from __future__ import annotations

from django import forms

from streamoffsets.evaluation import Status
from streamoffsets.visible import visible


class OverviewFilterForm(forms.Form):
    """The overview's filters; an invalid value is shown next to its field, never a 500."""

    status = forms.MultipleChoiceField(
        required=False, choices=[(s.name, s.name) for s in sorted(Status, reverse=True)],
        widget=forms.CheckboxSelectMultiple,
    )
    store = forms.ChoiceField(required=False)
    cluster = forms.ChoiceField(required=False)
    q = forms.CharField(required=False, max_length=200, strip=True, label="topic or group contains")
    # Archived pipelines are hidden unless `archived=1` (the overview's "show N archived" link).
    # A checkbox sends "1"; anything else ("0", garbage) is "no", not an error.
    archived = forms.CharField(required=False, max_length=10, label="archived too")
    # The order and the page: on the server, so any filtered, sorted page is a shareable URL.
    sort = forms.ChoiceField(required=False, label="sort by", choices=[
        ("worst", "worst first"), ("lag", "lag"), ("lag_seconds", "lag in time"), ("last_batch", "longest silent"),
        ("name", "topic and group"), ("owner", "owner")])
    page = forms.IntegerField(required=False, min_value=1, max_value=10**9)

    def __init__(self, data, *, stores: list[str], clusters: list[str]):
        super().__init__(data)
        # Shown through `visible` (a right-to-left override is shown, not obeyed); sent back raw.
        self.fields["store"].choices = [("", "any store")] + [(s, visible(s)) for s in stores]
        self.fields["cluster"].choices = [("", "any cluster")] + [(c, visible(c)) for c in clusters]

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
            "archived": data["archived"].lower() in ("1", "true", "on", "yes"),
        }

    def sort_and_page(self) -> tuple[str, int]:
        """The order (OVERVIEW_SORTS) and the page asked for; the first page worst first where the form is invalid."""
        if not self.is_valid():
            return "worst", 1
        return self.cleaned_data["sort"] or "worst", self.cleaned_data["page"] or 1
