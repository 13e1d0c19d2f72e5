"""A logging filter that masks store credentials in every line the console handler writes.

The project's own log calls already name sources by masked labels and masked errors (collectors/
cycle.py); this filter is the last guard for the rest (a client library's message, a traceback
quoting a URL): any URL in the formatted message or traceback goes through mask_url. It cannot
know a password that appears without its URL; the call sites mask those with mask_secrets.
"""
from __future__ import annotations

import logging

from streamoffsets.urls import mask_secrets


class MaskSecretsFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a malformed call: let the handler report it as it would
            return True
        masked = mask_secrets(message)
        if masked != message:
            record.msg, record.args = masked, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = mask_secrets(record.exc_text)
        return True
