"""Which topics' watermark samples the evaluation reads (dashboard.monitoring.evaluation.
_topics_walked): only those a rule walks; a caught-up topic whose low watermarks stand still
needs its first sample of the lookback and this cycle's, nothing between."""
from __future__ import annotations

from datetime import datetime, timezone

import pytest

from dashboard.models import Pipeline
from dashboard.monitoring.evaluation import _topics_walked
from dashboard.monitoring.history import PackedMarks, TopicSeries

pytestmark = pytest.mark.unit

T0 = datetime(2026, 11, 26, tzinfo=timezone.utc)


def test_only_topics_with_a_partition_behind_a_moving_low_or_a_new_partition_are_walked():
    now = {
        "idle": {0: (5, 100), 1: (0, 50)},  # every pipeline caught up, lows as in the first sample
        "behind": {0: (5, 100)},  # a pipeline behind on it
        "retention": {0: (9, 100)},  # caught up, its low moved since the first sample
        "grown": {0: (5, 100), 1: (0, 7)},  # caught up, partition 1 newer than the first sample
        "new": {0: (0, 3)},  # no sample in the lookback before this cycle's
    }
    first = {"idle": {0: (5, 90), 1: (0, 40)}, "behind": {0: (5, 90)}, "retention": {0: (5, 90)},
             "grown": {0: (5, 90)}, "new": {0: (0, 3)}}
    oldest = {topic: (T0, PackedMarks.unpacked(marks)) for topic, marks in first.items() if topic != "new"}
    oldest["new"] = (T0, PackedMarks.unpacked(now["new"]))
    pipelines = [Pipeline(pk=i, topic=t, group="g") for i, t in enumerate(now)] + [Pipeline(pk=9, topic="idle", group="h")]
    committed = {0: {0: 100, 1: 50}, 1: {0: 99}, 2: {0: 100}, 3: {0: 100, 1: 7}, 4: {0: 3}, 9: {0: 100, 1: 50}}
    assert _topics_walked(pipelines, committed, now, oldest) == {"behind", "retention", "grown"}
    committed[9] = {0: 100, 1: 49}  # a second group on the idle topic falls behind
    assert _topics_walked(pipelines, committed, now, oldest) == {"behind", "retention", "grown", "idle"}
    # A topic not walked still answers the rule that reads it: its low did not move.
    series = TopicSeries({T0: oldest["idle"][1], T0.replace(hour=1): PackedMarks.unpacked(now["idle"])})
    assert not series.low_moved(0) and not series.low_moved(1)
