"""The reference job's output: records keyed by (topic, partition, offset) in SQLite.

Idempotent mode makes the key the primary key, so re-processing a range after a crash
overwrites instead of duplicating (exactly-once output from at-least-once reading). Append
mode keeps every write, which lets the delivery-semantics experiment count duplicates.
"""
from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Iterable


class OutputSink:
    def __init__(self, path: Path, idempotent: bool = True):
        self.path = Path(path)
        self.idempotent = idempotent
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as conn:
            key = ", PRIMARY KEY (topic, partition, offset)" if idempotent else ""
            conn.execute(
                "CREATE TABLE IF NOT EXISTS records (topic TEXT NOT NULL, partition INTEGER NOT NULL, "
                f"offset INTEGER NOT NULL, value BLOB, batch_id INTEGER NOT NULL{key})"
            )

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=30)
        conn.execute("PRAGMA journal_mode=WAL")
        return conn

    def write(self, batch_id: int, rows: Iterable[tuple[str, int, int, bytes | None]]) -> int:
        verb = "INSERT OR REPLACE" if self.idempotent else "INSERT"
        data = [(t, p, o, v, batch_id) for t, p, o, v in rows]
        with self._connect() as conn:
            conn.executemany(f"{verb} INTO records (topic, partition, offset, value, batch_id) VALUES (?, ?, ?, ?, ?)", data)
        return len(data)

    def offsets(self, topic: str) -> list[tuple[int, int]]:
        """Every (partition, offset) written, in order (duplicates kept in append mode)."""
        with self._connect() as conn:
            return conn.execute(
                "SELECT partition, offset FROM records WHERE topic = ? ORDER BY partition, offset", (topic,)
            ).fetchall()
