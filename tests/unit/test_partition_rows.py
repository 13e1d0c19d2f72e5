"""dashboard.monitoring.partition_rows: a partition row's own status (one numbered case per rule
it follows) and the page's order and filters over a pipeline's rows."""
from __future__ import annotations

import pytest

from dashboard.monitoring.partition_rows import batch_columns, partition_severity, partition_view
from dashboard.params import PartitionParams
from streamoffsets.evaluation import Status

WARN_S = 6 * 3600.0


def row(partition: int, *, state: str = "lagging", status: str = "OK", lag: int | None = 10,
        lag_seconds: float | None = None, retention_seconds_left: float | None = None) -> dict:
    return {"partition": partition, "state": state, "status": status, "lag": lag, "lag_seconds": lag_seconds,
            "retention_seconds_left": retention_seconds_left}


# (id: the case and why, row, its status)
SEVERITIES = [
    ("1-low-out-of-range-is-ERR-as-rule-1", row(0, state="low out-of-range", lag=None), Status.ERR),
    ("2-high-out-of-range-is-ERR-as-rule-1", row(0, state="high out-of-range", lag=None), Status.ERR),
    ("3-out-of-range-wins-over-a-stall", row(0, state="low out-of-range", status="STALLED"), Status.ERR),
    ("4-partition-rules-STOPPED", row(0, status="STOPPED"), Status.STOPPED),
    ("5-partition-rules-STALLED", row(0, status="STALLED"), Status.STALLED),
    ("6-missing-in-store-is-WARN", row(0, state="missing in store", lag=None), Status.WARN),
    ("7-unknown-partition-is-WARN", row(0, state="unknown partition", lag=None), Status.WARN),
    ("8-retention-within-the-warning-is-WARN-as-rule-7", row(0, retention_seconds_left=WARN_S), Status.WARN),
    ("9-retention-beyond-the-warning-is-OK", row(0, retention_seconds_left=WARN_S + 1), Status.OK),
    ("10-lagging-is-OK", row(0), Status.OK),
    ("11-an-unknown-stored-status-is-not-a-crash", row(0, status="BOGUS"), Status.OK),
    ("12-rows-older-than-the-status-field", {"partition": 0, "state": "ok", "lag": 0}, Status.OK),
]


@pytest.mark.parametrize(("case", "partition_row", "expected"), SEVERITIES, ids=[c[0] for c in SEVERITIES])
def test_partition_severity(case, partition_row, expected):
    assert partition_severity(partition_row, retention_warn_s=WARN_S) is expected


def rows_of_a_pipeline() -> list[dict]:
    return [
        row(0, lag=5, lag_seconds=50.0),
        row(1, lag=900, lag_seconds=2.0),  # more messages behind, but less late than 0
        row(2, lag=700, lag_seconds=None),  # no lag in time: after those with one
        row(3, lag=800, lag_seconds=None),
        row(4, status="STALLED", lag=1),
        row(5, state="low out-of-range", lag=None),
        row(6, lag=5, lag_seconds=50.0),  # ties 0: by number
        row(7, status="STOPPED", lag=1),
    ]


def view(**params):
    return partition_view(rows=rows_of_a_pipeline(), params=PartitionParams(**{"shown": 50, **params}),
                          retention_warn_s=WARN_S)


def test_worst_first_status_then_lag_in_time_then_lag_in_messages_then_number():
    shown = view()
    assert [r["partition"] for r in shown.rows] == [5, 7, 4, 0, 6, 1, 3, 2]
    assert [r["severity"] for r in shown.rows[:4]] == ["ERR", "STOPPED", "STALLED", "OK"]
    assert (shown.total, shown.problems, shown.matched, shown.more) == (8, 3, 8, 0)


def test_the_first_n_and_how_many_more():
    shown = view(shown=3)
    assert [r["partition"] for r in shown.rows] == [5, 7, 4]
    assert shown.more == 5
    assert view(shown=None).more == 0  # "all"


def test_filters_only_problems_and_one_partition():
    assert [r["partition"] for r in view(only_problems=True).rows] == [5, 7, 4]
    assert [r["partition"] for r in view(partition=3).rows] == [3]
    assert view(partition=3, only_problems=True).rows == []
    missing = view(partition=99)
    assert (missing.rows, missing.matched, missing.total) == ([], 0, 8)


def test_batch_columns_are_the_first_rows_in_partition_order():
    rows = [row(p, lag=p) for p in range(30)]
    shown = partition_view(rows=rows, params=PartitionParams(shown=50), retention_warn_s=WARN_S)
    assert batch_columns(shown) == list(range(20, 30))  # the ten most lagging
    one = partition_view(rows=[row(p, lag=p) for p in range(30)], params=PartitionParams(shown=50, partition=4),
                         retention_warn_s=WARN_S)
    assert batch_columns(one) == [4]


def test_a_partition_row_is_escaped_and_says_what_the_template_said():
    from dashboard.templatetags.offsetwatch import partition_row

    html = partition_row({**row(7, status="STALLED", lag=40), "severity": "STALLED", "committed": 2, "low": 0,
                          "high": 42, "lag_is_upper_bound": True, "lag_method": "interpolated", "lag_seconds": 45.0,
                          "retention_margin": 2, "status_reason": '<script>alert("x")</script>', "messages_lost": 0})
    cells = html.split("</td>")
    assert html.startswith('<tr data-partition="7" data-status="STALLED">')
    assert '<td class="num lag" title="at most: a compacted topic has offset gaps">≤ 40' in cells[4]
    assert '<td class="num" title="interpolated">45 s' in cells[5]
    assert "<script>" not in html and '&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;' in cells[8]
    lost = partition_row({**row(3, state="low out-of-range", lag=None), "severity": "ERR", "messages_lost": 12345,
                          "lag_absent": "out of range", "committed": 1, "low": 12346, "high": 20000})
    assert '<td class="num lag" title="out of range">—</td>' in lost
    assert '<td class="state-bad">low out-of-range: 12,345 messages deleted before being processed</td>' in lost
