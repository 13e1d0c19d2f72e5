"""The audit log as CSV rows and JSON items (the audit page's downloads)."""
from __future__ import annotations

import logging
from typing import Iterable, Iterator

from dashboard.audit.services import change_lines

log = logging.getLogger(__name__)


AUDIT_COLUMNS = ["id", "at", "actor", "actor_user_id", "remote_addr", "action", "subject", "pipeline_id",
                 "pipeline_label", "change", "before", "after", "details", "prev_hash", "hash"]


def _compact(value) -> str | None:
    import json

    return None if value is None else json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def audit_csv_rows(events: Iterable[dict]) -> Iterator[list]:
    """Rows under AUDIT_COLUMNS: times in UTC ISO 8601, before/after/details as compact JSON,
    `change` as the page shows it ("p0: 120 → 40; p1: ..."). Every cell goes through csv_cell
    (csv_stream): an actor or subject beginning with "=" is not a formula in a spreadsheet."""
    from datetime import timezone as dt_timezone

    for e in events:
        yield [e["id"], e["at"].astimezone(dt_timezone.utc).isoformat(), e["actor"], e["actor_user_id"],
               e["remote_addr"], e["action"], e["subject"], e["pipeline_id"], e["pipeline_label"],
               "; ".join(change_lines(e["before"], e["after"])), _compact(e["before"]), _compact(e["after"]),
               _compact(e["details"]), e["prev_hash"], e["hash"]]


def audit_json_items(events: Iterable[dict]) -> Iterator[dict]:
    """The events as JSON objects (times in UTC ISO 8601), with the chain's hashes so a reader
    can check the export against the log."""
    from datetime import timezone as dt_timezone

    for e in events:
        yield {**e, "at": e["at"].astimezone(dt_timezone.utc).isoformat()}
