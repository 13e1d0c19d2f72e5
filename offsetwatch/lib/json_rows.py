"""A list of rows that share their keys (a pipeline's partitions, one dict each), as JSON with
the keys once: {"columns": [k1, k2, ...], "rows": [[v1, v2, ...], ...]}.

A pipeline's evaluation is rewritten every cycle with one such row per partition: with the keys
repeated in every row, a 10,000-partition cycle wrote 2.6 MB of JSON for the server to parse,
most of it the same fifteen names. Pure functions; dashboard.fields.PartitionRowsField applies
them on the way to and from the database, so its readers see the list of dicts unchanged (that
field holds lists: a dict already in the columns form is not one of its values).
"""
from __future__ import annotations

from operator import itemgetter
from typing import Any

_KEYS = {"columns", "rows"}


def rows_pack(value: Any) -> Any:
    """`value` (a list of dicts with the same keys) in the columns form; anything else (rows
    whose keys differ, an empty list, not a list) as it is, read back unchanged by rows_unpack."""
    if not isinstance(value, list) or not value or not all(type(r) is dict for r in value):
        return value
    keys = value[0].keys()
    if not all(map(keys.__eq__, map(dict.keys, value))):
        return value
    columns = list(keys)
    if not columns:
        return value
    # Every row of every pipeline at every cycle: the values are picked at C speed (a tuple is a
    # JSON array).
    pick = itemgetter(*columns) if len(columns) > 1 else (lambda r: (r[columns[0]],))
    return {"columns": columns, "rows": list(map(pick, value))}


def rows_unpack(value: Any) -> Any:
    """The list of dicts rows_pack was given (a value not in the columns form as it is)."""
    if type(value) is dict and value.keys() == _KEYS:
        columns = value["columns"]
        return [dict(zip(columns, row)) for row in value["rows"]]
    return value
