"""
Where the local server keeps its responses: the store contract, the memory
store, and :func:`open_store` (the SQLite store lives in ``_sqlite``).

Both backends implement :class:`ResponseStore`, the same narrow contract as
GodeX's session stores (seed 001): ``get``, ``save`` (with the save policy),
``delete``, plus ``link`` (the cheap read chain resolution uses) and what
OpenAI semantics add — a retention period after which a response is gone,
and ``expire`` so tests can make one look old.

Records are kept as JSON text in both backends, so a caller can never change
a stored response by mutating what it saved or read, and both backends give
byte-for-byte the same data back.

Every method is thread-safe: the running app and a test thread may use one
store at once.  Time comes from an injectable clock, so retention can be
tested without sleeping.
"""

from __future__ import annotations

import enum
import json
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol, runtime_checkable


#: OpenAI keeps stored responses for 30 days.
DEFAULT_RETENTION: float = 30 * 24 * 3600.0

#: Version of the SQLite schema, kept in ``PRAGMA user_version``.
SCHEMA_VERSION = 1

#: Expired records are purged at most this often (store-clock seconds).
PURGE_INTERVAL = 60.0

#: ``expires_at`` of a record made to look expired.
EXPIRED = -math.inf

Clock = Callable[[], float]
Item = dict[str, Any]


class _Unset(enum.Enum):
    UNSET = "UNSET"


#: Marks ``expected_previous_response_id`` as "do not check".
UNSET = _Unset.UNSET


@dataclass(frozen=True)
class StoredResponse:
    """
    One stored response: what the request sent and what the server answered.

    Attributes:
        id: The response id (``resp_…``).
        previous_response_id: The parent the request chained from, if any.
        status: The response status (``completed``, ``incomplete``,
            ``failed``, ``in_progress``).
        input_items: This request's input items exactly as received (a string
            input is stored as one user message item).  Not the chain's.
        response: The response object as returned to the client.
        created_at: Store-clock time of the first save (set by the store).
        expires_at: Store-clock time after which the record is gone (set by
            the store).
    """

    id: str
    previous_response_id: str | None
    status: str
    input_items: list[Item]
    response: dict[str, Any]
    created_at: float = 0.0
    expires_at: float = field(default=math.inf)

    @property
    def output(self) -> list[Item]:
        """The response's output items."""
        output = self.response.get("output")
        return list(output) if isinstance(output, list) else []


@dataclass(frozen=True)
class ChainLink:
    """
    What chain resolution needs of a stored response, decoded once and shared.

    The item lists may be shared between callers: treat them as read-only.
    """

    id: str
    previous_response_id: str | None
    status: str
    input_items: list[Item]
    output: list[Item]


class StoreConflictError(Exception):
    """A save refused by the save policy (existing record or parent mismatch)."""

    def __init__(self, response_id: str, message: str) -> None:
        super().__init__(message)
        self.response_id = response_id


@runtime_checkable
class ResponseStore(Protocol):
    """The storage contract the server relies on; thread-safe."""

    retention: float

    def get(self, response_id: str) -> StoredResponse | None:
        """Return the live record for *response_id*, or ``None`` if absent or expired."""
        ...

    def link(self, response_id: str) -> ChainLink | None:
        """The live record's chain data (cheaper than :meth:`get`; read-only), or ``None``."""
        ...

    def save(
        self,
        record: StoredResponse,
        *,
        overwrite: bool = False,
        expected_previous_response_id: str | Literal[_Unset.UNSET] | None = UNSET,
    ) -> StoredResponse:
        """
        Store *record* and return it with ``created_at``/``expires_at`` set.

        Raises:
            StoreConflictError: A live record with this id exists and
                *overwrite* is false; or *expected_previous_response_id* is
                given and differs from the record's (or the existing record's)
                parent.
        """
        ...

    def delete(self, response_id: str) -> bool:
        """Remove a record; return whether one was there."""
        ...

    def expire(self, response_id: str) -> bool:
        """Make a live record look expired; return whether one was live."""
        ...

    def purge_expired(self) -> int:
        """Delete expired records; return how many."""
        ...

    def count(self) -> int:
        """How many live records the store holds."""
        ...

    def close(self) -> None:
        """Release resources; idempotent."""
        ...


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


def encode_row(record: StoredResponse, created_at: float, expires_at: float) -> Row:
    """Encode *record* with its store times."""
    return Row(
        id=record.id,
        previous_response_id=record.previous_response_id,
        status=record.status,
        created_at=created_at,
        expires_at=expires_at,
        input_json=json.dumps(record.input_items, separators=(",", ":")),
        output_json=json.dumps(record.output, separators=(",", ":")),
        response_json=json.dumps(record.response, separators=(",", ":")),
    )


def decode_row(row: Row) -> StoredResponse:
    """Decode a row into a fresh, caller-owned record."""
    return StoredResponse(
        id=row.id,
        previous_response_id=row.previous_response_id,
        status=row.status,
        input_items=json.loads(row.input_json),
        response=json.loads(row.response_json),
        created_at=row.created_at,
        expires_at=row.expires_at,
    )


def row_link(row: Row) -> ChainLink:
    """Decode the chain data of a row."""
    return ChainLink(
        id=row.id,
        previous_response_id=row.previous_response_id,
        status=row.status,
        input_items=json.loads(row.input_json),
        output=json.loads(row.output_json),
    )


def check_save_policy(
    existing: StoredResponse | None,
    record: StoredResponse,
    *,
    overwrite: bool,
    expected_previous_response_id: str | Literal[_Unset.UNSET] | None,
) -> None:
    """
    The save policy of seed 001, shared by every backend.

    *existing* is the live record with the same id, if any.

    Raises:
        StoreConflictError: On a parent mismatch or an overwrite not asked for.
    """
    if expected_previous_response_id is not UNSET:
        parents = {record.previous_response_id}
        if existing is not None:
            parents.add(existing.previous_response_id)
        if parents != {expected_previous_response_id}:
            raise StoreConflictError(
                record.id, "Response parent did not match expected previous response ID."
            )
    if existing is not None and not overwrite:
        raise StoreConflictError(record.id, "Response already exists.")


def row_to_save(
    old: Row | None,
    record: StoredResponse,
    *,
    now: float,
    retention: float,
    overwrite: bool,
    expected_previous_response_id: str | Literal[_Unset.UNSET] | None,
) -> Row:
    """
    Apply the save policy against the live row *old* and encode *record* (every backend's save).

    A replaced response keeps its creation time, and so its expiry.

    Raises:
        StoreConflictError: On a parent mismatch or an overwrite not asked for.
    """
    check_save_policy(
        None if old is None else decode_row(old),
        record,
        overwrite=overwrite,
        expected_previous_response_id=expected_previous_response_id,
    )
    created = now if old is None else old.created_at
    return encode_row(record, created, created + retention)


class MemoryResponseStore:
    """
    Responses kept in memory, for tests and single-process servers.

    Args:
        retention: Seconds a response stays retrievable and chainable.
        clock: Returns the current time in seconds; ``time.time`` by default.
    """

    def __init__(self, *, retention: float = DEFAULT_RETENTION, clock: Clock = time.time) -> None:
        self.retention = retention
        self._clock = clock
        self._rows: dict[str, Row] = {}
        self._links: dict[str, ChainLink] = {}
        self._lock = threading.Lock()
        self._last_purge = -math.inf

    def _live(self, response_id: str, now: float) -> Row | None:
        row = self._rows.get(response_id)
        if row is None or row.expires_at <= now:
            return None
        return row

    def get(self, response_id: str) -> StoredResponse | None:
        """Return the live record for *response_id*, or ``None``."""
        with self._lock:
            row = self._live(response_id, self._clock())
        return None if row is None else decode_row(row)

    def link(self, response_id: str) -> ChainLink | None:
        """The live record's chain data, decoded once per save and shared (read-only)."""
        with self._lock:
            row = self._live(response_id, self._clock())
            if row is None:
                return None
            cached = self._links.get(response_id)
            if cached is None:
                cached = self._links[response_id] = row_link(row)
            return cached

    def save(
        self,
        record: StoredResponse,
        *,
        overwrite: bool = False,
        expected_previous_response_id: str | Literal[_Unset.UNSET] | None = UNSET,
    ) -> StoredResponse:
        """Store *record* under the save policy; see :class:`ResponseStore`."""
        with self._lock:
            now = self._clock()
            row = row_to_save(
                self._live(record.id, now),
                record,
                now=now,
                retention=self.retention,
                overwrite=overwrite,
                expected_previous_response_id=expected_previous_response_id,
            )
            self._rows[record.id] = row
            self._links.pop(record.id, None)
            if now - self._last_purge >= PURGE_INTERVAL:
                self._purge(now)
        return decode_row(row)

    def delete(self, response_id: str) -> bool:
        """Remove a record; return whether one was there."""
        with self._lock:
            self._links.pop(response_id, None)
            return self._rows.pop(response_id, None) is not None

    def expire(self, response_id: str) -> bool:
        """Make a live record look expired; return whether one was live."""
        with self._lock:
            row = self._live(response_id, self._clock())
            if row is None:
                return False
            self._rows[response_id] = replace(row, expires_at=EXPIRED)
            return True

    def _purge(self, now: float) -> int:
        dead = [key for key, row in self._rows.items() if row.expires_at <= now]
        for key in dead:
            del self._rows[key]
            self._links.pop(key, None)
        self._last_purge = now
        return len(dead)

    def purge_expired(self) -> int:
        """Delete expired records; return how many."""
        with self._lock:
            return self._purge(self._clock())

    def count(self) -> int:
        """How many live records the store holds."""
        with self._lock:
            now = self._clock()
            return sum(1 for row in self._rows.values() if row.expires_at > now)

    def clear(self) -> None:
        """Forget every record."""
        with self._lock:
            self._rows.clear()
            self._links.clear()

    def close(self) -> None:
        """Nothing to release; present for the protocol."""


def open_store(spec: str, *, retention: float = DEFAULT_RETENTION, clock: Clock = time.time) -> ResponseStore:
    """
    Open a store from its command-line spelling.

    Args:
        spec: ``"memory"`` or ``"sqlite:PATH"``.
        retention: Seconds a response stays retrievable and chainable.
        clock: The store's clock.

    Raises:
        ValueError: For any other spelling, or a negative retention.
    """
    if not retention >= 0:
        raise ValueError(f"retention must be a non-negative number of seconds, got {retention!r}")
    if spec == "memory":
        return MemoryResponseStore(retention=retention, clock=clock)
    if spec.startswith("sqlite:") and len(spec) > len("sqlite:"):
        from anchortrack.server._sqlite import SQLiteResponseStore

        return SQLiteResponseStore(spec[len("sqlite:") :], retention=retention, clock=clock)
    raise ValueError(f"unknown store {spec!r}: expected 'memory' or 'sqlite:PATH'")
