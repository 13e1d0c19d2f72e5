"""The partition rows of a pipeline's page: worst first, filtered, only the first few.

A pipeline may read 1,000 partitions (issue #16). Its page sorts the newest evaluation's rows
worst first and renders only the first PARTITIONS_SHOWN; the rest come on demand, by the page's
URL (`shown`, `only`, `partition`: dashboard.params.parse_partition_params). Pure functions over
the stored rows: no query, and nothing computed per request beyond one sort (about 1 ms for
1,000 rows; rendering a table row costs ten times a sort key).
"""
from __future__ import annotations

from dataclasses import dataclass

from dashboard.params import PartitionParams
from streamoffsets.evaluation import PartitionState, Status

# 50 rows: about two screens, and they render in a few ms. Sorted worst first, they hold every
# partition that needs a look unless more than 50 are in trouble at once, which the header's
# count of partitions not OK then says (with a link to list only those).
PARTITIONS_SHOWN = 50
# The batch history shows the offsets of this many partitions, the first of the table above
# (the worst): with the batch's time, id, records, cadence and link, ten offset columns fit a
# laptop's width; every partition's offsets are in the batches' CSV and the API.
BATCH_COLUMNS = 10

_OUT_OF_RANGE = frozenset((PartitionState.LOW_OUT_OF_RANGE.value, PartitionState.HIGH_OUT_OF_RANGE.value))
_NOT_IN_BOTH = frozenset((PartitionState.MISSING_IN_STORE.value, PartitionState.UNKNOWN_PARTITION.value))


def partition_severity(row: dict, *, retention_warn_s: float) -> Status:
    """A partition row's own status, as the pipeline's rules judge it: ERR out of range (rule 1);
    the partition rules' STALLED or STOPPED; WARN when in the store or the topic only, or when
    retention deletes its unread messages within `retention_warn_s` (rule 7); else OK."""
    state = row.get("state")
    if state in _OUT_OF_RANGE:
        return Status.ERR
    status = Status.__members__.get(row.get("status") or "OK", Status.OK)
    if status > Status.OK:
        return status
    left = row.get("retention_seconds_left")
    if state in _NOT_IN_BOTH or (left is not None and left <= retention_warn_s):
        return Status.WARN
    return Status.OK


def _worst_first(row: dict) -> tuple:
    """Status, then lag in time (how late the job's output is: what on-call is asked about), then
    lag in messages, then the partition's number. Unknown lags after known ones of the status."""
    seconds, lag = row.get("lag_seconds"), row.get("lag")
    return (-row["severity"], seconds is None, -(seconds or 0), lag is None, -(lag or 0), row["partition"])


@dataclass
class PartitionView:
    rows: list[dict]  # the rows shown, worst first, each with "severity" (its Status's name)
    total: int  # partitions of the evaluation
    problems: int  # of them, those whose own status is above OK
    matched: int  # those that pass the filters (`only`, `partition`)
    params: PartitionParams

    @property
    def more(self) -> int:
        """How many matching rows are not shown."""
        return self.matched - len(self.rows)


def partition_view(*, rows: list[dict], params: PartitionParams, retention_warn_s: float) -> PartitionView:
    """The rows of one evaluation (decoded fresh for this request: marked in place) that the page
    shows: those matching the filters, worst first, the first `params.shown`."""
    problems = 0
    for row in rows:
        severity = partition_severity(row, retention_warn_s=retention_warn_s)
        row["severity"] = severity
        problems += severity > Status.OK
    matching = rows
    if params.partition is not None:
        matching = [row for row in matching if row["partition"] == params.partition]
    if params.only_problems:
        matching = [row for row in matching if row["severity"] > Status.OK]
    shown = sorted(matching, key=_worst_first)[:params.shown]
    for row in shown:
        row["severity"] = row["severity"].name
    return PartitionView(rows=shown, total=len(rows), problems=problems, matched=len(matching), params=params)


def batch_columns(view: PartitionView) -> list[int]:
    """The partitions whose offsets the batch history shows: the first BATCH_COLUMNS of the
    table (the worst, or the one asked for), in partition order."""
    return sorted(row["partition"] for row in view.rows[:BATCH_COLUMNS])
