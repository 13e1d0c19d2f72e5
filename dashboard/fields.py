"""The model fields the migrations name (0004, 0008): kept as plain subclasses so the models and
migrations stay unchanged. They once carried a bulk-insert placeholder; every bulk write of
these columns now goes through PostgreSQL COPY (offsetwatch.lib.pgcopy), so that is gone.
"""
from __future__ import annotations

from django.db import models

from offsetwatch.lib.json_rows import rows_pack, rows_unpack


class PackedIntsField(models.BinaryField):
    """Little-endian int64s packed by offsetwatch.lib.packing."""


class RowsJSONField(models.JSONField):
    """A JSON column written in bulk every cycle (by COPY)."""


class PartitionRowsField(RowsJSONField):
    """One row (dict) per partition, stored with the keys once (offsetwatch.lib.json_rows):
    readers get the list of dicts as it was given."""

    def get_prep_value(self, value):
        return super().get_prep_value(rows_pack(value))

    def from_db_value(self, value, expression, connection):
        return rows_unpack(super().from_db_value(value, expression, connection))
