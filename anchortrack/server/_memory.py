"""`MemoryResponseStore`: the server's responses in this process's memory."""

from __future__ import annotations

import time

from anchortrack.server._records import DEFAULT_RETENTION, ChainLink, Clock, ResponseStore, Row, row_link


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
