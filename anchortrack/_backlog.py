"""
The backlog: anchor writes the store has not taken yet (no I/O).

While the store is unavailable (down, slow, or a write missed its deadline),
the anchors this process records wait here instead of being lost, and are
written when the store answers again (the tracker plans from its own recent
anchors meanwhile: ``Tracker.local_anchors``).

Bounded and counted: past *limit* the oldest entry is dropped, and entries
whose anchor expired are dropped when met; `add` and `take` report how many.
Thread-safe.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence

from .stores._base import Anchor


#: How many anchor writes wait, by default, while the store is unavailable.
DEFAULT_BACKLOG_LIMIT = 10_000


class Backlog:
    """Anchors waiting to be written, oldest first, at most *limit* of them."""

    def __init__(self, limit: int = DEFAULT_BACKLOG_LIMIT) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._entries: OrderedDict[tuple[str, bytes], Anchor] = OrderedDict()
        self._ids: dict[tuple[str, str], bytes] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def add(self, scope: str, anchor: Anchor, now: float) -> tuple[bool, int]:
        """
        Queue *anchor*, replacing what its view or response id held.

        Returns ``(queued, overflowed)``: whether it was queued (not when it
        has already expired, or the limit is 0) and how many older entries
        were dropped to stay within the limit.
        """
        with self._lock:
            self._forget(scope, anchor.response_id)
            key = (scope, anchor.view)
            old = self._entries.pop(key, None)
            if old is not None:
                self._ids.pop((scope, old.response_id), None)
            if not anchor.is_live(now) or self.limit <= 0:
                return False, 0
            self._entries[key] = anchor
            self._ids[scope, anchor.response_id] = anchor.view
            overflowed = 0
            while len(self._entries) > self.limit:
                (old_scope, _), dropped = self._entries.popitem(last=False)
                self._ids.pop((old_scope, dropped.response_id), None)
                overflowed += 1
            return True, overflowed

    def find(self, scope: str, views: Sequence[bytes], now: float) -> dict[bytes, Anchor]:
        """The live queued anchors of *scope* for any of *views*."""
        if not self._entries:
            return {}
        with self._lock:
            found = {}
            for view in views:
                anchor = self._entries.get((scope, view))
                if anchor is not None and anchor.is_live(now):
                    found[view] = anchor
            return found

    def get(self, scope: str, response_id: str, now: float) -> Anchor | None:
        """The live queued anchor of *scope* for *response_id*, if any."""
        if not self._entries:
            return None
        with self._lock:
            view = self._ids.get((scope, response_id))
            anchor = self._entries.get((scope, view)) if view is not None else None
            return anchor if anchor is not None and anchor.is_live(now) else None

    def evict(self, scope: str, response_id: str) -> None:
        """Forget *response_id* and every queued anchor chained from it, transitively."""
        if not self._entries:
            return
        with self._lock:
            dead = {response_id}
            grew = True
            while grew:  # the backlog is small: a few passes over it are cheap
                grew = False
                for (entry_scope, _), anchor in self._entries.items():
                    if entry_scope == scope and anchor.parent in dead and anchor.response_id not in dead:
                        dead.add(anchor.response_id)
                        grew = True
            for rid in dead:
                self._forget(scope, rid)

    def take(self, n: int, now: float) -> tuple[list[tuple[str, Anchor]], int]:
        """
        Remove and return up to *n* of the oldest live entries.

        Returns ``(entries, expired)``: the entries as ``(scope, anchor)``,
        and how many expired ones were dropped on the way.
        """
        taken: list[tuple[str, Anchor]] = []
        expired = 0
        with self._lock:
            while self._entries and len(taken) < n:
                (scope, _), anchor = self._entries.popitem(last=False)
                self._ids.pop((scope, anchor.response_id), None)
                if anchor.is_live(now):
                    taken.append((scope, anchor))
                else:
                    expired += 1
        return taken, expired

    def _forget(self, scope: str, response_id: str) -> None:
        view = self._ids.pop((scope, response_id), None)
        if view is not None:
            self._entries.pop((scope, view), None)
