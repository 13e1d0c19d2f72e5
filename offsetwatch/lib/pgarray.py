"""`field__any=[...]`: a lookup for the collection cycle's long lists of ids and topics.

On PostgreSQL it is `field = ANY(%s::type[])` with the whole list as ONE array parameter. Django's
`__in` writes one placeholder per value: for the 500 pipelines or topics of a 10,000-partition
cycle it prepares each value in Python, and psycopg then parses a query of 500 placeholders, about
1.5 ms per query more, in a dozen queries a cycle. Elsewhere (the demo's SQLite) it is `IN (...)`,
as `__in` writes it. An empty list matches nothing, as `__in=[]` does.

Registered on every field (dashboard.apps.DashboardConfig.ready calls `register`); values are
what the field stores (ids, not model instances).
"""
from __future__ import annotations

from django.core.exceptions import EmptyResultSet
from django.db.models import Field, ForeignObject, Lookup


class AnyOf(Lookup):
    lookup_name = "any"
    prepare_rhs = False

    def get_prep_lookup(self):
        return [self.lhs.output_field.get_prep_value(v) for v in self.rhs]

    def as_sql(self, compiler, connection):
        lhs, lhs_params = self.process_lhs(compiler, connection)
        field = self.lhs.output_field
        values = [field.get_db_prep_value(v, connection, prepared=True) for v in self.rhs]
        if connection.vendor == "postgresql":
            return f"{lhs} = ANY(%s::{field.db_type(connection)}[])", (*lhs_params, values)
        if not values:
            raise EmptyResultSet
        return f"{lhs} IN ({', '.join(['%s'] * len(values))})", (*lhs_params, *values)


def register() -> None:
    # A foreign key (`pipeline__any`, `pipeline_id__any`) has lookups of its own class.
    Field.register_lookup(AnyOf)
    ForeignObject.register_lookup(AnyOf)
