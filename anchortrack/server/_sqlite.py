"""
`SQLiteResponseStore`: responses in a SQLite file (WAL), surviving restarts.

Same contract as the memory store (see `anchortrack.server._records`); the
save policy is checked and applied in one ``BEGIN IMMEDIATE`` transaction, so
it holds across threads and across processes sharing the file.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Literal

from anchortrack.server._records import (
    DEFAULT_RETENTION,
    EXPIRED,
    PURGE_INTERVAL,
    UNSET,
    ChainLink,
    Clock,
    Row,
    StoredResponse,
    _Unset,
    decode_row,
    row_link,
    row_to_save,
)


#: Version of the SQLite schema, kept in ``PRAGMA user_version``.  Version 2
#: added ``owner``; a version-1 file is migrated in place, its responses
#: belonging to requests without an API key.
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

_COLUMNS = (
    "id, previous_response_id, status, created_at, expires_at, input_json, output_json, response_json, owner"
)


class SQLiteResponseStore:
    """
    Responses kept in a SQLite file (WAL mode), surviving restarts.

    The file and its parent directories are created on first use.  The
    schema version lives in ``PRAGMA user_version``; a file written by a newer
    schema is refused rather than misread.

    Args:
        path: The database file (``":memory:"`` for a private in-memory one).
        retention: Seconds a response stays retrievable and chainable.
        clock: Returns the current time in seconds; ``time.time`` by default.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        retention: float = DEFAULT_RETENTION,
        clock: Clock = time.time,
    ) -> None:
        self.retention = retention
        self.path = os.fspath(path)
        self._clock = clock
        self._lock = threading.Lock()
        self._last_purge = -math.inf
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

    def _migrate(self) -> None:
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                version = int(self._conn.execute("PRAGMA user_version").fetchone()[0])
                if version > SCHEMA_VERSION:
                    raise RuntimeError(
                        f"{self.path}: schema version {version} is newer than the "
                        f"supported version {SCHEMA_VERSION}"
                    )
                if version == 1:
                    self._conn.execute("ALTER TABLE responses ADD COLUMN owner TEXT NOT NULL DEFAULT ''")
                for statement in _SCHEMA.split(";"):
                    if statement.strip():
                        self._conn.execute(statement)
                self._conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise

    @staticmethod
    def _row(values: tuple[Any, ...] | None) -> Row | None:
        return None if values is None else Row(*values)

    def _live(self, response_id: str, now: float) -> Row | None:
        cursor = self._conn.execute(
            f"SELECT {_COLUMNS} FROM responses WHERE id = ? AND expires_at > ?",  # noqa: S608
            (response_id, now),
        )
        return self._row(cursor.fetchone())

    def get(self, response_id: str) -> StoredResponse | None:
        """Return the live record for *response_id*, or ``None``."""
        with self._lock:
            row = self._live(response_id, self._clock())
        return None if row is None else decode_row(row)

    def link(self, response_id: str) -> ChainLink | None:
        """The live record's chain data, without decoding the response object."""
        with self._lock:
            row = self._live(response_id, self._clock())
        return None if row is None else row_link(row)

    def save(
        self,
        record: StoredResponse,
        *,
        overwrite: bool = False,
        expected_previous_response_id: str | Literal[_Unset.UNSET] | None = UNSET,
    ) -> StoredResponse:
        """Store *record* under the save policy, atomically; see `ResponseStore`."""
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                now = self._clock()
                row = row_to_save(
                    self._live(record.id, now),
                    record,
                    now=now,
                    retention=self.retention,
                    overwrite=overwrite,
                    expected_previous_response_id=expected_previous_response_id,
                )
                self._conn.execute(
                    f"INSERT OR REPLACE INTO responses ({_COLUMNS}) "  # noqa: S608
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    dataclasses.astuple(row),
                )
                if now - self._last_purge >= PURGE_INTERVAL:
                    self._conn.execute("DELETE FROM responses WHERE expires_at <= ?", (now,))
                    self._last_purge = now
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
        return decode_row(row)

    def delete(self, response_id: str) -> bool:
        """Remove a record; return whether one was there."""
        with self._lock:
            cursor = self._conn.execute("DELETE FROM responses WHERE id = ?", (response_id,))
            return cursor.rowcount > 0

    def expire(self, response_id: str) -> bool:
        """Make a live record look expired; return whether one was live."""
        with self._lock:
            cursor = self._conn.execute(
                "UPDATE responses SET expires_at = ? WHERE id = ? AND expires_at > ?",
                (EXPIRED, response_id, self._clock()),
            )
            return cursor.rowcount > 0

    def purge_expired(self) -> int:
        """Delete expired records; return how many."""
        with self._lock:
            now = self._clock()
            cursor = self._conn.execute("DELETE FROM responses WHERE expires_at <= ?", (now,))
            self._last_purge = now
            return cursor.rowcount

    def count(self) -> int:
        """How many live records the store holds."""
        with self._lock:
            cursor = self._conn.execute(
                "SELECT COUNT(*) FROM responses WHERE expires_at > ?", (self._clock(),)
            )
            return int(cursor.fetchone()[0])

    def close(self) -> None:
        """Close the database connection; idempotent."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._conn.close()
