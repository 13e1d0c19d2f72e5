"""Forms: every value a person types or picks is validated here before a selector sees it."""
from __future__ import annotations

from django import forms
from django.conf import settings

from dashboard.models import Store
from dashboard.monitoring.selectors import kafka_client_config
from streamoffsets.evaluation import Status
from streamoffsets.probe import server_kind_problem
from streamoffsets.urls import validate_store_url
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
        }


class RewindRequestForm(forms.Form):
    """A rewind request as a person fills it in: the target kind and its one value, a reason."""

    KIND_CHOICES = [
        ("batch", "a past batch"), ("time", "a point in time (the newest batch at or before it)"),
        ("earliest", "earliest (the low watermark of every partition)"),
        ("latest", "latest (skip to the high watermark of every partition)"),
        ("offsets", "explicit offsets per partition"), ("shift", "shift every partition by N messages"),
    ]
    kind = forms.ChoiceField(choices=KIND_CHOICES, label="rewind to")
    # Numbers and the time are parsed by dashboard.web.params (clean_*) like every other parameter.
    batch_time_ms = forms.CharField(required=False, max_length=40, widget=forms.HiddenInput)
    time = forms.CharField(required=False, label="time", max_length=64,
                           widget=forms.DateTimeInput(attrs={"type": "datetime-local", "step": 1}))
    time_source = forms.ChoiceField(required=False, initial="history", widget=forms.RadioSelect, choices=[
        ("history", "from the batch history (the newest batch at or before it)"),
        ("broker", "from the broker's timestamp index (the first record at or after it; Kafka 0.10.1+)"),
    ])
    offsets = forms.CharField(required=False, max_length=20_000, label="offsets",
                              help_text="partition:offset pairs, e.g. 0:1200, 1:980")
    shift = forms.CharField(required=False, max_length=40, label="shift by", widget=forms.NumberInput,
                            help_text="negative: back (re-read), positive: forward (skip)")
    reason = forms.CharField(max_length=2000, widget=forms.Textarea(attrs={"rows": 3}),
                             help_text="why the data must be replayed (shown to the approver and kept in the audit log)")
    ticket_url = forms.URLField(required=False, max_length=1000, label="ticket link (optional)", assume_scheme="https")
    mode = forms.ChoiceField(choices=[("job", "the job applies it when it restarts (job library)"),
                                      ("store", "write it into the store while the job is stopped")],
                             initial="job", widget=forms.RadioSelect)

    def clean_batch_time_ms(self):
        return _whole("batch_time_ms", self.cleaned_data["batch_time_ms"], 0, 2**63 - 1)

    def clean_shift(self):
        return _whole("shift", self.cleaned_data["shift"], -(2**62), 2**62)

    def clean_time(self):
        from dashboard.web import params

        raw = self.cleaned_data["time"]
        if not raw:
            return None
        try:
            return params.instant("time", raw)  # year 1 to 9999, any offset; naive: settings.TIME_ZONE
        except params.BadParam as exc:
            raise forms.ValidationError(exc.detail) from None

    def clean(self):
        data = super().clean()
        kind = data.get("kind")
        spec: dict = {}
        if kind == "batch":
            if data.get("batch_time_ms") is None:
                self.add_error("kind", "pick the batch in the pipeline's batch history (its \"rewind here\" link)")
            else:
                spec = {"batch_time_ms": data["batch_time_ms"]}
        elif kind == "time":
            if data.get("time") is None:
                self.add_error("time", "give the point in time to rewind to")
            else:
                spec = {"time_ms": int(data["time"].timestamp() * 1000)}
                if data.get("time_source") == "broker":
                    spec["source"] = "broker"
        elif kind == "offsets":
            try:
                spec = {"offsets": parse_offsets(data.get("offsets") or "")}
            except ValueError as exc:
                self.add_error("offsets", str(exc))
        elif kind == "shift":
            if not data.get("shift"):
                self.add_error("shift", "give a number of messages other than 0")
            else:
                spec = {"shift": data["shift"]}
        data["spec"] = spec
        return data


def parse_offsets(text: str) -> dict[str, int]:
    """`0:1200, 1:980` -> {"0": 1200, "1": 980}; errors name the pair that is wrong."""
    offsets: dict[str, int] = {}
    pairs = [pair.strip() for pair in text.replace("\n", ",").split(",") if pair.strip()]
    if not pairs:
        raise ValueError("give at least one partition:offset pair, e.g. 0:1200")
    for pair in pairs:
        partition, sep, offset = pair.partition(":")
        if not sep or not partition.strip().isascii() or not partition.strip().isdigit() \
                or not offset.strip().isascii() or not offset.strip().isdigit():
            raise ValueError(f"{pair[:40]!r} is not partition:offset with two non-negative whole numbers")
        if partition.strip() in offsets:
            raise ValueError(f"partition {partition.strip()} is given twice")
        if len(offset.strip()) > 19:
            raise ValueError(f"{pair[:40]!r}: the offset is too large for Kafka")
        offsets[str(int(partition))] = int(offset)
    return offsets


class RewindDecisionForm(forms.Form):
    decision = forms.ChoiceField(choices=[("approve", "approve"), ("reject", "reject")])
    comment = forms.CharField(required=False, max_length=2000, widget=forms.Textarea(attrs={"rows": 2}))


def _audit_instant(name: str, raw: str):
    """A date-time typed on the audit page (params.instant): without an offset it is UTC (the page
    shows UTC)."""
    from datetime import timezone

    from dashboard.web import params

    try:
        return params.instant(name, raw, naive_tz=timezone.utc)
    except params.BadParam as exc:
        raise forms.ValidationError(exc.detail) from None


def _whole(name: str, raw: str, lo: int, hi: int) -> int | None:
    """A whole number typed in a form (params.whole_number: ASCII digits); None when empty."""
    from dashboard.web import params

    if not raw:
        return None
    try:
        return params.whole_number(name, raw, lo, hi)
    except params.BadParam as exc:
        raise forms.ValidationError(exc.detail) from None


class AuditFilterForm(forms.Form):
    """The audit page's and exports' filters; an invalid value is shown next to its field."""

    # Ids and times are parsed by dashboard.web.params, as on every other page and in the API.
    pipeline = forms.CharField(required=False, max_length=40, label="pipeline id")
    actor = forms.CharField(required=False, max_length=300, strip=True, label="who contains")
    action = forms.ChoiceField(required=False)
    q = forms.CharField(required=False, max_length=200, strip=True, label="subject or pipeline contains")
    since = forms.CharField(required=False, max_length=40, label="from (UTC)")
    until = forms.CharField(required=False, max_length=40, label="to (UTC)")
    before = forms.CharField(required=False, max_length=40, widget=forms.HiddenInput)

    def __init__(self, data):
        from dashboard.audit.services import ACTION_FAMILIES, KNOWN_ACTIONS

        super().__init__(data)
        self.fields["action"].choices = [("", "any action")] + [
            (label, [(family, f"any of {label}")] + [(a, a) for a in KNOWN_ACTIONS if a.startswith(family + ".")])
            for family, label in ACTION_FAMILIES.items()
        ]

    def clean_pipeline(self):
        return _whole("pipeline", self.cleaned_data["pipeline"], 1, 2**63 - 1)

    def clean_before(self):
        return _whole("before", self.cleaned_data["before"], 1, 2**63 - 1)

    def clean_since(self):
        raw = self.cleaned_data["since"]
        return _audit_instant("since", raw) if raw else None

    def clean_until(self):
        raw = self.cleaned_data["until"]
        return _audit_instant("until", raw) if raw else None

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


class StoreAdminForm(forms.ModelForm):
    """The admin's store form: the URL is checked by kind (Store.clean), then the server it names
    is asked once whether it is that kind of server (streamoffsets.probe), so `hbase://` at a
    ZooKeeper port is refused here, not polled forever. A server that cannot be reached now is
    not judged: it is saved, and the collectors say it is down."""

    class Meta:
        model = Store
        fields = "__all__"

    def clean(self):
        cleaned = super().clean()
        url, cluster = cleaned.get("url"), cleaned.get("cluster")
        if not url or self.errors:
            return cleaned
        try:
            validate_store_url(url, settings.FILE_STORE_ROOTS)
        except ValueError:
            return cleaned  # Store.clean says what is wrong with it
        problem = server_kind_problem(url, timeout_s=settings.POLL_PROBE_TIMEOUT_S,
                                      kafka_config=kafka_client_config(cluster_name=cluster.name) if cluster else None)
        if problem:
            self.add_error("url", problem)
        return cleaned
