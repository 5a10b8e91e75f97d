"""`SQLiteStore`: anchors in one SQLite file, shared by the processes of a host, and its schema.

``PRAGMA user_version`` holds the schema version; `MIGRATIONS` ``[i]`` takes a file from version
``i`` to ``i + 1``. To change the schema, append a migration; never edit a released one.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from ._base import DEFAULT_TTL, Anchor, resolve_secret_key
from ._checks import check_anchor, check_response_id, check_scope, checked_seconds


__all__ = ["SQLiteStore", "SchemaVersionError"]


class SchemaVersionError(sqlite3.DatabaseError):
    """The database was written by a newer anchortrack with a newer schema."""


#: Each entry is a script that upgrades version ``i`` to ``i + 1``.
MIGRATIONS: tuple[str, ...] = (
    # 0 -> 1: one row per (scope, view); the response id index is the reverse entry, the expiry
    # index serves the sweep.
    """
    CREATE TABLE anchors (
        scope       TEXT    NOT NULL,
        view        BLOB    NOT NULL,
        response_id TEXT    NOT NULL,
        count       INTEGER NOT NULL,
        created_at  REAL    NOT NULL,
        expires_at  REAL    NOT NULL,
        PRIMARY KEY (scope, view)
    ) WITHOUT ROWID;
    CREATE INDEX anchors_by_response ON anchors (scope, response_id);
    CREATE INDEX anchors_by_expiry ON anchors (expires_at);
    """,
    # 1 -> 2: each anchor's carried-over properties digest and its MAC (with a secret key). Rows
    # recorded before are dropped: what their requests' properties were is unknown, so they must
    # not be chained from.
    """
    ALTER TABLE anchors ADD COLUMN properties BLOB NOT NULL DEFAULT x'';
    ALTER TABLE anchors ADD COLUMN mac BLOB;
    DELETE FROM anchors
    """,
    # 2 -> 3: each anchor's parent (the response it was chained from), so that evicting a dead
    # response evicts its descendants.
    """
    ALTER TABLE anchors ADD COLUMN parent TEXT;
    CREATE INDEX anchors_by_parent ON anchors (scope, parent) WHERE parent IS NOT NULL
    """,
)


def schema_version(conn: sqlite3.Connection, known: int | None = None) -> int:
    """Return the schema version recorded in the database; one above *known* raises `SchemaVersionError`."""
    found = int(conn.execute("PRAGMA user_version").fetchone()[0])
    if known is not None and found > known:
        raise SchemaVersionError(
            f"anchor database schema version {found} is newer than this anchortrack "
            f"supports ({known}); upgrade anchortrack or use another file"
        )
    return found


def migrate(conn: sqlite3.Connection, migrations: Sequence[str] | None = None) -> int:
    """Bring the database to the newest schema (*migrations*, default `MIGRATIONS`); return the version it
    had. One ``BEGIN IMMEDIATE`` transaction that re-reads the version, so processes opening one new file
    migrate it once; *conn* must be in autocommit mode. A newer version than this code's raises
    `SchemaVersionError`."""
    migrations = MIGRATIONS if migrations is None else migrations
    found = schema_version(conn, len(migrations))
    if found != len(migrations):
        with _transaction(conn):
            found = schema_version(conn, len(migrations))
            for version in range(found, len(migrations)):
                for statement in migrations[version].split(";"):
                    if statement.strip():
                        conn.execute(statement)
                conn.execute(f"PRAGMA user_version = {version + 1:d}")
    return found


@contextlib.contextmanager
def _transaction(conn: sqlite3.Connection) -> Iterator[None]:
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


#: Views per ``IN (...)`` list, well under SQLite's variable limit.
_CHUNK = 500

_COLUMNS = "view, response_id, count, created_at, expires_at, properties, mac, parent"
_GET = (
    f"SELECT {_COLUMNS} FROM anchors"  # noqa: S608 - constant column names
    " WHERE scope = ? AND response_id = ? AND expires_at > ?"
    " ORDER BY created_at DESC LIMIT 1"
)
_DROP_OTHER_VIEWS = "DELETE FROM anchors WHERE scope = ? AND response_id = ? AND view <> ?"
#: Replaces the row of the same (scope, view), if any (the table has no other unique key, nor triggers).
_UPSERT = f"INSERT OR REPLACE INTO anchors (scope, {_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"  # noqa: S608


def _row(scope: str, a: Anchor) -> tuple[object, ...]:
    return (scope, a.view, a.response_id, a.count, a.created_at, a.expires_at, a.properties, a.mac, a.parent)


#: The response and its descendants (UNION, not UNION ALL: a cycle ends).
_EVICT = (
    "WITH RECURSIVE dead (id) AS (SELECT ?1"
    " UNION SELECT a.response_id FROM anchors a JOIN dead ON a.scope = ?2 AND a.parent = dead.id)"
    " DELETE FROM anchors WHERE scope = ?2 AND response_id IN (SELECT id FROM dead)"
)
_SWEEP = "DELETE FROM anchors WHERE expires_at <= ?"
_FIND = f"SELECT {_COLUMNS} FROM anchors WHERE scope = ? AND expires_at > ? AND view IN "  # noqa: S608


class SQLiteStore:
    """Anchors in one SQLite file: survives restarts, shared by a host's processes.

    The file is in WAL mode, so readers never wait for writers, and every write is one short
    ``BEGIN IMMEDIATE`` transaction. The connection is opened lazily, shared by the store's threads
    under one lock, and dropped after any SQLite error so the next call reconnects. Errors are
    raised, and quickly: a file locked by another writer raises ``sqlite3.OperationalError`` after
    *timeout* seconds, a read-only file at once. Expired rows are never returned; they are deleted on
    the first write after opening and then every *sweep_every* writes. The schema is migrated on open; a file
    from a newer anchortrack raises `SchemaVersionError`. An async client runs its methods in a worker thread.

    Args:
        path: The database file (created if missing), or ``":memory:"`` (private to this store, and
            lost when its connection closes).
        ttl: Seconds an anchor lives; the tracker sets ``expires_at = created_at + ttl``.
        secret_key: Optional key for keyed view digests (else the ``ANCHORTRACK_SECRET_KEY`` variable).
        timeout: Seconds to wait for another connection's write lock.
        clock: Returns the current Unix time; injectable for tests.
        sweep_every: Writes between two deletions of expired rows.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        ttl: float = DEFAULT_TTL,
        secret_key: bytes | str | None = None,
        timeout: float = 0.25,
        clock: Callable[[], float] = time.time,
        sweep_every: int = 1000,
    ) -> None:
        if sweep_every < 1:
            raise ValueError(f"sweep_every must be at least 1, got {sweep_every}")
        self.path = os.fspath(path)
        self.ttl = checked_seconds(ttl, type(self).__name__, "ttl")
        self.secret_key = resolve_secret_key(secret_key)
        self.timeout, self.sweep_every, self._clock = timeout, sweep_every, clock
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._pid = os.getpid()
        self._writes_to_sweep = 0  # sweep at the first write

    def find(self, scope: str, views: Sequence[bytes]) -> dict[bytes, Anchor]:
        """Return the live anchors recorded in *scope* for any of *views*."""
        check_scope(scope)
        wanted = list(dict.fromkeys(views))
        if not wanted:
            return {}
        with self._connection() as conn:
            now, found = self._clock(), {}
            for i in range(0, len(wanted), _CHUNK):
                chunk = wanted[i : i + _CHUNK]
                rows = conn.execute(_FIND + f"({', '.join('?' * len(chunk))})", (scope, now, *chunk))
                for anchor in filter(None, map(_anchor, rows)):
                    found[anchor.view] = anchor
            return found

    def get(self, scope: str, response_id: str) -> Anchor | None:
        """Return the live anchor recorded in *scope* for *response_id*."""
        check_scope(scope)
        check_response_id(response_id)
        with self._connection() as conn:
            row = conn.execute(_GET, (scope, response_id, self._clock())).fetchone()
        return _anchor(row) if row is not None else None

    def put(self, scope: str, anchor: Anchor) -> None:
        """Record *anchor* in *scope* (last writer wins for a view; an id moves to its new view)."""
        check_scope(scope)
        a = check_anchor(anchor)
        with self._connection() as conn:
            sweep = self._writes_to_sweep <= 0
            with _transaction(conn):
                conn.execute(_DROP_OTHER_VIEWS, (scope, a.response_id, a.view))
                conn.execute(_UPSERT, _row(scope, a))
                if sweep:
                    conn.execute(_SWEEP, (self._clock(),))
            self._writes_to_sweep = (self.sweep_every if sweep else self._writes_to_sweep) - 1

    def evict(self, scope: str, response_id: str) -> None:
        """Forget *response_id*, the view it was recorded under, and its descendants (one statement)."""
        check_scope(scope)
        check_response_id(response_id)
        with self._connection() as conn:
            conn.execute(_EVICT, (response_id, scope)).close()

    def close(self) -> None:
        """Close the connection; the store reopens it if it is used again."""
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    async def aclose(self) -> None:
        """Async twin of `close`."""
        await asyncio.to_thread(self.close)

    @contextlib.contextmanager
    def _connection(self) -> Iterator[sqlite3.Connection]:
        """The connection, under the lock (a new one after a fork); dropped if what runs on it fails."""
        if self._pid != os.getpid():  # forked: never share a connection
            self._pid, self._lock, self._conn = os.getpid(), threading.Lock(), None
        with self._lock:
            conn = self._conn
            if conn is None:
                conn = self._conn = self._open()
            try:
                yield conn
            except sqlite3.Error:
                self._conn = None
                conn.close()
                raise

    def _open(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=self.timeout, isolation_level=None, check_same_thread=False)
        try:
            conn.executescript("PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL")
            migrate(conn)
        except BaseException:
            conn.close()
            raise
        self._writes_to_sweep = 0
        return conn


#: The types of an `_anchor` row's columns (SQLite is typed per value: another writer may differ).
_ROW_TYPES: tuple[Any, ...] = (bytes, str, int, int | float, int | float, bytes, bytes | None, str | None)


def _anchor(row: Sequence[Any]) -> Anchor | None:
    """The anchor in a row, or None when another writer left a row of other types."""
    if not all(isinstance(value, kind) for value, kind in zip(row, _ROW_TYPES, strict=True)):
        return None
    view, response_id, count, created_at, expires_at, properties, mac, parent = row
    return Anchor(view, response_id, count, float(created_at), float(expires_at), properties, mac, parent)
