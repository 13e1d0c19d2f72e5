"""The job's side of the dashboard's API: report where it started (and, with the rewinds issue,
claim approved rewinds). Standard library only, a timeout on every call; a dashboard that cannot
be reached never stops a job from starting, it is logged instead."""
from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request

from streamoffsets.restart import StartPlan

log = logging.getLogger("offsetwatch.dashboard")


class DashboardError(Exception):
    """The dashboard refused a call or could not be reached; the message says which and why."""


class DashboardClient:
    def __init__(self, base_url: str, token: str, timeout_s: float = 5.0):
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout_s = timeout_s

    def _post(self, path: str, payload: dict) -> dict:
        request = urllib.request.Request(
            f"{self.base_url}{path}",
            data=json.dumps(payload).encode(),
            method="POST",
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                return json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as exc:
            try:
                message = json.loads(exc.read()).get("error", "")
            except ValueError:
                message = ""
            raise DashboardError(f"{self.base_url}{path}: HTTP {exc.code}: {message or exc.reason}") from exc
        except (urllib.error.URLError, OSError) as exc:
            raise DashboardError(f"{self.base_url}{path}: unreachable: {exc}") from exc

    def report_start(self, plan: StartPlan) -> dict:
        return self._post("/api/v1/start-reports", plan.report())


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
