"""/metrics: the exposition text parsed back line by line (names, labels, escaping) and the
cardinality settings. Who may scrape, and the settings through the view:
tests/integration/test_metrics_view.py."""
from __future__ import annotations

import math
import re
from datetime import datetime
from datetime import timezone as dt_timezone

from dashboard.api import metrics
from dashboard.models import SourceHealth
from dashboard.monitoring.overview import PipelineMetrics
from offsetwatch.lib import prometheus

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$")
_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


def parse_labels(text: str) -> dict[str, str]:
    """name="value",... with the format's three escapes; anything else is a parse error."""
    labels, i = {}, 0
    while i < len(text):
        name = _NAME.match(text, i)
        assert name and text[name.end():name.end() + 2] == '="', f"bad label at {text[i:]!r}"
        i, value = name.end() + 2, []
        while text[i] != '"':
            if text[i] == "\\":
                nxt = text[i + 1]
                assert nxt in '\\"n', f"bad escape \\{nxt}"
                value.append("\n" if nxt == "n" else nxt)
                i += 2
            else:
                value.append(text[i])
                i += 1
        labels[name.group()] = "".join(value)
        i += 1
        if i < len(text):
            assert text[i] == ",", f"expected a comma at {text[i:]!r}"
            i += 1
    return labels


def parse(text: str) -> tuple[dict[str, str], list[tuple[str, dict[str, str], float]]]:
    """(TYPE per metric name, samples); every sample's family must be declared before it."""
    assert text.endswith("\n")
    types, samples = {}, []
    for line in text.splitlines():
        if line.startswith("# HELP "):
            continue
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert name not in types, f"{name} declared twice"
            types[name] = kind
            continue
        match = _SAMPLE.match(line)
        assert match, f"not a sample line: {line!r}"
        name, labels, value = match.groups()
        assert name in types, f"{name} has no TYPE before its samples"
        samples.append((name, parse_labels(labels or ""), float(value)))
    return types, samples


def row(store="s", topic="t", group="g", cluster="c", status=0, total_lag=5, lag_seconds=1.5,
        retention_seconds_left=None, retention_margin_min=10, evaluated=True, partition_lags=((0, 2), (1, 3))):
    return PipelineMetrics(store=store, topic=topic, group=group, cluster=cluster, status=status,
                           total_lag=total_lag, lag_seconds=lag_seconds,
                           retention_seconds_left=retention_seconds_left, retention_margin_min=retention_margin_min,
                           evaluated=evaluated, partition_lags=partition_lags)


def values(samples, name) -> dict[tuple, float]:
    return {tuple(sorted(labels.items())): v for n, labels, v in samples if n == name}


def test_1_every_family_is_a_gauge_with_the_pipeline_labels():
    types, samples = parse(metrics.render(pipelines=[row(status=3)], sources=[]))
    assert {n for n, kind in types.items() if kind == "gauge"} == set(types)
    labels = {"store": "s", "topic": "t", "group": "g", "cluster": "c"}
    got = {name: (lab, v) for name, lab, v in samples if name.startswith("offsetwatch_pipeline_")}
    assert got["offsetwatch_pipeline_lag_messages"] == (labels, 5)
    assert got["offsetwatch_pipeline_lag_seconds"] == (labels, 1.5)
    assert got["offsetwatch_pipeline_status"] == ({**labels, "status": "STOPPED"}, 3)
    assert got["offsetwatch_pipeline_retention_margin_messages"] == (labels, 10)
    assert got["offsetwatch_pipeline_retention_seconds_left"][1] == math.inf  # no risk seen
    assert "offsetwatch_partition_lag_messages" not in types  # per partition is off by default


def test_2_hostile_names_are_escaped_and_parse_back_exactly():
    hostile = 'a"b\\c\nd ☃ {x="y"}'
    text = metrics.render(pipelines=[row(topic=hostile, group="g\\\\n", store='"', cluster="\n")], sources=[])
    assert len(text.splitlines()) == text.count("\n")  # no raw newline inside any line
    _, samples = parse(text)
    lab = next(lab for name, lab, _ in samples if name == "offsetwatch_pipeline_lag_messages")
    assert lab == {"store": '"', "topic": hostile, "group": "g\\\\n", "cluster": "\n"}
    assert 'topic="a\\"b\\\\c\\nd ☃ {x=\\"y\\"}"' in text


def test_3_unknown_values_are_left_out_never_zero():
    _, samples = parse(metrics.render(pipelines=[
        row(topic="fresh", status=None, total_lag=None, lag_seconds=None, retention_margin_min=None, evaluated=False),
        row(topic="known", lag_seconds=None, retention_seconds_left=3600.0),
    ], sources=[]))
    topics: dict[str, set[str]] = {}
    for name, lab, _ in samples:
        if "topic" in lab:
            topics.setdefault(name, set()).add(lab["topic"])
    assert topics["offsetwatch_pipeline_lag_messages"] == {"known"}
    assert topics["offsetwatch_pipeline_status"] == {"known"}
    assert "offsetwatch_pipeline_lag_seconds" not in topics
    assert [v for n, _, v in samples if n == "offsetwatch_pipeline_retention_seconds_left"] == [3600.0]


def test_4_include_and_exclude_patterns_over_store_topic_group():
    pipelines = [row(store="prod", topic="orders", group="billing"), row(store="prod", topic="orders", group="tmp-1"),
                 row(store="dev", topic="orders", group="billing")]

    def exported(**kw):
        _, samples = parse(metrics.render(pipelines=pipelines, sources=[], **kw))
        shown = {(lab["store"], lab["group"]) for n, lab, _ in samples if n == "offsetwatch_pipeline_lag_messages"}
        counts = {lab["exported"]: v for n, lab, v in samples if n == "offsetwatch_metrics_pipelines"}
        assert counts == {"true": len(shown), "false": 3 - len(shown)}  # what was left out is said
        return shown

    assert exported() == {("prod", "billing"), ("prod", "tmp-1"), ("dev", "billing")}
    assert exported(include=["prod/*"]) == {("prod", "billing"), ("prod", "tmp-1")}
    assert exported(include=["prod/*"], exclude=["*/tmp-*"]) == {("prod", "billing")}
    assert exported(exclude=["*/orders/billing"]) == {("prod", "tmp-1")}
    assert exported(include=["PROD/*"]) == set()  # case-sensitive, like the names themselves


def test_5_per_partition_lag_when_asked():
    _, samples = parse(metrics.render(pipelines=[row(partition_lags=((0, 2), (1, None), (7, -3)))], sources=[],
                                      per_partition=True))
    got = {lab["partition"]: v for n, lab, v in samples if n == "offsetwatch_partition_lag_messages"}
    assert got == {"0": 2, "7": -3}  # partition 1's lag is unknown: no sample


def test_6_source_health():
    ok = SourceHealth(source="store:1", label='store "hb"', consecutive_failures=0,
                      last_success_at=datetime(2024, 1, 1, tzinfo=dt_timezone.utc))
    failing = SourceHealth(source="cluster:2", label="cluster k", consecutive_failures=4, last_success_at=None)
    _, samples = parse(metrics.render(pipelines=[], sources=[ok, failing]))
    by = {(n, lab["source"]): v for n, lab, v in samples if "source" in lab}
    assert by[("offsetwatch_source_up", "store:1")] == 1 and by[("offsetwatch_source_up", "cluster:2")] == 0
    assert by[("offsetwatch_source_last_success_timestamp_seconds", "store:1")] == 1704067200.0
    assert ("offsetwatch_source_last_success_timestamp_seconds", "cluster:2") not in by  # never succeeded
    assert by[("offsetwatch_source_consecutive_failures", "cluster:2")] == 4


def test_7_values_are_formatted_as_the_format_wants():
    assert [prometheus.format_value(v) for v in (3, 2.5, math.inf, -math.inf, math.nan, True, 1e20)] == [
        "3", "2.5", "+Inf", "-Inf", "NaN", "1", "1e+20"]
