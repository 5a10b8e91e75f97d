"""
`MemoryResponseStore`: the server's responses in this process's memory.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import replace
from typing import Literal

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
        """Store *record* under the save policy; see `ResponseStore`."""
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
