"""Bulk updates for the collection cycle's hot path.

`values_update` writes some fields of many model instances in one `UPDATE ... FROM unnest(...)`
per batch on PostgreSQL (one array per field). Django's bulk_update builds a `CASE WHEN pk = ...
THEN ...` per row and field: for the 500 open incidents of a stopped fleet, whose reasons change
every cycle, compiling it cost more than the rest of the evaluation. On other databases (the demo's SQLite) it is
bulk_update. Like bulk_update, it calls no save() and no pre_save (auto_now fields are not set).
"""
from __future__ import annotations

from json import dumps
from typing import Iterable

from django.db import connection, models


def values_update(model: type[models.Model], objs: Iterable[models.Model], fields: list[str],
                  batch_size: int = 1000) -> int:
    """Set `fields` of every instance in `objs` (saved ones: by primary key) to their values on the
    instance. Returns the number of rows updated."""
    objs = list(objs)
    if not objs:
        return 0
    if connection.vendor != "postgresql":
        return model.objects.bulk_update(objs, fields, batch_size=batch_size)
    meta = model._meta
    pk = meta.pk
    columns = [meta.get_field(name) for name in fields]
    for f in columns:
        if not f.concrete or f.many_to_many or f.primary_key:
            raise ValueError(f"{model.__name__}.{f.name} cannot be bulk updated")
    if any(obj.pk is None for obj in objs):
        raise ValueError(f"values_update of {model.__name__} instances without a primary key")
    # One row per primary key, the first given (bulk_update's CASE takes the first match too).
    objs = list({obj.pk: obj for obj in reversed(objs)}.values())
    qn = connection.ops.quote_name
    # One array per field, unnested into rows: a query of a few parameters whatever the number
    # of rows (psycopg parses a query's placeholders in Python: a VALUES list of 4,000 took longer
    # than the update). JSON goes as text and is cast back (an array of jsonb has no simple literal).
    json = [f.get_internal_type() == "JSONField" for f in columns]
    arrays = ", ".join(f"%s::{'text' if is_json else f.db_type(connection)}[]"
                       for f, is_json in zip((pk, *columns), (False, *json)))
    names = ", ".join(qn(f.column) for f in (pk, *columns))
    sets = ", ".join(f"{qn(f.column)} = v.{qn(f.column)}{'::' + f.db_type(connection) if is_json else ''}"
                     for f, is_json in zip(columns, json))
    sql = (f"UPDATE {qn(meta.db_table)} AS t SET {sets} FROM unnest({arrays}) AS v({names}) "
           f"WHERE t.{qn(pk.column)} = v.{qn(pk.column)}")
    updated = 0
    with connection.cursor() as cursor:
        for start in range(0, len(objs), batch_size):
            chunk = objs[start:start + batch_size]
            params = [[pk.get_db_prep_save(obj.pk, connection) for obj in chunk]]
            for f, is_json in zip(columns, json):
                values = [getattr(obj, f.attname) for obj in chunk]
                if is_json:  # None stays SQL NULL, as Django writes it
                    params.append([None if v is None else dumps(v, cls=f.encoder) for v in values])
                else:
                    params.append([f.get_db_prep_save(v, connection) for v in values])
            cursor.execute(sql, params)
            updated += cursor.rowcount
    return updated
