"""
`MemoryStore`: a bounded, thread-safe, in-process anchor store with TTL.

Layout, chosen to keep an anchor under 200 bytes (see `MemoryStore`; an
``OrderedDict`` plus a reverse ``dict`` costs about 355):

* per scope, one ``dict`` from view to a packed *record*: a 22-byte head
  (``slot, count, expires_at``, the lifetime ``expires_at - created_at`` as
  a float32, the lengths of the properties digest and the MAC), then
  ``created_at`` as a double only when the float32 lifetime does not give it
  back exactly (the lifetime is NaN then), the properties digest, the MAC,
  and last the *response id key* (see `_rid_key`): ``resp_`` + lowercase
  hex ids, as OpenAI issues them, are held as their bytes (half the size),
  any other id as its UTF-8, behind one byte naming the form;
* per *slot* (a small integer naming one anchor): its view, its scope id and
  its neighbours in an LRU ring, in a list and three typed arrays;
* a reverse index from ``(scope, response id key)`` to slot: an
  open-addressing table of slot numbers (4 bytes a cell, half to two thirds
  full, any size) rather than a second ``dict``.

Lookups by view are one ``dict`` probe each; lookups by response id are a
short linear probe.
Expired anchors are dropped when met, and an incremental sweep looks at two
slots per write, so storage follows the TTL without a background thread.
"""

from __future__ import annotations

import math
import struct
import threading
import time
from array import array
from collections.abc import Callable, Sequence

from ._base import DEFAULT_TTL, Anchor, resolve_secret_key
from ._checks import check_anchor, check_response_id, check_scope, check_ttl


_RECORD = struct.Struct("<IIdfBB")  # slot, count, expires_at, lifetime, len(properties), len(mac)
_HEAD = _RECORD.size
_EXPIRES = struct.Struct("<d")
_EXPIRES_AT = 8
_LIFETIME = struct.Struct("<f")
_CREATED = struct.Struct("<d")
_LIFETIME_AT = _EXPIRES_AT + 8
_NO_LIFETIME = _LIFETIME.pack(math.nan)  # marks a record that holds created_at in full
_PROPERTIES_LEN, _MAC_LEN = _HEAD - 2, _HEAD - 1
_RAW, _HEX_EVEN, _HEX_ODD = b"\x00", b"\x01", b"\x02"  # forms of a response id key
_RESP, _HEX_DIGITS = "resp_", "0123456789abcdef"
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

    Memory: about 197 bytes per anchor with 16-byte views and 30-character
    ``resp_`` + hex response ids (``tracemalloc`` over 100,000 anchors, see
    ``benchmarks/bench_stores.py``; it varies by some 25 bytes with how
    full the view ``dict`` is), so the default bound costs about 20 MB.
    Longer response ids cost their extra length (half of it for hex ids),
    and a properties digest (requests with tools, …) and a MAC (a secret
    key) 16 bytes each: 213 and 229 bytes.

    Every method takes one lock for a few microseconds and never blocks on
    I/O, so the async methods run inline on the event loop.

    Args:
        max_anchors: How many anchors to keep; beyond it the least recently
            used (recorded or found) anchor is dropped.
        ttl: Seconds an anchor lives; the tracker sets
            ``expires_at = created_at + ttl``.
        secret_key: Optional key for keyed view digests (else the
            ``ANCHORTRACK_SECRET_KEY`` environment variable).
        clock: Returns the current Unix time; injectable for tests.
    """

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
                    slot, _, expires_at, _, _, _ = unpack(rec)
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
        rid = _rid_key(check_response_id(response_id))
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
        view, rid = anchor.view, _rid_key(anchor.response_id)
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
        """Forget *response_id* and the view it was recorded under, if any."""
        check_scope(scope)
        rid = _rid_key(check_response_id(response_id))
        with self._lock:
            sc = self._scopes.get(scope)
            slot = self._probe(sc.id, rid)[1] if sc is not None else 0
            if slot:
                self._drop(slot)
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
        if at_view:
            assert rec is not None
            moved = _rid(rec) != rid
            if moved:
                self._unindex_rid(sc.id, _rid(rec), at_view)
            sc.views[view] = _record(at_view, anchor, rid)  # before a rehash reads it
            if moved:
                self._index_rid(sc.id, rid, at_view)
            self._touch(at_view)
            return
        slot = self._allocate()
        self._keys[slot] = view
        self._sids[slot] = sc.id
        sc.views[view] = _record(slot, anchor, rid)
        self._live += 1
        self._link_front(slot)
        self._index_rid(sc.id, rid, slot)

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
                return len(self._keys) - 1
            self._drop(self._prev[0])  # the least recently used anchor
        return self._free.pop()

    def _drop(self, slot: int) -> None:
        """Remove the anchor in *slot* from every structure."""
        view = self._keys[slot]
        assert view is not None
        sc = self._scope_ids[self._sids[slot]]
        rec = sc.views[view]
        self._unindex_rid(sc.id, _rid(rec), slot)
        del sc.views[view]
        if not sc.views:
            self._emptied.append(sc)
        self._keys[slot] = None
        self._unlink(slot)
        self._free.append(slot)
        self._live -= 1

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
        size = len(table)
        cell = hash((sid, rid)) % size
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
            cell = cell + 1 if cell + 1 < size else 0

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
        """Rehash into a table half full, dropping tombstones (any size: cells are taken modulo it)."""
        size = 2 * self._live + 8
        table = array("i", bytes(4 * size))
        used = 0
        for sc in self._scope_ids.values():
            for rec in sc.views.values():
                cell = hash((sc.id, _rid(rec))) % size
                while table[cell] != _EMPTY:
                    cell = cell + 1 if cell + 1 < size else 0
                table[cell] = _RECORD.unpack_from(rec)[0]
                used += 1
        self._rids, self._rids_used = table, used


def _rid_key(response_id: str) -> bytes:
    """
    The bytes a record holds for *response_id*: one form byte, then the id.

    ``resp_`` + lowercase hex (OpenAI's ids) is held as the hex's bytes, an
    odd digit count padded with ``0`` and marked by its own form byte; any
    other id as its UTF-8. The form byte keeps the three apart, so equal keys
    mean equal ids.
    """
    if response_id.startswith(_RESP):
        digits = response_id[5:]
        if digits and digits.isascii() and not digits.strip(_HEX_DIGITS):
            if len(digits) % 2:
                return _HEX_ODD + bytes.fromhex(digits + "0")
            return _HEX_EVEN + bytes.fromhex(digits)
    return _RAW + response_id.encode()


def _response_id(key: bytes) -> str:
    """The response id a `_rid_key` names."""
    form, data = key[:1], key[1:]
    if form == _RAW:
        return data.decode()
    return _RESP + (data.hex() if form == _HEX_EVEN else data.hex()[:-1])


def _record(slot: int, anchor: Anchor, rid: bytes) -> bytes:
    props, mac = anchor.properties, anchor.mac or b""
    created, expires = anchor.created_at, anchor.expires_at
    try:
        lifetime = _LIFETIME.unpack(_LIFETIME.pack(expires - created))[0]
    except OverflowError:
        lifetime = math.nan
    if expires - lifetime == created:
        full = b""
    else:
        full, lifetime = _CREATED.pack(created), math.nan
    head = _RECORD.pack(slot, anchor.count, expires, lifetime, len(props), len(mac))
    return head + full + props + mac + rid


def _body(rec: bytes) -> int:
    """Where the properties digest starts: past the head and a full created_at."""
    return _HEAD + 8 if rec[_LIFETIME_AT : _LIFETIME_AT + 4] == _NO_LIFETIME else _HEAD


def _rid(rec: bytes) -> bytes:
    """The response id key (see `_rid_key`) at the end of a record."""
    return rec[_body(rec) + rec[_PROPERTIES_LEN] + rec[_MAC_LEN] :]


def _anchor(view: bytes, rec: bytes) -> Anchor:
    _, count, expires_at, lifetime, plen, mlen = _RECORD.unpack_from(rec)
    if math.isnan(lifetime):
        created_at, body = _CREATED.unpack_from(rec, _HEAD)[0], _HEAD + 8
    else:
        created_at, body = expires_at - lifetime, _HEAD
    props_end = body + plen
    mac_end = props_end + mlen
    return Anchor(
        view,
        _response_id(rec[mac_end:]),
        count,
        created_at,
        expires_at,
        properties=rec[body:props_end],
        mac=rec[props_end:mac_end] or None,
    )
