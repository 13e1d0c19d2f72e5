"""The rewind request and decision forms; offsets typed as `partition:offset` pairs."""
from __future__ import annotations

from django import forms

from dashboard.params import form_value, instant, whole_number


class RewindRequestForm(forms.Form):
    """A rewind request as a person fills it in: the target kind and its one value, a reason."""

    KIND_CHOICES = [
        ("batch", "a past batch"), ("time", "a point in time (the newest batch at or before it)"),
        ("earliest", "earliest (the low watermark of every partition)"),
        ("latest", "latest (skip to the high watermark of every partition)"),
        ("offsets", "explicit offsets per partition"), ("shift", "shift every partition by N messages"),
    ]
    kind = forms.ChoiceField(choices=KIND_CHOICES, label="rewind to")
    # Numbers and the time are parsed by dashboard.params (clean_*) like every other parameter.
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
        return form_value(whole_number, "batch_time_ms", self.cleaned_data["batch_time_ms"], 0, 2**63 - 1)

    def clean_shift(self):
        return form_value(whole_number, "shift", self.cleaned_data["shift"], -(2**62), 2**62)

    def clean_time(self):
        # Year 1 to 9999, any offset; without one: settings.TIME_ZONE (what datetime-local sends).
        return form_value(instant, "time", self.cleaned_data["time"])

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
