"""`MemoryStore`: a bounded, thread-safe, in-process anchor store with TTL."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from itertools import islice

from .._fork import ForkSafeLock
from ._base import DEFAULT_TTL, Anchor, resolve_secret_key
from ._checks import check_anchor, check_response_id, check_scope, checked_seconds


class _Scope:
    """One scope's indexes of the anchors it holds."""

    __slots__ = ("children", "views")

    def __init__(self) -> None:
        #: Response id -> the view it is recorded under.
        self.views: dict[str, bytes] = {}
        #: Parent response id -> the ids of the held anchors chained from it: one id, or a list of
        #: several (most responses have at most one child; a list each would cost memory).
        self.children: dict[str, str | list[str]] = {}

    def link(self, anchor: Anchor) -> None:
        """Index *anchor*."""
        rid, parent = anchor.response_id, anchor.parent
        self.views[rid] = anchor.view
        if parent is not None:
            kids = self.children.get(parent)
            if isinstance(kids, list):
                kids.append(rid)
            else:
                self.children[parent] = rid if kids is None else [kids, rid]

    def unlink(self, anchor: Anchor) -> None:
        """Forget *anchor*, which is indexed."""
        rid, parent = anchor.response_id, anchor.parent
        del self.views[rid]
        if parent is not None:
            kids = self.children.pop(parent)
            if isinstance(kids, list):
                kids.remove(rid)
                self.children[parent] = kids[0] if len(kids) == 1 else kids

    def descendants(self, response_id: str) -> set[str]:
        """*response_id* and the ids of every held anchor chained below it."""
        found, todo = {response_id}, [response_id]
        while todo:
            kids = self.children.get(todo.pop(), ())
            for kid in [kids] if isinstance(kids, str) else kids:
                if kid not in found:
                    found.add(kid)
                    todo.append(kid)
        return found


class MemoryStore:
    """Anchors in this process's memory: bounded, LRU, TTL, thread- and task-safe.

    The default store; anchors do not survive a restart and are not shared between processes
    (`SQLiteStore` and `RedisStore` do that). An anchor counts as used when it is recorded, or
    returned by `find` or `get`. Expired anchors are dropped when met, and each write drops
    expired ones at the least recently used end, so storage follows the TTL.

    Args:
        max_anchors: How many anchors to keep; beyond it the least recently used anchor is dropped.
        ttl: Seconds an anchor lives; the tracker sets ``expires_at = created_at + ttl``.
        secret_key: Optional key for keyed view digests (else the ``ANCHORTRACK_SECRET_KEY`` variable).
        clock: Returns the current Unix time; injectable for tests.
    """

    #: No method blocks on I/O: the tracker calls them inline (`anchortrack.stores._base.runs_inline`).
    never_blocks = True

    def __init__(
        self,
        max_anchors: int = 100_000,
        *,
        ttl: float = DEFAULT_TTL,
        secret_key: bytes | str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if max_anchors < 1:
            raise ValueError(f"max_anchors must be at least 1, got {max_anchors}")
        self.max_anchors, self._clock = max_anchors, clock
        self.ttl = checked_seconds(ttl, type(self).__name__, "ttl")
        self.secret_key = resolve_secret_key(secret_key)
        self._lock = ForkSafeLock()
        #: (scope, view) -> the anchor recorded there, least recently used first.
        self._anchors: OrderedDict[tuple[str, bytes], Anchor] = OrderedDict()
        #: The same anchors indexed per non-empty scope (by their own id strings); both change under the lock.
        self._scopes: dict[str, _Scope] = {}

    def __len__(self) -> int:
        """How many anchors are held, including expired, unswept ones."""
        return len(self._anchors)

    def find(self, scope: str, views: Sequence[bytes]) -> Mapping[bytes, Anchor]:
        """Return the live anchors recorded in *scope* for any of *views*."""
        check_scope(scope)
        with self._lock:
            now = self._clock()
            return {view: anchor for view in views if (anchor := self._live(scope, view, now)) is not None}

    def get(self, scope: str, response_id: str) -> Anchor | None:
        """Return the live anchor recorded in *scope* for *response_id*."""
        check_scope(scope)
        check_response_id(response_id)
        with self._lock:
            view = self._view_of(scope, response_id)
            return None if view is None else self._live(scope, view, self._clock())

    def put(self, scope: str, anchor: Anchor) -> None:
        """Record *anchor* in *scope*; one already expired still replaces what its view and id held."""
        check_scope(scope)
        check_anchor(anchor)
        with self._lock:
            now = self._clock()
            self._drop(scope, anchor.view)
            self._drop(scope, self._view_of(scope, anchor.response_id))
            if anchor.is_live(now):
                while len(self._anchors) >= self.max_anchors:
                    self._drop(*next(iter(self._anchors)))
                self._anchors[scope, anchor.view] = anchor
                self._scopes.setdefault(scope, _Scope()).link(anchor)
            for (old_scope, view), old in list(islice(self._anchors.items(), 2)):  # the two least recent
                if old.is_live(now):
                    break
                self._drop(old_scope, view)

    def evict(self, scope: str, response_id: str) -> None:
        """Forget *response_id*, its view and its descendants (even when it is itself no longer held)."""
        check_scope(scope)
        check_response_id(response_id)
        with self._lock:
            sc = self._scopes.get(scope)
            for dead in sc.descendants(response_id) if sc is not None else ():
                self._drop(scope, self._view_of(scope, dead))

    def close(self) -> None:
        """Do nothing: every store can be closed the same way."""

    async def aclose(self) -> None:
        """Async twin of `close`."""

    # -- internals (the lock is held) ----------------------------------------

    def _view_of(self, scope: str, response_id: str) -> bytes | None:
        sc = self._scopes.get(scope)
        return sc.views.get(response_id) if sc is not None else None

    def _live(self, scope: str, view: bytes, now: float) -> Anchor | None:
        """The anchor at *view*, marked as used; None (and dropped) if it has expired."""
        anchor = self._anchors.get((scope, view))
        if anchor is None:
            return None
        if not anchor.is_live(now):
            self._drop(scope, view)
            return None
        self._anchors.move_to_end((scope, view))
        return anchor

    def _drop(self, scope: str, view: bytes | None) -> None:
        anchor = self._anchors.pop((scope, view), None) if view is not None else None
        if anchor is not None:
            sc = self._scopes[scope]
            sc.unlink(anchor)
            if not sc.views:
                del self._scopes[scope]
