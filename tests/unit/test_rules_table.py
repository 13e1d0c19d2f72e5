"""streamoffsets.rules: one row per case, each naming the rules that fire (the numbers of the module's
docstring), the status that results and a fragment of each reason. Rows are ids in pytest's output,
so a failure names the rule."""
from __future__ import annotations

import pytest

from streamoffsets import rules
from streamoffsets.evaluation import RetentionRisk, Sample, Status, evaluate_partitions, evaluate_status

NOW = 10_000.0
DAY = 86_400.0


def s(at, committed, high, last_batch):
    return Sample(NOW + at, dict(enumerate(committed)), dict(enumerate(high)),
                  None if last_batch is None else NOW + last_batch)


def parts(window, low=0):
    latest = window[-1]
    return evaluate_partitions(latest.committed, {p: (low, h) for p, h in latest.high.items()})


# (id, window, interval, extra keyword arguments of evaluate_plain, rules fired, status, reason fragments)
ROWS = [
    ("rule6-consuming-normally",
     [s(-20, [10], [12], -21), s(-10, [20], [22], -11), s(0, [30], [31], -1)], 10, {},
     [6], Status.OK, ["consuming normally"]),
    ("rule6-caught-up",
     [s(-10, [30], [30], -11), s(0, [30], [30], -1)], 10, {}, [6], Status.OK, ["caught up"]),
    ("rule1-high-out-of-range",
     [s(-10, [50], [40], -11), s(0, [50], [40], -1)], 10, {}, [1], Status.ERR, ["beyond the high watermark 40"]),
    ("rule1-low-out-of-range-twice",
     [s(-10, [2, 3], [9, 9], -11), s(0, [2, 3], [9, 9], -1)], 10, {"low": 4},
     [1, 1], Status.ERR, ["partition 0: 2 messages were deleted", "partition 1: 1 messages were deleted"]),
    ("rule2-went-backwards",
     [s(-10, [500], [600], -11), s(0, [100], [600], -1)], 10, {}, [2], Status.REWOUND, ["partition 0 500 -> 100"]),
    ("rule2-twice-in-one-window",
     [s(-20, [500], [600], -21), s(-10, [100], [600], -11), s(0, [50], [600], -1)], 10, {},
     [2, 2, 5], Status.REWOUND, ["500 -> 100", "100 -> 50", "lag grew"]),
    ("rule3-stopped-nothing-waiting",
     [s(-10, [30], [30], -60), s(0, [30], [30], -60)], 10, {}, [3], Status.STOPPED, ["nothing is waiting"]),
    ("rule3-stopped-with-lag-is-err",
     [s(-10, [30], [35], -60), s(0, [30], [40], -60)], 10, {}, [3], Status.ERR, ["stopped with 10 messages waiting"]),
    ("rule3-not-before-the-30s-minimum",
     [s(-10, [30], [30], -25), s(0, [30], [30], -25)], 5, {}, [6], Status.OK, ["caught up"]),
    ("rule3-cadence-unknown-uses-the-minimum",
     [s(0, [30], [30], -31)], None, {}, [3], Status.STOPPED, ["no batch for 31 s; nothing"]),
    ("rule4-stalled",
     [s(-20, [10], [20], -21), s(-10, [10], [25], -11), s(0, [10], [30], -1)], 10, {},
     [4, 5], Status.STALLED, ["no offset moved in 20 s", "lag grew"]),
    ("rule4-counts-from-where-offsets-stopped",
     [s(-40, [5], [20], -41), s(-30, [8], [25], -31), s(-20, [10], [25], -21), s(-10, [10], [25], -11),
      s(0, [10], [25], -1)], 10, {}, [4], Status.STALLED, ["no offset moved in 20 s"]),
    ("rule4-not-after-one-interval",
     [s(-20, [5], [20], -21), s(-10, [10], [25], -11), s(0, [10], [25], -1)], 10, {}, [6], Status.OK, ["consuming"]),
    ("rule4-not-when-messages-just-arrived-at-an-idle-job",
     [s(-30, [10], [10], -31), s(-20, [10], [10], -21), s(-10, [10], [10], -11), s(0, [10], [14], -1)], 10, {},
     [6], Status.OK, ["consuming normally"]),
    ("rule4-counts-only-the-stretch-with-messages-waiting",
     [s(-40, [10], [10], -41), s(-30, [10], [10], -31), s(-20, [10], [12], -21), s(-10, [10], [13], -11),
      s(0, [10], [14], -1)], 10, {}, [4], Status.STALLED, ["no offset moved in 20 s while 4 messages wait"]),
    ("rule4-not-without-batches",
     [s(-20, [10], [25], -21), s(-10, [10], [25], -21), s(0, [10], [25], -21)], 10, {}, [6], Status.OK, ["consuming"]),
    ("rule5-lag-growing",
     [s(-20, [10], [12], -21), s(-10, [15], [20], -11), s(0, [20], [30], -1)], 10, {},
     [5], Status.WARN, ["lag grew at every sample of the last 20 s: 2 -> 10"]),
    ("rule5-not-on-two-samples",
     [s(-10, [15], [20], -11), s(0, [20], [30], -1)], 10, {}, [6], Status.OK, ["consuming"]),
    ("rule7-retention-deadline",
     [s(-10, [20], [22], -11), s(0, [30], [31], -1)], 10,
     {"retention": [(0, RetentionRisk(25, 3600.0))]}, [6, 7], Status.WARN,
     ["consuming normally", "partition 0: at this rate it loses data in ~1 h"]),
    ("rule7-not-beyond-the-warning-time",
     [s(-10, [20], [22], -11), s(0, [30], [31], -1)], 10,
     {"retention": [(0, RetentionRisk(25, DAY))]}, [6], Status.OK, ["consuming normally"]),
    ("rule7-not-over-something-worse",
     [s(-10, [30], [35], -60), s(0, [30], [40], -60)], 10,
     {"retention": [(0, RetentionRisk(25, 60.0))]}, [3], Status.ERR, ["stopped with 10"]),
    ("rule8-drift",
     [s(-10, [30], [30], -11), s(0, [30], [30], -1)], 10,
     {"twins": [("store a", {0: 30}, "store b", {0: 25})]}, [8], Status.WARN,
     ["offsets differ between store a and store b: partition 0: 30 vs 25"]),
    ("rule8-not-when-a-store-is-empty",
     [s(-10, [30], [30], -11), s(0, [30], [30], -1)], 10,
     {"twins": [("store a", {0: 30}, "store b", {})]}, [6], Status.OK, ["caught up"]),
    ("rule8-beside-rule2",
     [s(-10, [500], [600], -11), s(0, [100], [600], -1)], 10,
     {"twins": [("store a", {0: 100}, "store b", {0: 500})]}, [2, 8], Status.REWOUND,
     ["500 -> 100", "offsets differ"]),
    ("rule7-and-rule8",
     [s(-10, [20], [22], -11), s(0, [30], [31], -1)], 10,
     {"retention": [(0, RetentionRisk(25, 3600.0))], "twins": [("store a", {0: 30}, "store b", {0: 29})]},
     [6, 7, 8], Status.WARN, ["consuming normally", "loses data", "offsets differ"]),
]


@pytest.mark.parametrize("window, interval, extra, fired, status, fragments",
                         [row[1:] for row in ROWS], ids=[row[0] for row in ROWS])
def test_rules(window, interval, extra, fired, status, fragments):
    extra = dict(extra)
    partitions = parts(window, extra.pop("low", 0))
    result = rules.evaluate_plain(window, partitions, interval, NOW, **extra)
    assert result.fired == fired
    assert result.status == status
    assert len(result.reasons) == len(fragments), result.reasons
    for reason, fragment in zip(result.reasons, fragments):
        assert fragment in reason


@pytest.mark.parametrize("window, interval, extra, fired, status, fragments",
                         [row[1:] for row in ROWS if not row[3]], ids=[row[0] for row in ROWS if not row[3]])
def test_the_collectors_hot_path_agrees_on_every_row(window, interval, extra, fired, status, fragments):
    partitions = parts(window, extra.get("low", 0))
    plain = rules.evaluate_plain(window, partitions, interval, NOW)
    tuned = evaluate_status(window, partitions, interval, NOW)
    assert (tuned.status, tuned.reasons) == (plain.status, plain.reasons)


def test_every_rule_has_a_row():
    assert {n for row in ROWS for n in row[4]} == set(range(1, 9))


def test_the_rewinds_and_the_rules_share_the_stop_threshold():
    # rule 3 fires exactly when batch_silence says stopped (the rewinds ask batch_silence).
    from streamoffsets.thresholds import batch_silence
    for silent in (29.0, 30.0, 30.5, 44.0, 45.5):
        stopped = batch_silence(NOW - silent, NOW, 15.0).stopped
        assert (rules.rule_3_stopped(NOW - silent, 15.0, NOW, 0) is not None) == stopped
    assert batch_silence(NOW - 45.5, NOW, 15.0) == (45.5, 45.0, True)
