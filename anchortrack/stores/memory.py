"""
`MemoryStore`: a bounded, thread-safe, in-process anchor store with TTL.

Layout, chosen to keep an anchor under 200 bytes (see `MemoryStore`; an
``OrderedDict`` plus a reverse ``dict`` costs about 355):

* per scope, one ``dict`` from view to a packed *record* (`_pack`): a flags
  byte, ``expires_at``, the slot, the count, the lifetime
  ``expires_at - created_at`` as a float32 (``created_at`` itself only when
  that does not give it back exactly), the parent links, the lengths of the
  properties digest and the MAC when there are any, then those two, and
  last the *response id key* (`_rid_key`): a ``resp_`` + lowercase hex id,
  as OpenAI issues them, is held as the bytes of its hex (half the size),
  any other id as its UTF-8, behind one byte naming the form;
* per *slot* (a small integer naming one anchor): its view, its scope id and
  its neighbours in an LRU ring, in a list and three typed arrays (the scope
  ids one byte each while there are fewer than 256 scopes);
* a reverse index from ``(scope, response id key)`` to slot: an
  open-addressing table of slot numbers (4 bytes a cell, half to two thirds
  full, any size; the bits above a slot hold bits of its key's hash, so a
  probe decodes few records) rather than a second ``dict``.

Parent links live in the records.
An anchor recorded while its parent is held holds the parent's slot (4
bytes instead of the parent's id), and the parent holds its first child,
each child its next sibling, so `MemoryStore.evict` reaches every held
descendant.
When a parent goes (dropped, or its slot recorded under another response
id), its children get its response id key in their records instead:
`Anchor.parent` comes back exact.
An anchor whose parent was not held when it was recorded keeps the parent's
id key and is not linked.

Lookups by view are one ``dict`` probe each; lookups by response id are a
short linear probe.
`MemoryStore.find` only collects the records of the views it was asked
about: `Anchor` objects are built, and anchors marked as used, when the
planner asks for one (`_Found`).
Expired anchors are dropped when met, and an incremental sweep looks at two
slots per write, so storage follows the TTL without a background thread.
"""

from __future__ import annotations

import math
import struct
import threading
import time
from array import array
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import NamedTuple, TypeVar, overload

from ._base import DEFAULT_TTL, Anchor, resolve_secret_key
from ._checks import check_anchor, check_response_id, check_scope, check_ttl


_T = TypeVar("_T")

# -- records --------------------------------------------------------------------
#
#   0  flags     B
#   1  expires   d
#   9  slot      I
#  13  count     H, or I with _WIDE_COUNT
#      lifetime  f (expires - created), or created d with _FULL_CREATED
#      up        I with _UP (the parent's slot), or the parent key's length I with _PARENT_KEY
#      down      I with _DOWN (the first child's slot)
#      side      I with _SIDE (the next sibling's slot)
#      lengths   B B with _DIGESTS (properties, MAC)
#   then the properties digest, the MAC, the parent's key (_PARENT_KEY), the response id key (the rest)

_WIDE_COUNT, _FULL_CREATED, _UP, _PARENT_KEY, _DOWN, _SIDE, _DIGESTS = 1, 2, 4, 8, 16, 32, 64
_EXPIRES_AT, _SLOT_AT = 1, 9
_F64, _F32, _U32 = struct.Struct("<d"), struct.Struct("<f"), struct.Struct("<I")
_RAW, _HEX_EVEN, _HEX_ODD = b"\x00", b"\x01", b"\x02"  # forms of a response id key
_RESP, _HEX_DIGITS = "resp_", "0123456789abcdef"
_EMPTY, _TOMBSTONE = 0, -1
_SWEEP_PER_WRITE = 2
_SID_TYPES = ("B", "H", "I")


class _Layout(NamedTuple):
    """Where a record's fixed fields are, for one flags byte (-1: absent)."""

    struct: struct.Struct
    link_at: int  # the up slot or the parent key's length
    down_at: int
    side_at: int


def _layout(flags: int) -> _Layout:
    fmt = "<BdI" + ("I" if flags & _WIDE_COUNT else "H") + ("d" if flags & _FULL_CREATED else "f")
    link_at = down_at = side_at = -1
    if flags & (_UP | _PARENT_KEY):
        link_at = struct.calcsize(fmt)
        fmt += "I"
    if flags & _DOWN:
        down_at = struct.calcsize(fmt)
        fmt += "I"
    if flags & _SIDE:
        side_at = struct.calcsize(fmt)
        fmt += "I"
    if flags & _DIGESTS:
        fmt += "BB"
    return _Layout(struct.Struct(fmt), link_at, down_at, side_at)


_LAYOUTS = [_layout(flags) for flags in range(128)]


class _Fields(NamedTuple):
    """A record, unpacked."""

    slot: int
    item_count: int  # `Anchor.count` (``count`` would hide the tuple method)
    expires_at: float
    created_at: float
    properties: bytes
    mac: bytes
    rid: bytes  # the response id key (see `_rid_key`)
    up: int = 0  # the parent's slot, when linked to it
    parent: bytes = b""  # else the parent's response id key, if any
    down: int = 0  # the first child's slot
    side: int = 0  # the next sibling's slot


def _pack(f: _Fields) -> bytes:
    flags = _WIDE_COUNT if f.item_count > 0xFFFF else 0
    lifetime = _lifetime(f.expires_at, f.created_at)
    if lifetime is None:
        flags |= _FULL_CREATED
    values: list[float] = [f.expires_at, f.slot, f.item_count, f.created_at if lifetime is None else lifetime]
    parent = b""
    if f.up:
        flags |= _UP
        values.append(f.up)
    elif f.parent:
        flags |= _PARENT_KEY
        parent = f.parent
        values.append(len(parent))
    if f.down:
        flags |= _DOWN
        values.append(f.down)
    if f.side:
        flags |= _SIDE
        values.append(f.side)
    if f.properties or f.mac:
        flags |= _DIGESTS
        values += (len(f.properties), len(f.mac))
    head = _LAYOUTS[flags].struct.pack(flags, *values)
    return b"".join((head, f.properties, f.mac, parent, f.rid))


def _unpack(rec: bytes) -> _Fields:
    flags = rec[0]
    layout = _LAYOUTS[flags]
    values = layout.struct.unpack_from(rec)
    expires_at, slot, count, lifetime = values[1:5]
    created_at = lifetime if flags & _FULL_CREATED else expires_at - lifetime
    i, up, key_len, down, side, props_len, mac_len = 5, 0, 0, 0, 0, 0, 0
    if flags & _UP:
        up, i = values[i], i + 1
    elif flags & _PARENT_KEY:
        key_len, i = values[i], i + 1
    if flags & _DOWN:
        down, i = values[i], i + 1
    if flags & _SIDE:
        side, i = values[i], i + 1
    if flags & _DIGESTS:
        props_len, mac_len = values[i], values[i + 1]
    props_end = layout.struct.size + props_len
    mac_end = props_end + mac_len
    key_end = mac_end + key_len
    return _Fields(
        slot,
        count,
        expires_at,
        created_at,
        rec[layout.struct.size : props_end],
        rec[props_end:mac_end],
        rec[key_end:],
        up,
        rec[mac_end:key_end],
        down,
        side,
    )


def _lifetime(expires_at: float, created_at: float) -> float | None:
    """``expires_at - created_at`` as a float32, if that gives *created_at* back exactly."""
    try:
        (lifetime,) = _F32.unpack(_F32.pack(expires_at - created_at))
    except OverflowError:
        return None
    back = expires_at - lifetime
    if back != created_at or math.copysign(1.0, back) != math.copysign(1.0, created_at):
        return None
    return float(lifetime)


def _expires(rec: bytes) -> float:
    return float(_F64.unpack_from(rec, _EXPIRES_AT)[0])


def _slot(rec: bytes) -> int:
    return int(_U32.unpack_from(rec, _SLOT_AT)[0])


def _down(rec: bytes) -> int:
    at = _LAYOUTS[rec[0]].down_at
    return int(_U32.unpack_from(rec, at)[0]) if at >= 0 else 0


def _side(rec: bytes) -> int:
    at = _LAYOUTS[rec[0]].side_at
    return int(_U32.unpack_from(rec, at)[0]) if at >= 0 else 0


def _with_link(rec: bytes, bit: int, slot: int) -> bytes:
    """*rec* with its first child (*bit* ``_DOWN``) or next sibling (``_SIDE``) set to *slot* (0: none)."""
    flags = rec[0]
    if flags & bit:
        layout = _LAYOUTS[flags]
        at = layout.down_at if bit == _DOWN else layout.side_at
        if slot:
            return b"".join((rec[:at], _U32.pack(slot), rec[at + 4 :]))
        return b"".join((bytes((flags & ~bit,)), rec[1:at], rec[at + 4 :]))
    if not slot:
        return rec
    layout = _LAYOUTS[flags | bit]
    at = layout.down_at if bit == _DOWN else layout.side_at
    return b"".join((bytes((flags | bit,)), rec[1:at], _U32.pack(slot), rec[at:]))


def _rid(rec: bytes) -> bytes:
    """The response id key at the end of a record."""
    flags = rec[0]
    layout = _LAYOUTS[flags]
    at = layout.struct.size
    if flags & _DIGESTS:
        at += rec[at - 2] + rec[at - 1]
    if flags & _PARENT_KEY:
        at += _U32.unpack_from(rec, layout.link_at)[0]
    return rec[at:]


def _same_anchor(a: bytes, b: bytes) -> bool:
    """Whether two records hold the same anchor (their slots and parent links aside)."""
    return _unpack(a)[1:7] == _unpack(b)[1:7]


def _rid_key(response_id: str) -> bytes:
    """
    The bytes a record holds for *response_id*: one form byte, then the id.

    ``resp_`` + lowercase hex (OpenAI's ids) is held as the hex's bytes, an
    odd digit count padded with ``0`` and marked by its own form byte; any
    other id as its UTF-8 (lone surrogates included). The form byte keeps
    the three apart, so equal keys mean equal ids.
    """
    if response_id.startswith(_RESP):
        digits = response_id[5:]
        if digits and digits.isascii() and not digits.strip(_HEX_DIGITS):
            if len(digits) % 2:
                return _HEX_ODD + bytes.fromhex(digits + "0")
            return _HEX_EVEN + bytes.fromhex(digits)
    return _RAW + response_id.encode("utf-8", "surrogatepass")


def _response_id(key: bytes) -> str:
    """The response id a `_rid_key` names."""
    form, data = key[:1], key[1:]
    if form == _RAW:
        return data.decode("utf-8", "surrogatepass")
    return _RESP + (data.hex() if form == _HEX_EVEN else data.hex()[:-1])


def _anchor(view: bytes, f: _Fields, parent: bytes) -> Anchor:
    return Anchor(
        view,
        _response_id(f.rid),
        f.item_count,
        f.created_at,
        f.expires_at,
        properties=f.properties,
        mac=f.mac or None,
        parent=_response_id(parent) if parent else None,
    )


class _Scope:
    """One scope's id and its view → record map."""

    __slots__ = ("id", "name", "views")

    def __init__(self, id: int, name: str) -> None:
        self.id = id
        self.name = name
        self.views: dict[bytes, bytes] = {}


_MISSING = object()


class _Found(Mapping[bytes, Anchor]):
    """
    What `MemoryStore.find` found: a read-only mapping of view to `Anchor`.

    It holds the records the views named when `find` ran and decodes one
    into an `Anchor` only when asked for it (``get``, ``[]``, ``items``, …),
    which is also when that anchor counts as used for the LRU order.
    Membership is judged at the time of `find`: an anchor already expired
    then is left out (and dropped from the store) when met; ``len``,
    iteration and ``bool`` check the records without decoding them.
    An anchor recorded over, evicted or dropped after `find` still comes back
    as it was found (its `Anchor.parent` may then be None if the store had
    it only as a link).
    """

    __slots__ = ("_anchors", "_now", "_records", "_scope", "_settled", "_store")

    def __init__(self, store: MemoryStore, scope: _Scope, records: dict[bytes, bytes], now: float) -> None:
        self._store = store
        self._scope = scope
        self._records = records
        self._now = now
        self._anchors: dict[bytes, Anchor] = {}
        self._settled = False

    @overload
    def get(self, key: bytes, /) -> Anchor | None: ...

    @overload
    def get(self, key: bytes, /, default: Anchor | _T) -> Anchor | _T: ...

    def get(self, key: bytes, /, default: object = None) -> object:
        """The anchor found for view *key*, decoded now (and marked as used), else *default*."""
        anchor = self._anchors.get(key)
        if anchor is not None:
            return anchor
        rec = self._records.get(key)
        if rec is None:
            return default
        anchor = self._store._open(self._scope, key, rec, self._now, touch=True)
        if anchor is None:
            self._records.pop(key, None)
            return default
        self._anchors[key] = anchor
        return anchor

    def __getitem__(self, key: bytes) -> Anchor:
        anchor = self.get(key, _MISSING)
        if anchor is _MISSING:
            raise KeyError(key)
        assert isinstance(anchor, Anchor)
        return anchor

    def __contains__(self, key: object) -> bool:
        if key in self._anchors:
            return True
        rec = self._records.get(key)  # type: ignore[call-overload]
        if rec is None:
            return False
        if _expires(rec) > self._now:
            return True
        self._discard(key, rec)  # type: ignore[arg-type]
        return False

    def __bool__(self) -> bool:
        expired = []
        for key, rec in self._records.items():
            if key in self._anchors or _expires(rec) > self._now:
                break
            expired.append((key, rec))
        else:
            self._settled = True
        for key, rec in expired:
            self._discard(key, rec)
        return bool(self._records)

    def __len__(self) -> int:
        self._settle()
        return len(self._records)

    def __iter__(self) -> Iterator[bytes]:
        self._settle()
        return iter(self._records)

    def __repr__(self) -> str:
        self._settle()
        shown = {}
        for key, rec in self._records.items():
            anchor = self._anchors.get(key)
            if anchor is None:
                anchor = self._store._open(self._scope, key, rec, self._now, touch=False)
            if anchor is not None:
                shown[key] = anchor
        return f"MemoryStore.find(...) -> {shown!r}"

    def _settle(self) -> None:
        """Leave out every anchor expired at the time of `find` (then nothing else ever leaves)."""
        if not self._settled:
            now = self._now
            expired = [
                (key, rec)
                for key, rec in self._records.items()
                if _expires(rec) <= now and key not in self._anchors
            ]
            for key, rec in expired:
                self._discard(key, rec)
            self._settled = True

    def _discard(self, key: bytes, rec: bytes) -> None:
        del self._records[key]
        self._store._forget(self._scope, key, rec)


class MemoryStore:
    """
    Anchors in this process's memory: bounded, LRU, TTL, thread- and task-safe.

    The default store.
    Anchors do not survive a restart and are not shared between processes;
    use `SQLiteStore` or `RedisStore` for that.

    Memory: about 191 bytes per anchor with 16-byte views and 30-character
    ``resp_`` + hex response ids, about 199 when each anchor is chained
    from the one before (``tracemalloc`` over 100,000 anchors, see
    ``benchmarks/bench_stores.py``; it varies by some 25 bytes with how
    full the view ``dict`` is), so the default bound costs about 20 MB.
    Longer response ids cost their extra length (half of it for hex ids),
    and a properties digest (requests with tools, …) and a MAC (a secret
    key) 16 bytes each, plus 2 for their lengths.

    `find` returns a read-only mapping that builds each `Anchor` when it is
    asked for, and an anchor counts as used (for the LRU order) when it is
    read from that mapping or by `get`, or recorded.

    Every method takes one lock for a few microseconds and never blocks on
    I/O, so the async methods run inline on the event loop, and the tracker
    calls the sync ones inline too (``never_blocks``), without a deadline
    thread.

    Args:
        max_anchors: How many anchors to keep; beyond it the least recently
            used (recorded or read) anchor is dropped.
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
        self._free_scope_ids: list[int] = []
        # Slot 0 is the LRU ring's sentinel: _next[0] is the most recently
        # used slot and _prev[0] the least.
        self._keys: list[bytes | None] = [None]
        self._sids = array("B", [0])
        self._prev = array("i", [0])
        self._next = array("i", [0])
        self._free: list[int] = []
        # Reverse index cells: a slot in the low bits, hash bits of its key above (tags skip most keys).
        self._slot_bits = max_anchors.bit_length()  # slots run from 1 to max_anchors
        self._slot_mask = (1 << self._slot_bits) - 1
        self._tag_mask = (1 << max(0, 31 - self._slot_bits)) - 1
        self._rids = array("i", bytes(4 * 8))
        self._rids_used = 0  # cells holding a slot or a tombstone
        self._live = 0
        self._sweep_at = 1
        self._emptied: list[_Scope] = []  # scopes to forget once the lock is released

    def __len__(self) -> int:
        """Return how many anchors are held, including expired, unswept ones."""
        return self._live

    # -- the AnchorStore protocol ------------------------------------------

    def find(self, scope: str, views: Sequence[bytes]) -> Mapping[bytes, Anchor]:
        """
        Return the live anchors recorded in *scope* for any of *views*.

        A read-only mapping of view to `Anchor` (see `MemoryStore`): only the
        anchors read from it are decoded and count as used.
        """
        check_scope(scope)
        with self._lock:
            sc = self._scopes.get(scope)
            if sc is None:
                return {}
            table = sc.views
            found = {view: rec for view in views if (rec := table.get(view)) is not None}
            now = self._clock()
        return _Found(self, sc, found, now) if found else {}

    def get(self, scope: str, response_id: str) -> Anchor | None:
        """Return the live anchor recorded in *scope* for *response_id*."""
        check_scope(scope)
        rid = _rid_key(check_response_id(response_id))
        with self._lock:
            sc = self._scopes.get(scope)
            slot = self._probe(sc, rid)[1] if sc is not None else 0
            if not slot:
                return None
            assert sc is not None
            view = self._keys[slot]
            assert view is not None
            rec = sc.views[view]
            if _expires(rec) <= self._clock():
                self._drop(slot)
                self._collect_scopes()
                return None
            self._touch(slot)
            parent = self._parent_key(rec)
        return _anchor(view, _unpack(rec), parent)

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
        parent = _rid_key(anchor.parent) if anchor.parent else b""
        with self._lock:
            now = self._clock()
            sc = self._scope(scope)
            try:
                self._put(sc, view, rid, parent, anchor, now)
                self._sweep(now)
            finally:
                if not sc.views:
                    self._emptied.append(sc)
                self._collect_scopes()

    def evict(self, scope: str, response_id: str) -> None:
        """Forget *response_id*, the view it was recorded under, and its held descendants."""
        check_scope(scope)
        rid = _rid_key(check_response_id(response_id))
        with self._lock:
            sc = self._scopes.get(scope)
            slot = self._probe(sc, rid)[1] if sc is not None else 0
            if slot:
                for dead in self._descendants(slot):
                    self._drop(dead)
                self._collect_scopes()

    async def afind(self, scope: str, views: Sequence[bytes]) -> Mapping[bytes, Anchor]:
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

    # -- what a `_Found` mapping asks for (takes the lock) ---------------------

    def _open(self, sc: _Scope, view: bytes, rec: bytes, now: float, *, touch: bool) -> Anchor | None:
        """
        Decode *rec*, which `find` returned for *view* at *now*; None if it had expired then.

        If the store still holds that anchor, it is marked as used (*touch*)
        and its parent named by its link; an expired one is dropped.
        """
        with self._lock:
            current = sc.views.get(view)
            held = current is rec or (current is not None and _same_anchor(current, rec))
            if held:
                assert current is not None
                rec = current
            if _expires(rec) <= now:
                if held:
                    self._drop(_slot(rec))
                    self._collect_scopes()
                return None
            if held:
                if touch:
                    self._touch(_slot(rec))
                parent = self._parent_key(rec)
            else:  # recorded over or dropped since: a link to its parent may name another anchor now
                parent = b"" if rec[0] & _UP else _unpack(rec).parent
        return _anchor(view, _unpack(rec), parent)

    def _forget(self, sc: _Scope, view: bytes, rec: bytes) -> None:
        """Drop the anchor `find` returned as *rec* for *view*, if it is still held."""
        with self._lock:
            current = sc.views.get(view)
            if current is rec or (current is not None and _same_anchor(current, rec)):
                self._drop(_slot(rec))
                self._collect_scopes()

    # -- internals (the lock is held) ----------------------------------------

    def _record(self, slot: int) -> bytes:
        view = self._keys[slot]
        assert view is not None
        return self._scope_ids[self._sids[slot]].views[view]

    def _write(self, f: _Fields) -> None:
        """Replace the record of slot ``f.slot`` by *f*."""
        view = self._keys[f.slot]
        assert view is not None
        self._scope_ids[self._sids[f.slot]].views[view] = _pack(f)

    def _relink(self, slot: int, bit: int, to: int) -> None:
        """Set the first child (*bit* ``_DOWN``) or next sibling (``_SIDE``) of *slot* to *to*."""
        view = self._keys[slot]
        assert view is not None
        views = self._scope_ids[self._sids[slot]].views
        views[view] = _with_link(views[view], bit, to)

    def _parent_key(self, rec: bytes) -> bytes:
        """The response id key of a held record's parent (empty when it has none)."""
        flags = rec[0]
        if flags & _UP:
            return _rid(self._record(_U32.unpack_from(rec, _LAYOUTS[flags].link_at)[0]))
        return _unpack(rec).parent if flags & _PARENT_KEY else b""

    def _put(self, sc: _Scope, view: bytes, rid: bytes, parent: bytes, anchor: Anchor, now: float) -> None:
        rec = sc.views.get(view)
        at_view = _slot(rec) if rec is not None else 0
        at_rid = self._probe(sc, rid)[1]
        if at_rid and at_rid != at_view:
            self._drop(at_rid)
        if not anchor.is_live(now):
            if at_view:
                self._drop(at_view)
            return
        down, moved = 0, True
        if at_view:
            old = _unpack(sc.views[view])  # read again: dropping at_rid may have relinked it
            moved = old.rid != rid
            self._unlink_parent(old)
            if moved:
                self._orphan_children(old.down, old.rid)
                self._unindex_rid(sc.id, old.rid, at_view)
            else:
                down = _down(sc.views[view])
            slot = at_view
        else:
            slot = self._allocate()
            self._keys[slot] = view
            self._sids[slot] = sc.id
            self._live += 1
            self._link_front(slot)
        up = self._probe(sc, parent)[1] if parent else 0
        if up == slot:
            up = 0
        side = _down(self._record(up)) if up else 0
        sc.views[view] = _pack(
            _Fields(
                slot,
                anchor.count,
                anchor.expires_at,
                anchor.created_at,
                anchor.properties,
                anchor.mac or b"",
                rid,
                up,
                b"" if up else parent,
                down,
                side,
            )
        )  # before a rehash reads it
        if moved:
            self._index_rid(sc.id, rid, slot)
        if up:
            self._relink(up, _DOWN, slot)
        if at_view:
            self._touch(slot)

    def _scope(self, name: str) -> _Scope:
        sc = self._scopes.get(name)
        if sc is None:
            if self._free_scope_ids:
                sid = self._free_scope_ids.pop()
            else:
                sid = self._next_scope_id
                self._next_scope_id += 1
                if sid >= 1 << (8 * self._sids.itemsize):  # widen the scope ids
                    self._sids = array(_SID_TYPES[_SID_TYPES.index(self._sids.typecode) + 1], self._sids)
            sc = _Scope(sid, name)
            self._scopes[name] = self._scope_ids[sid] = sc
        return sc

    def _collect_scopes(self) -> None:
        """Forget the scopes `_drop` emptied, unless they were refilled."""
        while self._emptied:
            sc = self._emptied.pop()
            if not sc.views and self._scopes.get(sc.name) is sc:
                del self._scopes[sc.name], self._scope_ids[sc.id]
                self._free_scope_ids.append(sc.id)

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
        f = _unpack(sc.views[view])
        self._unlink_parent(f)
        self._orphan_children(f.down, f.rid)
        self._unindex_rid(sc.id, f.rid, slot)
        del sc.views[view]
        if not sc.views:
            self._emptied.append(sc)
        self._keys[slot] = None
        self._unlink(slot)
        self._free.append(slot)
        self._live -= 1

    # -- parent links: parent slot, first child and next sibling, in the records --

    def _unlink_parent(self, f: _Fields) -> None:
        """Take slot ``f.slot`` out of its parent's children (*f* is its current record)."""
        if not f.up:
            return
        child = _down(self._record(f.up))
        if child == f.slot:
            self._relink(f.up, _DOWN, f.side)
            return
        while child:
            sibling = _side(self._record(child))
            if sibling == f.slot:
                self._relink(child, _SIDE, f.side)
                return
            child = sibling

    def _orphan_children(self, child: int, parent: bytes) -> None:
        """Unlink *child* and its next siblings from their parent, whose response id key is *parent*."""
        while child:
            f = _unpack(self._record(child))
            self._write(f._replace(up=0, parent=parent, side=0))
            child = f.side

    def _descendants(self, slot: int) -> list[int]:
        """*slot* and every slot linked below it, parents before children."""
        found, seen, i = [slot], {slot}, 0
        while i < len(found):
            child = _down(self._record(found[i]))
            i += 1
            while child:
                if child not in seen:
                    seen.add(child)
                    found.append(child)
                child = _side(self._record(child))
        return found

    # -- the LRU ring and the sweep ---------------------------------------------

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
            if keys[slot] is not None and _expires(self._record(slot)) <= now:
                self._drop(slot)

    # -- the reverse index: (scope id, response id key) -> slot -----------------

    def _probe(self, sc: _Scope, rid: bytes) -> tuple[int, int, int]:
        """
        Return ``(cell, slot, entry)`` for *rid* in scope *sc*.

        *slot* is 0 when absent; *cell* is then where to insert it, and
        *entry* what to write there once the slot is known (its tag bits).
        """
        table, keys, sids, views, sid = self._rids, self._keys, self._sids, sc.views, sc.id
        size, low = len(table), self._slot_mask
        cell, tag = self._hash(sid, rid, size)
        free = -1
        while True:
            entry = table[cell]
            if entry == _EMPTY:
                return (free if free >= 0 else cell), 0, tag
            if entry == _TOMBSTONE:
                if free < 0:
                    free = cell
            elif entry & ~low == tag:
                slot = entry & low
                if sids[slot] == sid:
                    view = keys[slot]
                    assert view is not None
                    if _rid(views[view]) == rid:
                        return cell, slot, tag
            cell = cell + 1 if cell + 1 < size else 0

    def _hash(self, sid: int, rid: bytes, size: int) -> tuple[int, int]:
        """The first cell for *rid* in scope *sid*, and its tag: hash bits above the slot's."""
        h = hash((sid, rid))
        return h % size, ((h >> 40) & self._tag_mask) << self._slot_bits

    def _index_rid(self, sid: int, rid: bytes, slot: int) -> None:
        cell, found, tag = self._probe(self._scope_ids[sid], rid)
        assert not found
        if self._rids[cell] == _EMPTY:
            self._rids_used += 1
        self._rids[cell] = slot | tag
        if self._rids_used * 3 > len(self._rids) * 2:
            self._rebuild_rids()

    def _unindex_rid(self, sid: int, rid: bytes, slot: int) -> None:
        cell, found, _ = self._probe(self._scope_ids[sid], rid)
        assert found == slot
        self._rids[cell] = _TOMBSTONE

    def _rebuild_rids(self) -> None:
        """Rehash into a table half full, dropping tombstones (any size: cells are taken modulo it)."""
        size = 2 * self._live + 8
        table = array("i", bytes(4 * size))
        used = 0
        for sc in self._scope_ids.values():
            for rec in sc.views.values():
                cell, tag = self._hash(sc.id, _rid(rec), size)
                while table[cell] != _EMPTY:
                    cell = cell + 1 if cell + 1 < size else 0
                table[cell] = _slot(rec) | tag
                used += 1
        self._rids, self._rids_used = table, used
