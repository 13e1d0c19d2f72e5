"""Bulk writes for the collection cycle's hot path, by PostgreSQL's COPY FROM STDIN.

`copy_insert` writes model instances: no SQL is compiled per row and value (Django's bulk_create
spent a third of a 10,000-partition cycle building its INSERT), and the server parses one
stream. The instances' primary keys are not set: use it only where the caller does not need
them afterwards.

`copy_rows` inserts rows given as tuples (no model instance built). `copy_upsert` inserts or
replaces rows given as tuples: a COPY into a temporary staging table of
the session, then one INSERT ... SELECT ... ON CONFLICT, the same few statements whatever the
number of rows (bulk_create's upsert binds a parameter per row and value: building that query
cost more than the cycle's evaluation of 10,000 partitions).

On other databases (the demo's SQLite) both are bulk_create.
"""
from __future__ import annotations

import json
from typing import Iterable, Sequence

from django.db import connection, models, transaction

_AS_IS = {
    "BigIntegerField", "IntegerField", "PositiveIntegerField", "PositiveSmallIntegerField", "SmallIntegerField",
    "FloatField", "CharField", "TextField", "BooleanField", "BinaryField", "ForeignKey", "OneToOneField", "DateTimeField",
}


_AS_IS_KIND, _JSON, _PREPARED = 0, 1, 2


def _copy(cursor, table: str, columns: Sequence[str], rows: Iterable[Sequence]) -> None:
    """COPY `rows` (values in `columns`' order, as psycopg adapts them) into `table`. The rows
    are formatted by psycopg's C code: binding them as parameters quoted each value in Python."""
    qn = connection.ops.quote_name
    sql = f"COPY {qn(table)} ({', '.join(qn(c) for c in columns)}) FROM STDIN"
    # Django's cursor wraps psycopg's; COPY needs the real one.
    with cursor.cursor.copy(sql) as copy:
        for row in rows:
            copy.write_row(row)


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
    # Numbers, text, bytes, booleans and aware datetimes go to psycopg as they are; JSON goes as
    # its compact text (the server parses it into jsonb either way: Django's adapter wrote ", "
    # and ": ", a tenth of the 2.6 MB of partition rows a 10,000-partition cycle writes); only
    # other fields need Django's preparation. Thousands of rows per cycle.
    kinds = [(f.attname, _JSON if isinstance(f, models.JSONField) else _AS_IS_KIND if f.get_internal_type() in _AS_IS
              else _PREPARED, f) for f in fields]

    def value(obj, name: str, kind: int, field):
        v = getattr(obj, name)
        if kind == _AS_IS_KIND or v is None:  # None: SQL NULL (as JSONField.get_db_prep_save writes it)
            return v
        if kind == _JSON and not hasattr(v, "resolve_expression"):
            return json.dumps(field.get_prep_value(v), cls=field.encoder, separators=(",", ":"))
        return field.get_db_prep_save(v, connection)

    rows = ([getattr(obj, name) if kind == _AS_IS_KIND else value(obj, name, kind, field) for name, kind, field in kinds]
            for obj in objs)
    with connection.cursor() as cursor:
        _copy(cursor, model._meta.db_table, [f.column for f in fields], rows)
    return len(objs)


def copy_rows(model: type[models.Model], columns: Sequence[str], rows: Iterable[Sequence]) -> int:
    """Insert `rows` (tuples of values in `columns`' order: database columns, values as psycopg
    takes them) into the model's table: copy_insert without building a model instance a row
    (its foreign-key descriptors alone cost 9 µs each; a cycle writes thousands of rows)."""
    rows = list(rows)
    if not rows:
        return 0
    if connection.vendor != "postgresql":
        model.objects.bulk_create(_instances(model, columns, rows), batch_size=1000)
        return len(rows)
    with connection.cursor() as cursor:
        _copy(cursor, model._meta.db_table, columns, rows)
    return len(rows)


def _instances(model: type[models.Model], columns: Sequence[str], rows: list[Sequence]) -> list[models.Model]:
    """The rows (values in `columns`' order) as model instances: the bulk_create fallback of
    the databases without COPY."""
    by_column = {f.column: f for f in model._meta.concrete_fields}
    return [model(**{by_column[c].attname: v for c, v in zip(columns, row)}) for row in rows]


def copy_upsert(model: type[models.Model], columns: Sequence[str], rows: Iterable[Sequence], *,
                conflict: Sequence[str], update: Sequence[str] = ()) -> int:
    """Insert `rows` (tuples of values in `columns`' order: database columns, values as psycopg
    takes them) into the model's table; a row whose `conflict` columns (a unique constraint) match
    a stored one replaces that row's `update` columns, or leaves it untouched when `update` is
    empty. Returns the number of rows given."""
    rows = list(rows)
    if not rows:
        return 0
    if connection.vendor != "postgresql":
        by_column = {f.column: f for f in model._meta.concrete_fields}
        objs = _instances(model, columns, rows)
        if update:
            model.objects.bulk_create(objs, batch_size=500, update_conflicts=True,
                                      unique_fields=[by_column[c].name for c in conflict],
                                      update_fields=[by_column[c].name for c in update])
        else:
            model.objects.bulk_create(objs, batch_size=500, ignore_conflicts=True)
        return len(rows)
    qn = connection.ops.quote_name
    table = model._meta.db_table
    staging = f"staging_{table}"
    names = ", ".join(qn(c) for c in columns)
    action = ("UPDATE SET " + ", ".join(f"{qn(c)} = EXCLUDED.{qn(c)}" for c in update)) if update else "NOTHING"
    # One transaction (a savepoint inside the caller's): the staging rows live until its commit.
    with transaction.atomic(), connection.cursor() as cursor:
        # The staging table takes the target's column types (no constraints, no defaults); it is
        # the session's, and emptied after use: the caller's transaction may write again (tests
        # run cycles in one transaction).
        cursor.execute(f"CREATE TEMPORARY TABLE IF NOT EXISTS {qn(staging)} ON COMMIT DELETE ROWS AS "
                       f"SELECT {names} FROM {qn(table)} WITH NO DATA")
        _copy(cursor, staging, columns, rows)
        cursor.execute(f"INSERT INTO {qn(table)} ({names}) SELECT {names} FROM {qn(staging)} "
                       f"ON CONFLICT ({', '.join(qn(c) for c in conflict)}) DO {action}")
        cursor.execute(f"TRUNCATE {qn(staging)}")
    return len(rows)
