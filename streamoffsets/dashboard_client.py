"""The job's side of the dashboard's API: report where it started, and find, claim and report
approved rewinds. Standard library only, a timeout on every call.

Every refusal or failure is a DashboardError carrying the HTTP status (None when the dashboard
could not be reached at all), so a caller can tell "another instance won the claim" (409) from
"the dashboard is down". A start report that cannot be delivered never stops a job; what an
unreachable dashboard means for a pending rewind is the job's `rewind_policy`
(streamoffsets.restart).
"""
from __future__ import annotations

import json
import logging
import os
import socket
import urllib.error
import urllib.request
import uuid
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # only for annotations: restart.py imports this module
    from streamoffsets.restart import StartPlan

log = logging.getLogger("offsetwatch.dashboard")


class DashboardError(Exception):
    """The dashboard refused a call or could not be reached; the message says which and why.

    `status` is the HTTP status of a refusal (409: the rewind is not in a state that allows
    this, e.g. another instance claimed it), None when the dashboard was unreachable or answered
    something that is not the API's JSON.
    """

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status

    @property
    def unreachable(self) -> bool:
        return self.status is None


def instance_id() -> str:
    """Who is claiming: `host:pid:run` (run = a short random id, so two runs of one process differ)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class DashboardClient:
    def __init__(self, base_url: str, token: str, timeout_s: float = 5.0):
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout_s = timeout_s

    def _call(self, method: str, path: str, payload: dict | None = None) -> dict:
        request = urllib.request.Request(
            f"{self.base_url}{path}",
            data=None if payload is None else json.dumps(payload).encode(),
            method=method,
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json",
                     "Accept": "application/json"},
        )
        where = f"{method} {self.base_url}{path}"
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                body = response.read()
        except urllib.error.HTTPError as exc:
            try:
                message = json.loads(exc.read()).get("error", "")
            except (ValueError, AttributeError):
                message = ""
            raise DashboardError(f"{where}: HTTP {exc.code}: {message or exc.reason}", exc.code) from exc
        except (urllib.error.URLError, OSError) as exc:  # refused, timed out, DNS, TLS
            reason = getattr(exc, "reason", exc)
            raise DashboardError(f"{where}: unreachable: {reason}") from exc
        try:
            data = json.loads(body or b"{}")
        except ValueError as exc:  # a proxy's HTML page, a truncated answer
            raise DashboardError(f"{where}: the answer is not JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise DashboardError(f"{where}: the answer is not a JSON object")
        return data

    def _post(self, path: str, payload: dict) -> dict:
        return self._call("POST", path, payload)

    def report_start(self, plan: StartPlan) -> dict:
        return self._post("/api/v1/start-reports", plan.report())

    # --- rewinds (the token's pipeline only) ------------------------------------------------------
    def pending_rewind(self) -> dict | None:
        """The rewind this pipeline's job must not start past, or None: approved, or claimed by an
        instance that has not reported `applied` (`status`, `claimed_by`, `claim_lease_expires_at`,
        `claimable`: a claim would win now)."""
        rewind = self._call("GET", "/api/v1/rewinds/pending").get("rewind")
        if rewind is not None and not isinstance(rewind, dict):
            raise DashboardError(f"GET {self.base_url}/api/v1/rewinds/pending: 'rewind' is not an object: {rewind!r}")
        return rewind

    def _rewind(self, path: str, payload: dict) -> dict:
        rewind = self._post(path, payload).get("rewind")
        if not isinstance(rewind, dict):
            raise DashboardError(f"POST {self.base_url}{path}: the answer has no 'rewind' object")
        return rewind

    def claim_rewind(self, rewind_id: int, instance: str) -> dict:
        """Claim it (again, if this instance holds it: answered with the rewind); DashboardError with
        status 409 when another instance holds it within its lease (or it expired)."""
        return self._rewind(f"/api/v1/rewinds/{int(rewind_id)}/claim", {"instance": instance})

    def rewind_applied(self, rewind_id: int, instance: str, offsets: dict[int, int], marker_batch_ms: int) -> dict:
        """This instance started from `offsets`, saved to its store as the batch at `marker_batch_ms`."""
        payload = {"instance": instance, "offsets": {str(p): int(o) for p, o in sorted(offsets.items())},
                   "marker_batch_ms": int(marker_batch_ms)}
        return self._rewind(f"/api/v1/rewinds/{int(rewind_id)}/applied", payload)

    def rewind_failed(self, rewind_id: int, instance: str, error: str) -> dict:
        return self._rewind(f"/api/v1/rewinds/{int(rewind_id)}/failed", {"instance": instance, "error": error})


def report_start_quietly(client: DashboardClient | None, plan: StartPlan) -> bool:
    """Send the start report; log (never raise) when the dashboard is unreachable or refuses."""
    if client is None:
        return False
    try:
        client.report_start(plan)
        return True
    except DashboardError as exc:
        log.warning("start report not recorded by the dashboard (the job starts anyway): %s", exc)
        return False
