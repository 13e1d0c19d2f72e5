"""The model fields the migrations name (0004, 0008): kept as plain subclasses so the models and
migrations stay unchanged. They once carried a bulk-insert placeholder; every bulk write of
these columns now goes through PostgreSQL COPY (offsetwatch.lib.pgcopy), so that is gone.
"""
from __future__ import annotations

from django.db import models


class PackedIntsField(models.BinaryField):
    """Little-endian int64s packed by offsetwatch.lib.packing."""


class RowsJSONField(models.JSONField):
    """A JSON column written in bulk every cycle (by COPY)."""
