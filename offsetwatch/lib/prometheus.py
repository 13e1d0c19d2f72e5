"""The Prometheus text exposition format (0.0.4), written by hand: label values and help text
escaped as the format requires, numbers as Prometheus reads them, one gauge family at a time."""
from __future__ import annotations

import math
from collections.abc import Iterable

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def escape_label_value(value: str) -> str:
    """Backslash, double quote and newline escaped, as the exposition format requires."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def format_value(value: float | int) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


class Family:
    def __init__(self, name: str, help_text: str):
        self.name, self.help_text, self.samples = name, help_text, []

    def add(self, labels: dict[str, str], value) -> None:
        if value is not None:
            self.samples.append((labels, value))

    def lines(self) -> Iterable[str]:
        yield f"# HELP {self.name} {_escape_help(self.help_text)}"
        yield f"# TYPE {self.name} gauge"
        for labels, value in self.samples:
            text = ",".join(f'{k}="{escape_label_value(str(v))}"' for k, v in labels.items())
            yield f"{self.name}{{{text}}} {format_value(value)}" if text else f"{self.name} {format_value(value)}"
