"""Model fields that keep bulk inserts cheap on PostgreSQL.

Django 5.2 bulk-inserts on PostgreSQL through UNNEST of one array per column. psycopg then
text-escapes bytea and JSON values inside the array literal in Python, byte by byte: for the
packed samples and the per-partition JSON of 500 pipelines that was the largest cost of a
collection cycle (bench/collect_cycle.py). A field with `get_placeholder` makes Django use plain
VALUES, where each value is one parameter escaped by libpq.
"""
from __future__ import annotations

from django.db import models


class _PlainValuesInsert:
    def get_placeholder(self, value, compiler, connection):
        return "%s"


class PackedIntsField(_PlainValuesInsert, models.BinaryField):
    """Little-endian int64s packed by offsetwatch.lib.packing."""


class RowsJSONField(_PlainValuesInsert, models.JSONField):
    """A JSON column written in bulk every cycle."""
