"""`SQLiteResponseStore`: the contract of `anchortrack.server._records` over a SQLite file."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sqlite3
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from anchortrack.server._records import DEFAULT_RETENTION, Clock, Head, ResponseStore, Row


#: Version of the SQLite schema, kept in ``PRAGMA user_version``.  Version 2 added ``owner``; a version-1
#: file is migrated in place, its responses belonging to requests without an API key.
SCHEMA_VERSION = 2

_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    id TEXT PRIMARY KEY,
    previous_response_id TEXT,
    status TEXT NOT NULL,
    created_at REAL NOT NULL,
    expires_at REAL NOT NULL,
    input_json TEXT NOT NULL,
    output_json TEXT NOT NULL,
    response_json TEXT NOT NULL,
    owner TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS responses_previous_response_id ON responses (previous_response_id);
CREATE INDEX IF NOT EXISTS responses_expires_at ON responses (expires_at);
"""

_COLUMNS = ", ".join(field.name for field in dataclasses.fields(Row))


class SQLiteResponseStore(ResponseStore):
    """Responses kept in a SQLite file (WAL mode, created with its directories; ``":memory:"`` for a private
    database), surviving restarts.  A file of a newer schema is refused rather than misread."""

    def __init__(
        self, path: str | os.PathLike[str], *, retention: float = DEFAULT_RETENTION, clock: Clock = time.time
    ) -> None:
        super().__init__(retention, clock)
        self.path = os.fspath(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._conn = sqlite3.connect(self.path, timeout=10.0, isolation_level=None, check_same_thread=False)
        self._closed = False
        try:
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._migrate()
        except BaseException:
            self._conn.close()
            raise

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        """The lock and one ``BEGIN IMMEDIATE`` transaction: a save holds across processes too."""
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise

    def _migrate(self) -> None:
        with self._transaction():
            version = int(self._conn.execute("PRAGMA user_version").fetchone()[0])
            if version > SCHEMA_VERSION:
                newer = f"{self.path}: schema version {version} is newer than the supported version"
                raise RuntimeError(f"{newer} {SCHEMA_VERSION}")
            if version == 1:
                self._conn.execute("ALTER TABLE responses ADD COLUMN owner TEXT NOT NULL DEFAULT ''")
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    self._conn.execute(statement)
            self._conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def _live(self, response_id: str, now: float) -> Row | None:
        values = self._conn.execute(
            f"SELECT {_COLUMNS} FROM responses WHERE id = ? AND expires_at > ?",  # noqa: S608
            (response_id, now),
        ).fetchone()
        return None if values is None else Row(*values)

    def _put(self, row: Row) -> None:
        self._conn.execute(
            f"INSERT OR REPLACE INTO responses ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",  # noqa: S608
            dataclasses.astuple(row),
        )

    def _drop(self, response_id: str) -> bool:
        return self._conn.execute("DELETE FROM responses WHERE id = ?", (response_id,)).rowcount > 0

    def _drop_expired(self, now: float) -> int:
        return self._conn.execute("DELETE FROM responses WHERE expires_at <= ?", (now,)).rowcount

    def _holding(self, text: str, now: float) -> list[str]:
        cursor = self._conn.execute(
            "SELECT id FROM responses WHERE expires_at > ?"
            " AND (instr(input_json, ?) OR instr(output_json, ?)) ORDER BY created_at, rowid",
            (now, text, text),
        )
        return [values[0] for values in cursor]

    def generation(self) -> object:
        """This process's count, and SQLite's ``data_version`` (changed by other connections' commits)."""
        with self._lock:
            return self._generation, self._conn.execute("PRAGMA data_version").fetchone()[0]

    def _heads(self, ids: Sequence[str], now: float) -> list[Head]:
        cursor = self._conn.execute(
            "SELECT id, previous_response_id, status, owner, created_at FROM responses"
            " WHERE id IN (SELECT value FROM json_each(?)) AND expires_at > ?",
            (json.dumps(list(ids)), now),
        )
        return [Head(*values) for values in cursor]

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._conn.close()
