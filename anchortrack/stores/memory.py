"""
`MemoryStore`: a bounded, thread-safe, in-process anchor store with TTL.

Layout, chosen to keep an anchor near 200 bytes (see `MemoryStore`; an
``OrderedDict`` plus a reverse ``dict`` costs about 355):

* per scope, one ``dict`` from view to a packed *record*
  (``slot, count, created_at, expires_at``, the lengths of the properties
  digest, the MAC and the parent's response id, the first two, then the
  response id and the parent's in UTF-8);
* per *slot* (a small integer naming one anchor): its view, its scope id,
  its neighbours in an LRU ring, and its first child and next sibling (the
  anchors recorded as chained from it), in a list and five typed arrays;
* a reverse index from ``(scope, response id)`` to slot: an open-addressing
  table of slot numbers (4 bytes a cell) rather than a second ``dict``.

Lookups by view are one ``dict`` probe each; lookups by response id are a
short linear probe.
An anchor is linked to its parent when the parent is held at the time it is
recorded, so `MemoryStore.evict` reaches every held descendant.
Expired anchors are dropped when met, and an incremental sweep looks at two
slots per write, so storage follows the TTL without a background thread.
"""

from __future__ import annotations

import struct
import threading
import time
from array import array
from collections.abc import Callable, Sequence

from ._base import DEFAULT_TTL, Anchor, resolve_secret_key
from ._checks import check_anchor, check_response_id, check_scope, check_ttl


# slot, count, created_at, expires_at, len(properties), len(mac), len(parent)
_RECORD = struct.Struct("<IIddBBH")
_HEAD = _RECORD.size
_EXPIRES = struct.Struct("<d")
_EXPIRES_AT = 16
_PROPERTIES_LEN, _MAC_LEN, _PARENT_LEN = 24, 25, 26
_MAX_PARENT = 0xFFFF  # longer parent ids are not kept (no descendant eviction through them)
_EMPTY, _TOMBSTONE = 0, -1
_SWEEP_PER_WRITE = 2


class _Scope:
    """One scope's id and its view → record map."""

    __slots__ = ("id", "name", "views")

    def __init__(self, id: int, name: str) -> None:
        self.id = id
        self.name = name
        self.views: dict[bytes, bytes] = {}


class MemoryStore:
    """
    Anchors in this process's memory: bounded, LRU, TTL, thread- and task-safe.

    The default store.
    Anchors do not survive a restart and are not shared between processes;
    use `SQLiteStore` or `RedisStore` for that.

    Memory: about 232 bytes per anchor with 16-byte views and 30-character
    response ids and a parent (``tracemalloc`` over 100,000 anchors, see
    ``benchmarks/bench_stores.py``), so the default bound costs about 23 MB.
    Longer response ids cost their extra length, and a properties digest
    (requests with tools, …) and a MAC (a secret key) 16 bytes each; an
    anchor chained from another also holds its parent's id.

    Every method takes one lock for a few microseconds and never blocks on
    I/O, so the async methods run inline on the event loop, and the tracker
    calls the sync ones inline too (``never_blocks``), without a deadline
    thread.

    Args:
        max_anchors: How many anchors to keep; beyond it the least recently
            used (recorded or found) anchor is dropped.
        ttl: Seconds an anchor lives; the tracker sets
            ``expires_at = created_at + ttl``.
        secret_key: Optional key for keyed view digests (else the
            ``ANCHORTRACK_SECRET_KEY`` environment variable).
        clock: Returns the current Unix time; injectable for tests.
    """

    #: The tracker calls this store's sync methods inline (no I/O, no deadline thread).
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
        self.max_anchors = max_anchors
        self.ttl = float(check_ttl(ttl))
        self.secret_key = resolve_secret_key(secret_key)
        self._clock = clock
        self._lock = threading.Lock()
        self._scopes: dict[str, _Scope] = {}
        self._scope_ids: dict[int, _Scope] = {}
        self._next_scope_id = 1
        # Slot 0 is the LRU ring's sentinel: _next[0] is the most recently
        # used slot and _prev[0] the least.
        self._keys: list[bytes | None] = [None]
        self._sids = array("I", [0])
        self._prev = array("i", [0])
        self._next = array("i", [0])
        self._down = array("i", [0])  # first child slot
        self._side = array("i", [0])  # next sibling slot
        self._free: list[int] = []
        self._rids = array("i", bytes(4 * 8))
        self._rids_used = 0  # cells holding a slot or a tombstone
        self._live = 0
        self._sweep_at = 1
        self._emptied: list[_Scope] = []  # scopes to forget once the lock is released

    def __len__(self) -> int:
        """Return how many anchors are held, including expired, unswept ones."""
        return self._live

    # -- the AnchorStore protocol ------------------------------------------

    def find(self, scope: str, views: Sequence[bytes]) -> dict[bytes, Anchor]:
        """Return the live anchors recorded in *scope* for any of *views*."""
        check_scope(scope)
        found: list[Anchor] = []
        with self._lock:
            sc = self._scopes.get(scope)
            if sc is None or not views:
                return {}
            now, table, unpack = self._clock(), sc.views, _RECORD.unpack_from
            try:
                for view in views:
                    rec = table.get(view)
                    if rec is None:
                        continue
                    slot, _, _, expires_at, _, _, _ = unpack(rec)
                    if expires_at <= now:
                        self._drop(slot)
                        continue
                    self._touch(slot)
                    found.append(_anchor(view, rec))
            finally:
                self._collect_scopes()
        return {a.view: a for a in found}

    def get(self, scope: str, response_id: str) -> Anchor | None:
        """Return the live anchor recorded in *scope* for *response_id*."""
        check_scope(scope)
        rid = check_response_id(response_id).encode()
        with self._lock:
            sc = self._scopes.get(scope)
            slot = self._probe(sc.id, rid)[1] if sc is not None else 0
            if not slot:
                return None
            assert sc is not None
            view = self._keys[slot]
            assert view is not None
            rec = sc.views[view]
            if _EXPIRES.unpack_from(rec, _EXPIRES_AT)[0] <= self._clock():
                self._drop(slot)
                self._collect_scopes()
                return None
            self._touch(slot)
        return _anchor(view, rec)

    def put(self, scope: str, anchor: Anchor) -> None:
        """
        Record *anchor* in *scope*.

        The last writer wins for a view, and a response id lives under one
        view: recording it under another view drops the older entry.
        An anchor that is already expired is not kept, but still replaces
        what its view and response id held.
        """
        check_scope(scope)
        check_anchor(anchor)
        view, rid = anchor.view, anchor.response_id.encode()
        with self._lock:
            now = self._clock()
            sc = self._scope(scope)
            try:
                self._put(sc, view, rid, anchor, now)
                self._sweep(now)
            finally:
                if not sc.views:
                    self._emptied.append(sc)
                self._collect_scopes()

    def evict(self, scope: str, response_id: str) -> None:
        """Forget *response_id*, the view it was recorded under, and its held descendants."""
        check_scope(scope)
        rid = check_response_id(response_id).encode()
        with self._lock:
            sc = self._scopes.get(scope)
            slot = self._probe(sc.id, rid)[1] if sc is not None else 0
            if slot:
                for dead in self._descendants(slot):
                    self._drop(dead)
                self._collect_scopes()

    async def afind(self, scope: str, views: Sequence[bytes]) -> dict[bytes, Anchor]:
        """Async twin of `find` (runs inline: it never blocks on I/O)."""
        return self.find(scope, views)

    async def aget(self, scope: str, response_id: str) -> Anchor | None:
        """Async twin of `get`."""
        return self.get(scope, response_id)

    async def aput(self, scope: str, anchor: Anchor) -> None:
        """Async twin of `put`."""
        self.put(scope, anchor)

    async def aevict(self, scope: str, response_id: str) -> None:
        """Async twin of `evict`."""
        self.evict(scope, response_id)

    def close(self) -> None:
        """Do nothing: present so every store can be closed the same way."""

    async def aclose(self) -> None:
        """Async twin of `close`."""

    # -- internals (the lock is held) ----------------------------------------

    def _put(self, sc: _Scope, view: bytes, rid: bytes, anchor: Anchor, now: float) -> None:
        rec = sc.views.get(view)
        at_view = _RECORD.unpack_from(rec)[0] if rec is not None else 0
        at_rid = self._probe(sc.id, rid)[1]
        if at_rid and at_rid != at_view:
            self._drop(at_rid)
        if not anchor.is_live(now):
            if at_view:
                self._drop(at_view)
            return
        parent = _parent_bytes(anchor)
        if at_view:
            assert rec is not None
            old_rid = _rid(rec)
            moved = old_rid != rid
            self._unlink_parent(sc, rec, at_view)
            if moved:
                self._orphan_children(at_view)
                self._unindex_rid(sc.id, old_rid, at_view)
            sc.views[view] = _record(at_view, anchor, rid, parent)  # before a rehash reads it
            if moved:
                self._index_rid(sc.id, rid, at_view)
            self._link_parent(sc, parent, at_view)
            self._touch(at_view)
            return
        slot = self._allocate()
        self._keys[slot] = view
        self._sids[slot] = sc.id
        sc.views[view] = _record(slot, anchor, rid, parent)
        self._live += 1
        self._link_front(slot)
        self._index_rid(sc.id, rid, slot)
        self._link_parent(sc, parent, slot)

    def _scope(self, name: str) -> _Scope:
        sc = self._scopes.get(name)
        if sc is None:
            sc = _Scope(self._next_scope_id, name)
            self._next_scope_id = self._next_scope_id % 0xFFFF_FFFF + 1
            while self._next_scope_id in self._scope_ids:  # wrapped: skip ids in use
                self._next_scope_id = self._next_scope_id % 0xFFFF_FFFF + 1
            self._scopes[name] = self._scope_ids[sc.id] = sc
        return sc

    def _collect_scopes(self) -> None:
        """Forget the scopes `_drop` emptied, unless they were refilled."""
        while self._emptied:
            sc = self._emptied.pop()
            if not sc.views and self._scopes.get(sc.name) is sc:
                del self._scopes[sc.name], self._scope_ids[sc.id]

    def _allocate(self) -> int:
        if not self._free:
            if len(self._keys) <= self.max_anchors:
                self._keys.append(None)
                self._sids.append(0)
                self._prev.append(0)
                self._next.append(0)
                self._down.append(0)
                self._side.append(0)
                return len(self._keys) - 1
            self._drop(self._prev[0])  # the least recently used anchor
        return self._free.pop()

    def _drop(self, slot: int) -> None:
        """Remove the anchor in *slot* from every structure."""
        view = self._keys[slot]
        assert view is not None
        sc = self._scope_ids[self._sids[slot]]
        rec = sc.views[view]
        self._unlink_parent(sc, rec, slot)
        self._orphan_children(slot)
        self._unindex_rid(sc.id, _rid(rec), slot)
        del sc.views[view]
        if not sc.views:
            self._emptied.append(sc)
        self._keys[slot] = None
        self._unlink(slot)
        self._free.append(slot)
        self._live -= 1

    # -- parent links: first child and next sibling per slot -----------------

    def _link_parent(self, sc: _Scope, parent: bytes, slot: int) -> None:
        """Make *slot* a child of the slot holding *parent*, if that is held."""
        if not parent:
            return
        up = self._probe(sc.id, parent)[1]
        if up and up != slot:
            self._side[slot] = self._down[up]
            self._down[up] = slot

    def _unlink_parent(self, sc: _Scope, rec: bytes, slot: int) -> None:
        """Take *slot* out of its parent's children, if it is among them."""
        parent = _parent(rec)
        up = self._probe(sc.id, parent)[1] if parent else 0
        if up:
            down, side = self._down, self._side
            if down[up] == slot:
                down[up] = side[slot]
            else:
                child = down[up]
                while child and side[child] != slot:
                    child = side[child]
                if child:
                    side[child] = side[slot]
        self._side[slot] = 0

    def _orphan_children(self, slot: int) -> None:
        """Forget *slot*'s children links (the children stay)."""
        child, self._down[slot] = self._down[slot], 0
        while child:
            child, self._side[child] = self._side[child], 0

    def _descendants(self, slot: int) -> list[int]:
        """*slot* and every slot linked below it, parents before children."""
        found, seen, i = [slot], {slot}, 0
        down, side = self._down, self._side
        while i < len(found):
            child = down[found[i]]
            i += 1
            while child:
                if child not in seen:
                    seen.add(child)
                    found.append(child)
                child = side[child]
        return found

    def _touch(self, slot: int) -> None:
        if self._next[0] != slot:
            self._unlink(slot)
            self._link_front(slot)

    def _unlink(self, slot: int) -> None:
        prev, nxt = self._prev[slot], self._next[slot]
        self._next[prev] = nxt
        self._prev[nxt] = prev

    def _link_front(self, slot: int) -> None:
        first = self._next[0]
        self._prev[slot], self._next[slot] = 0, first
        self._prev[first] = self._next[0] = slot

    def _sweep(self, now: float) -> None:
        """Look at a few slots past the sweep hand and drop the expired ones."""
        keys, end = self._keys, len(self._keys)
        for _ in range(min(_SWEEP_PER_WRITE, end - 1)):
            slot = self._sweep_at
            self._sweep_at = slot + 1 if slot + 1 < end else 1
            view = keys[slot]
            if view is not None:
                rec = self._scope_ids[self._sids[slot]].views[view]
                if _EXPIRES.unpack_from(rec, _EXPIRES_AT)[0] <= now:
                    self._drop(slot)

    # -- the reverse index: (scope id, response id) -> slot -----------------

    def _probe(self, sid: int, rid: bytes) -> tuple[int, int]:
        """
        Return ``(cell, slot)`` for *rid* in scope *sid*.

        *slot* is 0 when absent; *cell* is then where to insert it.
        """
        table, keys, sids = self._rids, self._keys, self._sids
        mask = len(table) - 1
        cell = hash((sid, rid)) & mask
        free = -1
        while True:
            slot = table[cell]
            if slot == _EMPTY:
                return (free if free >= 0 else cell), 0
            if slot == _TOMBSTONE:
                if free < 0:
                    free = cell
            elif sids[slot] == sid:
                view = keys[slot]
                assert view is not None
                if _rid(self._scope_ids[sid].views[view]) == rid:
                    return cell, slot
            cell = (cell + 1) & mask

    def _index_rid(self, sid: int, rid: bytes, slot: int) -> None:
        cell, found = self._probe(sid, rid)
        assert not found
        if self._rids[cell] == _EMPTY:
            self._rids_used += 1
        self._rids[cell] = slot
        if self._rids_used * 3 > len(self._rids) * 2:
            self._rebuild_rids()

    def _unindex_rid(self, sid: int, rid: bytes, slot: int) -> None:
        cell, found = self._probe(sid, rid)
        assert found == slot
        self._rids[cell] = _TOMBSTONE

    def _rebuild_rids(self) -> None:
        """Rehash into a table at most half full, dropping tombstones."""
        size = 8
        while size < 2 * (self._live + 1):
            size *= 2
        table = array("i", bytes(4 * size))
        mask = size - 1
        used = 0
        for sc in self._scope_ids.values():
            for rec in sc.views.values():
                cell = hash((sc.id, _rid(rec))) & mask
                while table[cell] != _EMPTY:
                    cell = (cell + 1) & mask
                table[cell] = _RECORD.unpack_from(rec)[0]
                used += 1
        self._rids, self._rids_used = table, used


def _parent_bytes(anchor: Anchor) -> bytes:
    parent = anchor.parent.encode() if anchor.parent else b""
    return parent if len(parent) <= _MAX_PARENT else b""


def _record(slot: int, anchor: Anchor, rid: bytes, parent: bytes) -> bytes:
    props, mac = anchor.properties, anchor.mac or b""
    head = _RECORD.pack(
        slot, anchor.count, anchor.created_at, anchor.expires_at, len(props), len(mac), len(parent)
    )
    return head + props + mac + rid + parent


def _parent_len(rec: bytes) -> int:
    return rec[_PARENT_LEN] | rec[_PARENT_LEN + 1] << 8


def _rid(rec: bytes) -> bytes:
    """The response id (UTF-8) in a record."""
    return rec[_HEAD + rec[_PROPERTIES_LEN] + rec[_MAC_LEN] : len(rec) - _parent_len(rec)]


def _parent(rec: bytes) -> bytes:
    """The parent's response id (UTF-8) at the end of a record (empty when it has none)."""
    plen = _parent_len(rec)
    return rec[len(rec) - plen :] if plen else b""


def _anchor(view: bytes, rec: bytes) -> Anchor:
    _, count, created_at, expires_at, plen, mlen, parent_len = _RECORD.unpack_from(rec)
    props_end = _HEAD + plen
    mac_end = props_end + mlen
    rid_end = len(rec) - parent_len
    return Anchor(
        view,
        rec[mac_end:rid_end].decode(),
        count,
        created_at,
        expires_at,
        properties=rec[_HEAD:props_end],
        mac=rec[props_end:mac_end] or None,
        parent=rec[rid_end:].decode() if parent_len else None,
    )
