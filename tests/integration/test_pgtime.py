"""Repeated timestamps are parsed once per result (offsetwatch.lib.pgtime): same values as
Django's own loader, the connection's time zone, and the loader really in use."""
from __future__ import annotations

from datetime import datetime, timezone

import pytest
from django.db import connection

from offsetwatch.lib import pgtime

pytestmark = [pytest.mark.django_db, pytest.mark.skipif(connection.vendor != "postgresql",
                                                        reason="a psycopg loader: PostgreSQL only")]


def _times(sql: str) -> list[datetime]:
    with connection.cursor() as cursor:
        cursor.execute(sql)
        return [row[0] for row in cursor.fetchall()]


def test_repeated_values_are_one_object_equal_to_the_parsed_text():
    rows = _times("SELECT t FROM (VALUES (timestamptz '2026-11-26 10:40:38.218123+00'), "
                  "(timestamptz '2026-11-26 10:40:38.218123+00'), (timestamptz '2026-11-26 12:40:38+02')) AS v(t)")
    assert rows[0] == datetime(2026, 11, 26, 10, 40, 38, 218123, tzinfo=timezone.utc)
    assert rows[1] is rows[0]  # parsed once
    assert rows[2] == datetime(2026, 11, 26, 10, 40, 38, tzinfo=timezone.utc) and rows[2] is not rows[0]
    assert all(t.tzinfo is not None and t.utcoffset().total_seconds() == 0 for t in rows)


def test_the_cached_loader_is_the_one_cursors_use():
    from psycopg.adapt import PyFormat  # noqa: F401  (psycopg present: the loader below is its)
    from psycopg.postgres import types
    from psycopg.pq import Format

    connection.ensure_connection()
    with connection.cursor() as cursor:
        loader = cursor.cursor.adapters.get_loader(types["timestamptz"].oid, Format.TEXT)
    assert loader.__name__ == "CachedTzLoader"
    assert loader.timezone == connection.timezone


def test_a_result_past_the_cache_bound_starts_the_cache_again_and_stays_right(monkeypatch):
    monkeypatch.setattr(pgtime, "CACHE_AT_MOST", 10)
    rows = _times("SELECT timestamptz '2026-01-01 00:00:00+00' + n * interval '1 second' FROM generate_series(0, 99) n")
    assert [int(t.timestamp() - rows[0].timestamp()) for t in rows] == list(range(100))
