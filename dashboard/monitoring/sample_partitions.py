"""The sample tables' day partitions on PostgreSQL (migration 0021): created ahead and on demand,
thinned by swapping a day for its thinned copy, expired by dropping it.

dashboard_lagsample and dashboard_watermarksample are range-partitioned on sampled_at, one
partition per UTC day named <table>_pYYYYMMDD, plus <table>_default for rows no day partition
took (a write never fails for a missing partition; the prune thins and expires the default's rows
with DELETEs as before #16). A thinned partition carries its resolution in its table comment, so
a prune run does each day once. A raw day whose index was rebuilt once the day was over says so in
its comment too ("raw; index rebuilt"), so that is done once as well.
"""
from __future__ import annotations

from datetime import date, datetime, time, timedelta, timezone

from django.db import DatabaseError, connection, transaction

# table -> the key a sample is one of per time (the primary key without sampled_at)
SAMPLE_TABLES = {
    "dashboard_watermarksample": ("cluster_id", "topic"),
    "dashboard_lagsample": ("pipeline_id",),
}
LEVELS = ("minute", "hour")  # thinning levels, finer first: a partition's comment says its level
_COMMENT = "offsetwatch resolution: "
_REBUILT = "; index rebuilt"  # after the level in a raw day's comment: its index was rebuilt once


def partitioned() -> bool:
    return connection.vendor == "postgresql"


def day_of(at: datetime) -> date:
    return at.astimezone(timezone.utc).date()


def partition_name(table: str, day: date) -> str:
    return f"{table}_p{day:%Y%m%d}"


def _bounds(day: date) -> tuple[datetime, datetime]:
    start = datetime.combine(day, time(), tzinfo=timezone.utc)
    return start, start + timedelta(days=1)


def partitions_ensure(days: set[date], tables: tuple[str, ...] = tuple(SAMPLE_TABLES)) -> list[str]:
    """Create the day partitions of the sample tables that do not exist yet; returns the ones
    created. One catalog query when they all exist (every cycle but the first of a day). A day
    whose rows already went to the default partition keeps them there (creating its partition
    would fail): the prune thins and expires them."""
    if not partitioned() or not days:
        return []
    names = {partition_name(t, d): (t, d) for t in tables for d in days}
    with connection.cursor() as cur:
        cur.execute("SELECT n FROM unnest(%s::text[]) AS n WHERE to_regclass(quote_ident(n)) IS NULL", [list(names)])
        missing = [row[0] for row in cur.fetchall()]
        created = []
        for name in sorted(missing):
            table, day = names[name]
            start, end = _bounds(day)
            try:
                with transaction.atomic():  # a savepoint when the caller is in a transaction
                    cur.execute(f'CREATE TABLE IF NOT EXISTS "{name}" PARTITION OF "{table}" '
                                "FOR VALUES FROM (%s) TO (%s)", [start, end])
                created.append(name)
            except DatabaseError as exc:  # its day has rows in the default partition: they stay there
                if "default partition" not in str(exc):
                    raise
    return created


def partitions_list(table: str) -> list[tuple[str, date | None, str]]:
    """(name, day (None for the default partition), resolution: "raw", "minute" or "hour")."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT c.relname, coalesce(obj_description(c.oid, 'pg_class'), '') FROM pg_inherits i "
            "JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = %s::regclass ORDER BY c.relname",
            [table])
        rows = cur.fetchall()
    found = []
    for name, comment in rows:
        suffix = name[len(table) + 2:]
        day = datetime.strptime(suffix, "%Y%m%d").date() if name.startswith(f"{table}_p") else None
        level = comment[len(_COMMENT):].removesuffix(_REBUILT) if comment.startswith(_COMMENT) else "raw"
        found.append((name, day, level))
    return found


def partitions_rebuilt(table: str) -> set[str]:
    """The raw day partitions of a table whose index partition_index_rebuild rebuilt."""
    with connection.cursor() as cur:
        cur.execute("SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
                    "WHERE i.inhparent = %s::regclass AND obj_description(c.oid, 'pg_class') = %s",
                    [table, f"{_COMMENT}raw{_REBUILT}"])
        return {row[0] for row in cur.fetchall()}


def partition_index_rebuild(name: str) -> None:
    """Rebuild a finished raw day's primary-key index once, for its size. Written a cycle at a
    time, every key gets one entry per cycle in the middle of the index, so its pages split half
    empty (the watermark key's topic text is too wide for PostgreSQL's split-after-new-item
    rule): about 88 bytes a watermark row where a sorted build takes about 44. The day is no
    longer written, so one rebuild keeps it compact until it is thinned.
    REINDEX ... CONCURRENTLY builds the new index beside the old one: readers and any late writer
    go on using the old one and the rows never move. It cannot run in a transaction: inside one
    (a caller's atomic block, the tests) a plain REINDEX does the same, holding off the day's
    readers while it runs. A concurrent rebuild cut short (the task's time limit) leaves an
    invalid index beside the valid one; it is dropped before the next try."""
    with connection.cursor() as cur:
        if connection.in_atomic_block:
            cur.execute(f'REINDEX TABLE "{name}"')
        else:
            cur.execute("SELECT indexrelid::regclass::text FROM pg_index "
                        "WHERE indrelid = %s::regclass AND NOT indisvalid", [name])
            for (invalid,) in cur.fetchall():
                cur.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {invalid}")
            cur.execute(f'REINDEX TABLE CONCURRENTLY "{name}"')
        cur.execute(f"COMMENT ON TABLE \"{name}\" IS '{_COMMENT}raw{_REBUILT}'")


def _deferred_checks_run(cur) -> None:
    """A table with pending foreign key checks (rows written earlier in the caller's transaction)
    cannot be dropped or detached: run the checks now."""
    cur.execute("SET CONSTRAINTS ALL IMMEDIATE")


def _count(cur, name: str) -> int:
    cur.execute(f'SELECT count(*) FROM "{name}"')
    return cur.fetchone()[0]


def partition_drop(table: str, name: str) -> int:
    """Drop a day past retention; returns its row count."""
    with transaction.atomic(), connection.cursor() as cur:
        _deferred_checks_run(cur)
        cur.execute(f'LOCK TABLE "{name}" IN SHARE MODE')
        rows = _count(cur, name)
        cur.execute(f'DROP TABLE "{name}"')
    return rows


def partition_thin(table: str, name: str, day: date, level: str) -> int:
    """Replace a day's partition by its copy keeping each key's first sample per minute or hour;
    returns the rows removed. One transaction: the copy is built while readers go on reading the
    old partition (writers of that past day, if any, wait), then DETACH/ATTACH swap them; the copy
    has the key, the foreign key and a CHECK of the day's bounds before it is attached, so ATTACH
    scans nothing and the parent is locked only for the swap. Readers see the old rows or the
    thinned ones, never both or neither."""
    key = ", ".join(f'"{k}"' for k in SAMPLE_TABLES[table])
    fk_column, fk_table = ("pipeline_id", "dashboard_pipeline") if table == "dashboard_lagsample" else (
        "cluster_id", "dashboard_cluster")
    start, end = _bounds(day)
    new = f"{name}_{level}"
    bucket = f"date_trunc('{level}', sampled_at AT TIME ZONE 'UTC')"
    with transaction.atomic(), connection.cursor() as cur:
        _deferred_checks_run(cur)
        cur.execute(f'LOCK TABLE "{name}" IN SHARE MODE')
        before = _count(cur, name)
        cur.execute(f'CREATE TABLE "{new}" (LIKE "{table}" INCLUDING DEFAULTS)')
        cur.execute(f'INSERT INTO "{new}" SELECT DISTINCT ON ({key}, {bucket}) * FROM "{name}" '
                    f"ORDER BY {key}, {bucket}, sampled_at")
        kept = cur.rowcount
        cur.execute(f'ALTER TABLE "{new}" ADD CONSTRAINT "{new}_pkey" PRIMARY KEY ({key}, sampled_at)')
        cur.execute(f'ALTER TABLE "{new}" ADD CONSTRAINT "{new}_day" CHECK (sampled_at >= %s AND sampled_at < %s)',
                    [start, end])
        cur.execute(f'ALTER TABLE "{new}" ADD CONSTRAINT "{new}_fk" FOREIGN KEY ("{fk_column}") '
                    f'REFERENCES "{fk_table}" ("id") DEFERRABLE INITIALLY DEFERRED')
        cur.execute(f'ALTER TABLE "{table}" DETACH PARTITION "{name}"')
        cur.execute(f'ALTER TABLE "{table}" ATTACH PARTITION "{new}" FOR VALUES FROM (%s) TO (%s)', [start, end])
        cur.execute(f'DROP TABLE "{name}"')
        cur.execute(f'ALTER TABLE "{new}" RENAME TO "{name}"')
        cur.execute(f"COMMENT ON TABLE \"{name}\" IS '{_COMMENT}{level}'")
    return before - kept


def default_prune(table: str, *, raw_until: datetime, minute_until: datetime, hour_until: datetime) -> dict[str, int]:
    """The default partition's rows (a day written before its partition existed), pruned with
    DELETEs as before #16: expired, then thinned to the first sample per key per hour or minute."""
    name = f"{table}_default"
    key = " AND ".join(f'e."{k}" = t."{k}"' for k in SAMPLE_TABLES[table])
    counts = {}
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute(f'DELETE FROM "{name}" WHERE sampled_at < %s', [hour_until])
        counts["expired"] = cur.rowcount
        for level, since, until in (("hour", hour_until, minute_until), ("minute", minute_until, raw_until)):
            cur.execute(
                f'DELETE FROM "{name}" t WHERE t.sampled_at >= %s AND t.sampled_at < %s AND EXISTS ('
                f'SELECT 1 FROM "{name}" e WHERE {key} AND e.sampled_at < t.sampled_at AND '
                f"e.sampled_at >= date_trunc('{level}', t.sampled_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC')",
                [since, until])
            counts[level] = cur.rowcount
    return counts
