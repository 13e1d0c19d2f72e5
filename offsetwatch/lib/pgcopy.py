"""Bulk inserts for the collection cycle's hot path.

`copy_insert` writes model instances with PostgreSQL's COPY FROM STDIN: no SQL is compiled per
row and value (Django's bulk_create spent a third of a 10,000-partition cycle building its
INSERT), and the server parses one stream. On other databases (the demo's SQLite) it is
bulk_create. The instances' primary keys are not set: use it only where the caller does not
need them afterwards.
"""
from __future__ import annotations

from typing import Iterable

from django.db import connection, models

_AS_IS = {
    "BigIntegerField", "IntegerField", "PositiveIntegerField", "PositiveSmallIntegerField", "SmallIntegerField",
    "FloatField", "CharField", "TextField", "BooleanField", "BinaryField", "ForeignKey", "OneToOneField", "DateTimeField",
}


def copy_insert(model: type[models.Model], objs: Iterable[models.Model], batch_size: int = 1000) -> int:
    objs = list(objs)
    if not objs:
        return 0
    if connection.vendor != "postgresql":
        model.objects.bulk_create(objs, batch_size=batch_size)
        return len(objs)
    fields = [f for f in model._meta.concrete_fields if not f.primary_key]
    for obj in objs:
        for f in fields:
            if getattr(f, "auto_now_add", False) or getattr(f, "auto_now", False):
                f.pre_save(obj, add=True)  # as bulk_create does for timestamps
    columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    sql = f"COPY {connection.ops.quote_name(model._meta.db_table)} ({columns}) FROM STDIN"
    # Numbers, text, bytes, booleans and aware datetimes go to psycopg as they are; only other
    # fields (JSON above all) need Django's preparation. Thousands of rows per cycle.
    prepared = [(f.attname, f.get_internal_type() not in _AS_IS) for f in fields]
    with connection.cursor() as cursor:
        # Django's cursor wraps psycopg's; COPY needs the real one.
        with cursor.cursor.copy(sql) as copy:
            for obj in objs:
                copy.write_row([
                    fields[i].get_db_prep_save(getattr(obj, name), connection) if prep else getattr(obj, name)
                    for i, (name, prep) in enumerate(prepared)
                ])
    return len(objs)
