"""The server's response stores: records, the store contract, the row codec, the save policy; its backends in
this process's memory (`MemoryResponseStore`) and in a SQLite file (`SQLiteResponseStore`).

Records are kept as JSON text (a `Row`), so what a caller saved or read can never change what is stored."""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import astuple, dataclass, field, fields, replace
from pathlib import Path
from typing import Any


DEFAULT_RETENTION: float = 30 * 24 * 3600.0
"""Seconds a stored response is kept: 30 days, as OpenAI keeps them."""

#: Expired records are purged at most this often (store-clock seconds).
PURGE_INTERVAL = 60.0

#: ``expires_at`` of a record made to look expired.
EXPIRED = -math.inf

Clock = Callable[[], float]
Item = dict[str, Any]


def owner_digest(api_key: str | None) -> str:
    """Whom a response belongs to: a stable digest of the API key that made it (``""`` without a key)."""
    if not api_key:
        return ""
    salted = b"anchortrack-serve-owner\0" + api_key.encode("utf-8", "surrogatepass")
    return hashlib.sha256(salted).hexdigest()[:32]


def api_key(headers: Mapping[str, str]) -> str | None:
    """The key of an ``Authorization: Bearer KEY`` header, or None."""
    scheme, _, key = headers.get("authorization", "").partition(" ")
    return (key.strip() or None) if scheme.lower() == "bearer" else None


def request_owner(headers: Mapping[str, str]) -> str:
    """Whom a request's responses belong to: the digest of its API key."""
    return owner_digest(api_key(headers))


#: Marks ``expected_previous_response_id`` as "do not check".
_UNSET: Any = object()


@dataclass(frozen=True)
class StoredResponse:
    """One stored response: this request's own input items, the response as returned, store-clock times of
    the first save and of expiry (set by the store) and the `owner_digest` of the key that alone sees it."""

    id: str
    previous_response_id: str | None
    status: str
    input_items: list[Item]
    response: dict[str, Any]
    created_at: float = 0.0
    expires_at: float = field(default=math.inf)
    owner: str = ""

    @property
    def output(self) -> list[Item]:
        output = self.response.get("output")
        return list(output) if isinstance(output, list) else []


@dataclass(frozen=True)
class Head:
    """What chaining checks of a stored response, read without decoding its items."""

    id: str
    previous_response_id: str | None
    status: str
    owner: str
    created_at: float


@dataclass(frozen=True)
class ChainLink:
    """What chain resolution needs of a stored response, decoded once and shared (read-only)."""

    id: str
    previous_response_id: str | None
    status: str
    input_items: list[Item]
    output: list[Item]
    owner: str = ""
    created_at: float = field(default=0.0, compare=False)  # the store's first save; in `head` only

    @property
    def head(self) -> Head:
        return Head(self.id, self.previous_response_id, self.status, self.owner, self.created_at)

    def item(self, item_id: str) -> Item | None:
        """Its input or output item of this id, if it holds one."""
        return next((item for item in [*self.input_items, *self.output] if item.get("id") == item_id), None)


class StoreConflictError(Exception):
    """A save refused by the save policy (existing record or parent mismatch)."""

    def __init__(self, response_id: str, message: str) -> None:
        super().__init__(message)
        self.response_id = response_id


@dataclass(frozen=True)
class Row:
    """A record as both backends keep it: metadata plus JSON text."""

    id: str
    previous_response_id: str | None
    status: str
    created_at: float
    expires_at: float
    input_json: str
    output_json: str
    response_json: str
    owner: str = ""


def _json(value: object) -> str:
    return json.dumps(value, separators=(",", ":"))


def encode_row(record: StoredResponse, created_at: float, expires_at: float) -> Row:
    return Row(
        record.id, record.previous_response_id, record.status, created_at=created_at, expires_at=expires_at,
        input_json=_json(record.input_items), output_json=_json(record.output),
        response_json=_json(record.response), owner=record.owner,
    )  # fmt: skip


def decode_row(row: Row) -> StoredResponse:
    """Decode a row into a fresh, caller-owned record."""
    return StoredResponse(
        row.id, row.previous_response_id, row.status, input_items=json.loads(row.input_json),
        response=json.loads(row.response_json), created_at=row.created_at, expires_at=row.expires_at,
        owner=row.owner,
    )  # fmt: skip


def row_link(row: Row) -> ChainLink:
    return ChainLink(
        row.id, row.previous_response_id, row.status, input_items=json.loads(row.input_json),
        output=json.loads(row.output_json), owner=row.owner, created_at=row.created_at,
    )  # fmt: skip


class ResponseStore:
    """The storage contract the server relies on (thread-safe), with OpenAI's semantics written once.

    A backend supplies the row primitives below, always called with the store's lock held, and may widen
    `_transaction` (SQLite's makes a save hold across processes too)."""

    def __init__(self, retention: float, clock: Clock) -> None:
        self.retention, self._clock = retention, clock
        self._lock = threading.Lock()
        self._last_purge = -math.inf
        self._generation = 0  # counts removals, expiries and replacements of chainable records

    def _live(self, response_id: str, now: float) -> Row | None:
        """The row of *response_id* if it has not expired by *now*."""
        raise NotImplementedError

    def _put(self, row: Row) -> None:
        """Insert or replace *row*."""
        raise NotImplementedError

    def _drop(self, response_id: str) -> bool:
        """Remove a row; whether one was there."""
        raise NotImplementedError

    def _drop_expired(self, now: float) -> int:
        """Remove the rows expired by *now*; how many."""
        raise NotImplementedError

    def _holding(self, text: str, now: float) -> list[str]:
        """Ids of the rows live at *now* whose input or output JSON holds *text* (all for ``""``), oldest
        first."""
        raise NotImplementedError

    def _heads(self, ids: Sequence[str], now: float) -> list[Head]:
        """The `Head` of each row of *ids* live at *now* (a backend may read them in one go)."""
        rows = [row for response_id in ids if (row := self._live(response_id, now)) is not None]
        return [Head(row.id, row.previous_response_id, row.status, row.owner, row.created_at) for row in rows]

    def _transaction(self) -> contextlib.AbstractContextManager[object]:
        """What a read-check-write runs under: the lock."""
        return self._lock

    def _read(self, response_id: str) -> Row | None:
        with self._lock:
            return self._live(response_id, self._clock())

    def get(self, response_id: str) -> StoredResponse | None:
        """Return the live record for *response_id*, or ``None`` if absent or expired."""
        row = self._read(response_id)
        return None if row is None else decode_row(row)

    def link(self, response_id: str) -> ChainLink | None:
        """The live record's chain data (cheaper than `get`: no response object), or ``None``."""
        row = self._read(response_id)
        return None if row is None else row_link(row)

    def now(self) -> float:
        return self._clock()

    def generation(self) -> object:
        """A token that changes whenever a record may have been removed, expired early or replaced with
        another chainable one (by any process sharing the backend)."""
        with self._lock:
            return self._generation

    def heads(self, ids: Sequence[str]) -> dict[str, Head]:
        """The `Head` of each live record of *ids*, by id (no item is decoded)."""
        with self._lock:
            return {head.id: head for head in self._heads(ids, self._clock())}

    def find_item(self, item_id: str, owner: str | None = None) -> tuple[str, Item] | None:
        """(Response id, item) of *owner*'s (any, for None) oldest live record holding an item of this id."""
        text = _json({"id": item_id})[1:-1]  # how a row's JSON spells the id
        with self._lock:
            now = self._clock()
            for response_id in self._holding(text, now):
                row = self._live(response_id, now)
                if row is not None and owner in (None, row.owner) and (item := row_link(row).item(item_id)):
                    return response_id, item
        return None

    def save(
        self,
        record: StoredResponse,
        *,
        overwrite: bool = False,
        expected_previous_response_id: str | None = _UNSET,
    ) -> StoredResponse:
        """Store *record*; return it with ``created_at``/``expires_at`` set (a replaced one keeps its own).

        Raises:
            StoreConflictError: A live record with this id exists and *overwrite* is false, or
                *expected_previous_response_id* differs from the record's (or the existing record's) parent.
        """
        with self._transaction():
            now = self._clock()
            old = self._live(record.id, now)
            parents = {record.previous_response_id, (old or record).previous_response_id}
            if expected_previous_response_id is not _UNSET and parents != {expected_previous_response_id}:
                message = "Response parent did not match expected previous response ID."
                raise StoreConflictError(record.id, message)
            if old is not None and not overwrite:
                raise StoreConflictError(record.id, "Response already exists.")
            created = now if old is None else old.created_at
            row = encode_row(record, created, created + self.retention)
            self._put(row)
            if old is not None and old.status in ("completed", "incomplete"):
                self._generation += 1
            if now - self._last_purge >= PURGE_INTERVAL:
                self._drop_expired(now)
                self._last_purge = now
        return decode_row(row)

    def delete(self, response_id: str) -> bool:
        """Remove a record; return whether one was there."""
        with self._lock:
            self._generation += 1
            return self._drop(response_id)

    def expire(self, response_id: str) -> bool:
        """Make a live record look expired; return whether one was live."""
        with self._transaction():
            row = self._live(response_id, self._clock())
            if row is not None:
                self._put(replace(row, expires_at=EXPIRED))
                self._generation += 1
            return row is not None

    def purge_expired(self) -> int:
        """Delete expired records; return how many."""
        with self._lock:
            self._last_purge = self._clock()
            return self._drop_expired(self._last_purge)

    def count(self) -> int:
        """How many live records the store holds."""
        with self._lock:
            return len(self._holding("", self._clock()))

    def close(self) -> None:
        """Release resources; idempotent (nothing to release here)."""


DEFAULT_MAX_RESPONSES = 100_000
"""Most responses a memory store keeps by default (about 0.6 GB of a typical agent's responses)."""


class MemoryResponseStore(ResponseStore):
    """Responses kept in memory, for tests and single-process servers (*retention* in seconds).

    At most *max_responses* are kept: saving one more evicts the oldest, which is then gone as if expired (a
    chain through it gets ``previous_response_not_found``)."""

    def __init__(
        self,
        *,
        retention: float = DEFAULT_RETENTION,
        clock: Clock = time.time,
        max_responses: int = DEFAULT_MAX_RESPONSES,
    ) -> None:
        if max_responses < 1:
            raise ValueError(f"max_responses must be at least 1, got {max_responses!r}")
        super().__init__(retention, clock)
        self.max_responses = max_responses
        self._rows: dict[str, Row] = {}
        self._links: dict[str, ChainLink] = {}

    def _live(self, response_id: str, now: float) -> Row | None:
        row = self._rows.get(response_id)
        return row if row is not None and row.expires_at > now else None

    def _put(self, row: Row) -> None:
        if row.id not in self._rows and len(self._rows) >= self.max_responses:
            self._drop(next(iter(self._rows)))  # the oldest: rows keep their first save's place
            self._generation += 1
        self._rows[row.id] = row
        self._links.pop(row.id, None)

    def _drop(self, response_id: str) -> bool:
        self._links.pop(response_id, None)
        return self._rows.pop(response_id, None) is not None

    def _drop_expired(self, now: float) -> int:
        dead = [key for key, row in self._rows.items() if row.expires_at <= now]
        for key in dead:
            self._drop(key)
        return len(dead)

    def _holding(self, text: str, now: float) -> list[str]:
        rows = [row for row in self._rows.values() if row.expires_at > now]
        return [row.id for row in rows if text in row.input_json or text in row.output_json]

    def link(self, response_id: str) -> ChainLink | None:
        """The live record's chain data, decoded once per save and shared (read-only)."""
        with self._lock:
            row = self._live(response_id, self._clock())
            if row is None:
                return None
            if response_id not in self._links:
                self._links[response_id] = row_link(row)
            return self._links[response_id]


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

_COLUMNS = ", ".join(column.name for column in fields(Row))


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
            astuple(row),
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
