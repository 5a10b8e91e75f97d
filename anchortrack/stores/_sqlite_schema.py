"""
The SQLite schema and its migrations.

``PRAGMA user_version`` holds the schema version.
`MIGRATIONS` ``[i]`` takes a database from version ``i`` to ``i + 1``, so
the current version is ``len(MIGRATIONS)``.
To change the schema, append a migration; never edit a released one.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence


class SchemaVersionError(sqlite3.DatabaseError):
    """The database was written by a newer anchortrack with a newer schema."""


#: Each entry is a script that upgrades version ``i`` to ``i + 1``.
MIGRATIONS: tuple[str, ...] = (
    # 0 -> 1: one row per (scope, view); the response id index is the
    # reverse entry, the expiry index serves the sweep.
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
    # 1 -> 2: each anchor's carried-over properties digest and its MAC (with a
    # secret key). Rows recorded before are dropped: what their requests'
    # properties were is unknown, so they must not be chained from.
    """
    ALTER TABLE anchors ADD COLUMN properties BLOB NOT NULL DEFAULT x'';
    ALTER TABLE anchors ADD COLUMN mac BLOB;
    DELETE FROM anchors
    """,
    # 2 -> 3: each anchor's parent (the response it was chained from), so
    # that evicting a dead response evicts its descendants.
    """
    ALTER TABLE anchors ADD COLUMN parent TEXT;
    CREATE INDEX anchors_by_parent ON anchors (scope, parent) WHERE parent IS NOT NULL
    """,
)


def schema_version(conn: sqlite3.Connection) -> int:
    """Return the schema version recorded in the database."""
    row = conn.execute("PRAGMA user_version").fetchone()
    return int(row[0])


def migrate(conn: sqlite3.Connection, migrations: Sequence[str] | None = None) -> int:
    """
    Bring the database to the newest schema; return the version it had.

    Runs in one ``BEGIN IMMEDIATE`` transaction, re-reading the version
    inside it, so several processes opening one new file migrate it once.
    *conn* must be in autocommit mode (``isolation_level=None``).
    *migrations* defaults to `MIGRATIONS`.

    Raises:
        SchemaVersionError: The database's version is newer than this code's.
    """
    if migrations is None:
        migrations = MIGRATIONS
    target = len(migrations)
    found = schema_version(conn)
    if found == target:
        return found
    if found > target:
        raise _too_new(found, target)
    conn.execute("BEGIN IMMEDIATE")
    try:
        found = schema_version(conn)
        if found > target:
            raise _too_new(found, target)
        for version in range(found, target):
            for statement in _statements(migrations[version]):
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {version + 1:d}")
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return found


def _statements(script: str) -> list[str]:
    """Split a migration script into statements (no ``;`` inside them)."""
    return [s.strip() for s in script.split(";") if s.strip()]


def _too_new(found: int, known: int) -> SchemaVersionError:
    return SchemaVersionError(
        f"anchor database schema version {found} is newer than this anchortrack "
        f"supports ({known}); upgrade anchortrack or use another file"
    )
