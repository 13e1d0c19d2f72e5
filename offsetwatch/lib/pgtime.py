"""Timestamps read from PostgreSQL, each distinct text parsed once per query result.

The collection cycle reads thousands of rows per query whose timestamps repeat: every pipeline's
lag samples and every topic's watermark samples share the cycles' few `sampled_at` values. The
timestamptz loader Django installs parses each in Python (about 2.6 µs a value: 26 ms of a
10,000-row read). This loader keeps what it parsed, keyed by the value's exact text, for the
life of the loader (psycopg makes one per cursor's result types), so a repeated value costs one
dictionary lookup. Same text, same session time zone: the same datetime (immutable).

Installed on each new connection (`register`, from dashboard.apps): it carries Django's time
zone, so Django's own per-cursor check (backends.postgresql.base.create_cursor) keeps it.
"""
from __future__ import annotations

from django.db.backends.signals import connection_created

# Values kept by one loader before it starts again: a result of millions of distinct times
# (an export) keeps the memory bounded.
CACHE_AT_MOST = 4096


def _loader_class(timezone):
    from django.db.backends.postgresql.psycopg_any import BaseTzLoader

    class CachedTzLoader(BaseTzLoader):
        def __init__(self, oid, context=None):
            super().__init__(oid, context)
            self._parsed: dict[bytes, object] = {}

        def load(self, data):
            key = bytes(data)
            value = self._parsed.get(key)
            if value is None:
                if len(self._parsed) >= CACHE_AT_MOST:
                    self._parsed.clear()
                value = self._parsed[key] = super().load(data)
            return value

    CachedTzLoader.timezone = timezone
    return CachedTzLoader


def _install(sender, connection, **kwargs) -> None:
    if connection.vendor != "postgresql":
        return
    connection.connection.adapters.register_loader("timestamptz", _loader_class(connection.timezone))


def register() -> None:
    connection_created.connect(_install, dispatch_uid="offsetwatch.lib.pgtime")
