"""Log records as JSON lines (one object per line on stdout), for log shippers in production.

Plain `logging.Formatter` subclass, no dependency: `time` (UTC, ISO 8601 with milliseconds),
`level`, `logger`, `message`, then `exc_info` (the formatted traceback) when there is one, the
process id, and any `extra={...}` fields the caller passed that JSON can carry.
"""
from __future__ import annotations

import json
import logging
from datetime import datetime, timezone

# Attributes every LogRecord has: anything else on a record came from `extra=`.
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "pid": record.process,
        }
        if record.exc_info:
            # exc_text when a filter already formatted (and masked) it: offsetwatch.lib.logmask.
            entry["exc_info"] = record.exc_text or self.formatException(record.exc_info)
        for key, value in vars(record).items():
            if key not in _STANDARD and key not in entry:
                entry[key] = value if isinstance(value, (str, int, float, bool, type(None))) else repr(value)
        # One line per record whatever the message holds: json.dumps escapes newlines.
        return json.dumps(entry, ensure_ascii=False)
