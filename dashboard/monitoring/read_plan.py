"""What the next poll of a store reads (its read plan): each pipeline's position and the batch
times already imported around it, so only new and late rows are fetched. Built from the
database before every store poll (collectors.cycle.poll_store)."""
from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.db import connection
from django.db.models import BigIntegerField, Min, Q, Value

from dashboard.models import Batch, Store
from streamoffsets.stores.reading import ReadPlan
from streamoffsets.types import PipelineKey


def store_read_plan(*, store: Store, now: datetime) -> ReadPlan:
    """What the next poll of a store reads (three queries at most).

    A pipeline's position is its newest imported batch, never past the future horizon, and just
    before its oldest planned (not yet committed) checkpoint batch, so that one is read again.
    The window behind it is searched for rows that arrived late; the batch times already
    imported there are given so only the missing ones are fetched."""
    now_ms = int(now.timestamp() * 1000)
    plan = ReadPlan(
        now_ms=now_ms, future_tolerance_ms=int(settings.FUTURE_BATCH_TOLERANCE_S * 1000),
        late_window_ms=int(settings.LATE_BATCH_WINDOW_S * 1000), max_batches=settings.MAX_BATCHES_PER_CYCLE,
        # Listing an HBase table is a skip scan over its row keys (and every malformed key): it
        # runs every STORE_DISCOVERY_INTERVAL_S; the other stores list cheaply at every poll.
        discover=store.kind != Store.Kind.HBASE or store.discovered_at is None
        or (now - store.discovered_at).total_seconds() >= settings.STORE_DISCOVERY_INTERVAL_S,
    )
    rows = store.pipelines.all()
    if store.kind == Store.Kind.CHECKPOINT:  # only checkpoints have planned batches
        rows = rows.annotate(oldest_planned=Min("batches__batch_time_ms", filter=Q(batches__committed=False)))
        rows = rows.values_list("pk", "topic", "group", "last_batch_ms", "oldest_planned")
    else:
        rows = rows.values_list("pk", "topic", "group", "last_batch_ms", Value(None, output_field=BigIntegerField()))
    # Only stores with history look for late rows (the others give their current state).
    late = plan.late_window_ms > 0 and store.kind in (Store.Kind.HBASE, Store.Kind.CHECKPOINT)
    windows, keys = [], {}
    for pk, topic, group, ms, planned in rows:
        key = PipelineKey(topic, group)
        position = -1 if ms is None else min(ms, plan.horizon_ms)
        if planned is not None:
            position = min(position, planned - 1)
        plan.positions[key] = position
        if position >= 0 and late:
            windows.append((pk, position - plan.late_window_ms, position))
            keys[pk] = key
    for pk, ms in _committed_batch_times(windows):
        plan.recent.setdefault(keys[pk], set()).add(ms)
    return plan


def _committed_batch_times(windows: list[tuple[int, int, int]]) -> list[tuple[int, int]]:
    """(pipeline id, batch time) of the committed batches in each (pipeline id, from ms, to ms)
    window, in one query. The windows are a VALUES list joined to the batches: one OR'ed Q per
    pipeline cost Django ~0.2 ms each to compile (a tenth of a 500-pipeline cycle). They are
    integers from the database, written into the SQL as int() (nothing a user sends); a VALUES
    list in a WITH is both PostgreSQL's and SQLite's (the demo's)."""
    if not windows:
        return []
    values = ", ".join(f"({int(pk)}, {int(lo)}, {int(hi)})" for pk, lo, hi in windows)
    table = connection.ops.quote_name(Batch._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"WITH w(pk, lo, hi) AS (VALUES {values}) SELECT b.pipeline_id, b.batch_time_ms FROM {table} b "
            "JOIN w ON b.pipeline_id = w.pk AND b.batch_time_ms >= w.lo AND b.batch_time_ms <= w.hi "
            "WHERE b.committed = %s",
            [True],
        )
        return cursor.fetchall()
