"""
`MemoryStore` beyond the contract: LRU bound, sweeping, its compact layout
(checked against a plain reference model) and its memory cost.
"""

from __future__ import annotations

import gc
import math
import threading
import time
import tracemalloc
from collections import OrderedDict
from collections.abc import Mapping

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from anchortrack.stores import Anchor, MemoryStore, memory
from anchortrack.stores.memory import _Fields, _pack, _rid, _rid_key, _slot, _unpack

from ..helpers import FakeClock
from .helpers import SCOPE, make_anchor, view


def check_layout(store: MemoryStore) -> None:
    """Assert the store's internal structures agree with each other."""
    slots = [s for s, key in enumerate(store._keys) if key is not None]
    assert len(slots) == store._live == len(store)
    assert sum(len(sc.views) for sc in store._scope_ids.values()) == store._live
    assert all(sc.views for sc in store._scope_ids.values())  # no empty scope kept
    assert store._scopes == {sc.name: sc for sc in store._scope_ids.values()}
    assert not set(store._free_scope_ids) & set(store._scope_ids)
    records = {}
    for slot in slots:
        key = store._keys[slot]
        assert key is not None
        rec = store._scope_ids[store._sids[slot]].views[key]
        assert slot == _slot(rec)
        assert rec == _pack(_unpack(rec))  # the record form is canonical
        assert 1 == sum(1 for c in store._rids if c > 0 and c & store._slot_mask == slot)
        assert (store._probe(store._scope_ids[store._sids[slot]], _rid(rec)))[1] == slot
        records[slot] = _unpack(rec)
    for slot, f in records.items():
        assert not (f.up and f.parent)  # linked, or the parent's id kept: never both
        if f.up:  # a linked parent is held, in the same scope, and lists this child
            assert f.up in records
            assert f.up != slot
            assert store._sids[f.up] == store._sids[slot]
            assert slot in children(records, f.up)
        for child in children(records, slot):
            assert records[child].up == slot
    for f in records.values():
        if f.side:
            assert records[f.side].up == f.up != 0
    ring, slot = [], store._next[0]
    while slot != 0:
        ring.append(slot)
        assert store._next[store._prev[slot]] == slot
        slot = store._next[slot]
    assert sorted(ring) == slots
    assert store._rids_used == sum(1 for c in store._rids if c != 0)
    assert not set(store._free) & set(slots)


def children(records: dict[int, _Fields], slot: int) -> list[int]:
    """The child list of *slot* (first child, then next siblings), which must end."""
    found, child = [], records[slot].down
    while child:
        assert child in records
        assert child not in found
        found.append(child)
        child = records[child].side
    return found


def test_least_recently_used_anchor_is_dropped_at_the_bound(clock: FakeClock) -> None:
    """At max_anchors, a new anchor pushes out the least recently used one."""
    store = MemoryStore(3, clock=clock)
    a, b, c, d, e = (make_anchor(x, clock.now) for x in "abcde")
    for anchor in (a, b, c):
        store.put(SCOPE, anchor)
    assert a == store.find(SCOPE, [a.view])[a.view]  # reading a makes it the most recently used
    store.put(SCOPE, d)  # drops b

    assert {a.view, c.view, d.view} == set(store.find(SCOPE, [x.view for x in (a, b, c, d)]))

    store.get(SCOPE, c.response_id)  # recency now: a, d, c (a find marks nothing it was not read for)
    store.put(SCOPE, e)  # drops the least recent

    assert 3 == len(store)
    assert None is store.get(SCOPE, b.response_id)
    assert {c.view, d.view, e.view} <= set(store.find(SCOPE, [x.view for x in (c, d, e)]))
    check_layout(store)


def test_bound_holds_across_scopes(clock: FakeClock) -> None:
    """The bound is global: one LRU order across every scope."""
    store = MemoryStore(10, clock=clock)
    for i in range(100):
        store.put(f"{i % 7:016x}", make_anchor(i, clock.now))

    assert 10 == len(store)
    assert {view(99), view(92)} == set(store.find(f"{1:016x}", [view(99), view(92), view(85)]))
    check_layout(store)


def test_expired_anchors_are_swept_without_reads(clock: FakeClock) -> None:
    """Writes sweep expired anchors, so storage follows the TTL."""
    store = MemoryStore(clock=clock)
    for i in range(50):
        store.put(SCOPE, make_anchor(i, clock.now, ttl=10))
    clock.advance(11)
    for i in range(50, 100):
        store.put(SCOPE, make_anchor(i, clock.now, ttl=10))

    assert 50 == len(store)
    check_layout(store)


def test_reads_drop_expired_anchors(clock: FakeClock) -> None:
    """An expired anchor met by find or get is dropped at once."""
    store = MemoryStore(clock=clock)
    a, b = make_anchor("a", clock.now, ttl=5), make_anchor("b", clock.now, ttl=5)
    store.put(SCOPE, a)
    store.put(SCOPE, b)
    clock.advance(5)

    assert {} == store.find(SCOPE, [a.view])
    assert None is store.get(SCOPE, b.response_id)
    assert 0 == len(store)
    check_layout(store)


def test_empty_scopes_are_forgotten(clock: FakeClock) -> None:
    """A scope's bookkeeping goes with its last anchor."""
    store = MemoryStore(clock=clock)
    for i in range(20):
        scope = f"{i:016x}"
        store.put(scope, make_anchor(i, clock.now))
        store.evict(scope, make_anchor(i, clock.now).response_id)
    store.put(SCOPE, make_anchor("dead", clock.now - 10, ttl=1))

    assert {} == store._scopes
    check_layout(store)


def test_invalid_bounds_are_refused() -> None:
    """max_anchors and ttl must be positive."""
    with pytest.raises(ValueError, match="max_anchors"):
        MemoryStore(0)
    with pytest.raises(ValueError, match="ttl"):
        MemoryStore(ttl=0)


def test_threads_hammering_one_small_store(clock: FakeClock) -> None:
    """Many threads putting, finding and evicting keep the layout sound."""
    store = MemoryStore(64, clock=clock)
    errors: list[BaseException] = []

    def work(w: int) -> None:
        try:
            for i in range(300):
                a = make_anchor(f"{w}-{i % 90}", clock.now, response_id=f"resp_{i % 50}")
                store.put(f"{w % 3:016x}", a)
                store.find(f"{w % 3:016x}", [a.view, view(i)])
                if i % 7 == 0:
                    store.evict(f"{w % 3:016x}", f"resp_{(i * 3) % 50}")
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert [] == errors
    assert len(store) <= 64
    check_layout(store)


@pytest.mark.parametrize(("chained", "limit"), [(False, 195), (True, 200)])
def test_memory_per_anchor(chained: bool, limit: int) -> None:
    """30,000 anchors (16-byte views, 30-character ids) cost under 195 bytes each, under 200 chained."""
    n, now = 30_000, time.time()
    inputs = [(view(i), f"resp_{view(i).hex()[:25]}") for i in range(n)]
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        store = MemoryStore(n)
        previous = None
        for v, rid in inputs:  # fresh view objects, as from a digest, are kept by the store
            store.put(SCOPE, Anchor(v[:8] + v[8:], rid, 7, now, now + 3600, parent=previous))
            previous = rid if chained else None
        gc.collect()
        per_anchor = (tracemalloc.get_traced_memory()[0] - before) / n
    finally:
        tracemalloc.stop()

    assert n == len(store)
    assert per_anchor < limit, per_anchor


# -- response ids, parents and the record form ---------------------------------------

ODD_IDS = [
    "resp_0123456789abcdef0123456789abcdef0123456789abcdef",  # OpenAI's form: held as bytes
    "resp_abc",  # odd digit count
    "resp_0",
    "resp_00",  # leading zeros
    "resp_ABCDEF",  # uppercase hex: kept as given
    "resp_AbCd",
    "resp_xyz",  # not hex
    "resp_",  # no digits
    "resp_12 34",
    "RESP_abcd",
    "abcd",  # hex without the prefix
    "0",
    "resp_ünïcödé",
    "resp_日本語",
    "resp_\U0001f600",
    "resp_\ud800",  # a lone surrogate (JSON can carry one)
    "resp_" + "f" * 100_001,  # very long, odd
    "x" * 70_000,  # longer than a 16-bit length
    "resp_١٢٣",  # digits, but not ASCII
]


@pytest.mark.parametrize("rid", ODD_IDS)
def test_response_ids_and_parents_round_trip_exactly(clock: FakeClock, rid: str) -> None:
    """Any id comes back exactly: as a response id, as a held parent, as a parent never held or gone since."""
    store = MemoryStore(clock=clock)
    parent = make_anchor("parent", clock.now, response_id=rid)
    child = make_anchor("child", clock.now, response_id=rid + "-child", parent=rid)
    orphan = make_anchor("orphan", clock.now, parent=rid + "-never")
    for a in (parent, child, orphan):
        store.put(SCOPE, a)

    assert parent == store.get(SCOPE, rid)
    assert child == store.get(SCOPE, child.response_id)
    everything = {a.view: a for a in (parent, child, orphan)}
    assert everything == store.find(SCOPE, list(everything))
    assert _rid_key(rid) != _rid_key(rid + "-child")
    check_layout(store)

    store.put(SCOPE, make_anchor("parent", clock.now, response_id="resp_other"))  # the parent goes
    assert child == store.get(SCOPE, child.response_id)
    assert {child.view: child} == store.find(SCOPE, [child.view])
    check_layout(store)


def test_response_id_keys_never_collide() -> None:
    """Different ids give different keys, whatever their form."""
    ids = [*ODD_IDS, "resp_abc0", "resp_0abc", "resp_ab", "resp_0a", "resp_a0", "\x01", "\x02", "\x00"]
    keys = [_rid_key(rid) for rid in ids]
    assert len(set(keys)) == len(ids)
    assert [memory._response_id(k) for k in keys] == ids
    assert 1 + 24 == len(_rid_key("resp_" + "a" * 48))  # OpenAI's 53 characters: 25 bytes


@given(
    count=st.integers(0, 2**32 - 1),
    created=st.floats(-1e300, 1e300) | st.sampled_from([0.0, -0.0, 1.7e9, 1.7e9 + 0.1]),
    lifetime=st.floats(-1e300, 1e300) | st.sampled_from([3600.0, 0.1, 2592000.0, -0.0]),
    properties=st.binary(max_size=64),
    mac=st.binary(max_size=64),
    rid=st.binary(min_size=1, max_size=80),
    parent=st.one_of(st.just(b""), st.binary(min_size=1, max_size=80), st.integers(1, 2**31 - 1)),
    down=st.integers(0, 2**31 - 1),
    side=st.integers(0, 2**31 - 1),
)
def test_records_round_trip(
    count: int,
    created: float,
    lifetime: float,
    properties: bytes,
    mac: bytes,
    rid: bytes,
    parent: bytes | int,
    down: int,
    side: int,
) -> None:
    """Every field comes back from a packed record, times bit for bit."""
    expires = created + lifetime
    if not math.isfinite(expires):
        return
    up, key = (parent, b"") if isinstance(parent, int) else (0, parent)
    fields = _Fields(7, count, expires, created, properties, mac, rid, up, key, down, side)

    rec = _pack(fields)

    back = _unpack(rec)
    assert fields == back
    assert math.copysign(1.0, created) == math.copysign(1.0, back.created_at)
    assert (7, rid, expires) == (_slot(rec), _rid(rec), memory._expires(rec))
    assert (down, side) == (memory._down(rec), memory._side(rec))
    for bit, value in ((memory._DOWN, down), (memory._SIDE, side)):
        for new in (0, 1, 2**31 - 1):
            patched = memory._with_link(rec, bit, new)
            changed = fields._replace(down=new) if bit == memory._DOWN else fields._replace(side=new)
            assert _pack(changed) == patched
        assert rec == memory._with_link(rec, bit, value)


def test_record_sizes() -> None:
    """The head is 19 bytes with a small count, 2 more with digests; links cost 4 bytes each."""
    plain = _Fields(1, 7, 1.7e9 + 3600, 1.7e9, b"", b"", b"\x01" + bytes(13))  # resp_ + 26 hex digits
    assert 19 + 14 == len(_pack(plain))
    assert 19 + 2 + 32 + 14 == len(_pack(plain._replace(properties=bytes(16), mac=bytes(16))))
    assert 19 + 8 + 14 == len(_pack(plain._replace(up=5, down=6)))
    assert 19 + 4 + 14 + 14 == len(_pack(plain._replace(parent=plain.rid)))
    assert 19 + 2 + 14 == len(_pack(plain._replace(item_count=70_000)))
    assert 19 + 4 + 14 == len(_pack(plain._replace(created_at=1.7e9 + 0.1)))  # created_at kept whole


def typecode(store: MemoryStore) -> str:
    """The array type of the store's scope ids."""
    return store._sids.typecode


def test_scope_ids_are_reused_and_widen_past_255_scopes(clock: FakeClock) -> None:
    """Scope ids take one byte per slot until more than 255 scopes are held at once."""
    store = MemoryStore(clock=clock)
    for i in range(1000):  # one scope at a time: ids are reused
        scope = f"{i:016x}"
        store.put(scope, make_anchor(i, clock.now))
        store.evict(scope, make_anchor(i, clock.now).response_id)
    assert "B" == typecode(store)

    anchors = [make_anchor(i, clock.now) for i in range(300)]
    for i, a in enumerate(anchors):
        store.put(f"{i:016x}", a)

    assert "H" == typecode(store)
    assert all(a == store.get(f"{i:016x}", a.response_id) for i, a in enumerate(anchors))
    assert {anchors[299].view: anchors[299]} == store.find(f"{299:016x}", [a.view for a in anchors])
    check_layout(store)


# -- the layout against a reference model ----------------------------------------

SCOPES = ["0" * 16, "1" * 16]
VIEWS = [view(i) for i in range(6)]
RIDS = [f"resp_{i}" for i in range(5)]


@attrs.define
class FoundModel:
    """What the model's find returned: the anchors found, which were linked to a parent, which were read."""

    scope: str
    anchors: dict[bytes, Anchor] = attrs.field(factory=dict)
    linked: dict[bytes, bool] = attrs.field(factory=dict)
    read: dict[bytes, Anchor | None] = attrs.field(factory=dict)


class Model:
    """
    The MemoryStore semantics written plainly: an OrderedDict and a dict.

    Parent links: every entry gets a new token when it is created or its
    response id changes; a child links to the token its parent had when the
    child was recorded, so a dropped (or moved) parent orphans its children.
    """

    def __init__(self, max_anchors: int) -> None:
        self.max_anchors = max_anchors
        self.lru: OrderedDict[tuple[str, bytes], Anchor] = OrderedDict()
        self.by_rid: dict[tuple[str, str], bytes] = {}
        self.token: dict[tuple[str, bytes], int] = {}
        self.link: dict[tuple[str, bytes], int | None] = {}
        self.tokens = 0

    def drop(self, scope: str, v: bytes) -> None:
        anchor = self.lru.pop((scope, v))
        del self.by_rid[scope, anchor.response_id]
        del self.token[scope, v], self.link[scope, v]

    def _parent_token(self, scope: str, anchor: Anchor) -> int | None:
        pv = self.by_rid.get((scope, anchor.parent)) if anchor.parent else None
        token = self.token.get((scope, pv)) if pv is not None else None
        return token if token != self.token.get((scope, anchor.view)) else None

    def linked(self, scope: str, v: bytes) -> bool:
        """Whether the entry is linked to a parent that is still held (with the same response id)."""
        link = self.link[scope, v]
        return link is not None and any(t == link for (s, _), t in self.token.items() if s == scope)

    def find(self, scope: str, views: list[bytes], now: float) -> FoundModel:
        """What find returns: nothing is marked as used until it is read."""
        found = FoundModel(scope)
        for v in views:
            anchor = self.lru.get((scope, v))
            if anchor is not None and anchor.is_live(now):
                found.anchors[v] = anchor
                found.linked[v] = self.linked(scope, v)
        return found

    def read(self, found: FoundModel, v: bytes) -> Anchor | None:
        """
        Read *v* from what find returned: the anchor as found, marked as used if still held.

        Still held: the view holds the same anchor (its parent aside). Else a
        parent the store had only as a link is not known any more.
        """
        if v in found.read:
            return found.read[v]
        anchor = found.anchors.get(v)
        if anchor is None:
            return None
        current = self.lru.get((found.scope, v))
        if current is not None and attrs.evolve(current, parent=None) == attrs.evolve(anchor, parent=None):
            self.lru.move_to_end((found.scope, v))
            anchor = current
        elif found.linked[v]:
            anchor = attrs.evolve(anchor, parent=None)
        found.read[v] = anchor
        return anchor

    def get(self, scope: str, rid: str, now: float) -> Anchor | None:
        v = self.by_rid.get((scope, rid))
        if v is None or not self.lru[scope, v].is_live(now):
            return None
        self.lru.move_to_end((scope, v))
        return self.lru[scope, v]

    def put(self, scope: str, anchor: Anchor, now: float) -> None:
        key, rid = (scope, anchor.view), anchor.response_id
        old = self.lru.get(key)
        other = self.by_rid.get((scope, rid))
        if other is not None and other != anchor.view:
            self.drop(scope, other)
        if not anchor.is_live(now):
            if old is not None:
                self.drop(scope, anchor.view)
            return
        if old is not None:
            del self.by_rid[scope, old.response_id]
            if old.response_id != rid:
                self.tokens += 1
                self.token[key] = self.tokens
        else:
            if len(self.lru) >= self.max_anchors:
                self.drop(*next(iter(self.lru)))
            self.tokens += 1
            self.token[key] = self.tokens
        self.lru[key] = anchor
        self.lru.move_to_end(key)
        self.by_rid[scope, rid] = anchor.view
        self.link[key] = self._parent_token(scope, anchor)

    def evict(self, scope: str, rid: str) -> None:
        v = self.by_rid.get((scope, rid))
        if v is None:
            return
        dead = [v]
        dead_tokens = {self.token[scope, v]}
        grew = True
        while grew:
            grew = False
            for (sc, v2), link in self.link.items():
                if sc == scope and link in dead_tokens and self.token[sc, v2] not in dead_tokens:
                    dead.append(v2)
                    dead_tokens.add(self.token[sc, v2])
                    grew = True
        for gone in dead:
            self.drop(scope, gone)


class StoreVersusModel(RuleBasedStateMachine):
    """Random operations give the same answers from the store and the model."""

    max_anchors = 4
    moves_clock = False

    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.store = MemoryStore(self.max_anchors, clock=self.clock)
        self.model = Model(self.max_anchors)
        self.last: tuple[FoundModel, Mapping[bytes, Anchor]] | None = None

    @rule(
        scope=st.sampled_from(SCOPES),
        v=st.sampled_from(VIEWS),
        rid=st.sampled_from(RIDS),
        count=st.integers(0, 3),
        ttl=st.sampled_from([5.0, 50.0, -1.0]),
        parent=st.sampled_from([None, None, *RIDS]),
    )
    def put(self, scope: str, v: bytes, rid: str, count: int, ttl: float, parent: str | None) -> None:
        if self.moves_clock:  # the model keeps expired entries the store sweeps: no links then
            parent = None
        anchor = Anchor(v, rid, count, self.clock.now, self.clock.now + ttl, parent=parent)
        self.store.put(scope, anchor)
        self.model.put(scope, anchor, self.clock.now)

    @rule(
        scope=st.sampled_from(SCOPES),
        views=st.lists(st.sampled_from(VIEWS), max_size=8),
        reads=st.lists(st.sampled_from(VIEWS), max_size=4),
    )
    def find(self, scope: str, views: list[bytes], reads: list[bytes]) -> None:
        found = self.store.find(scope, views)
        expected = self.model.find(scope, views, self.clock.now)
        assert set(expected.anchors) == set(found)
        for v in reads:
            assert self.model.read(expected, v) == found.get(v)
        self.last = (expected, found)

    @precondition(lambda self: self.last is not None)
    @rule(v=st.sampled_from(VIEWS))
    def read_later(self, v: bytes) -> None:
        """Read from the last find's answer after other operations."""
        assert self.last is not None
        expected, found = self.last
        assert self.model.read(expected, v) == found.get(v)

    @rule(scope=st.sampled_from(SCOPES), rid=st.sampled_from(RIDS))
    def get(self, scope: str, rid: str) -> None:
        assert self.model.get(scope, rid, self.clock.now) == self.store.get(scope, rid)

    @rule(scope=st.sampled_from(SCOPES), rid=st.sampled_from(RIDS))
    def evict(self, scope: str, rid: str) -> None:
        self.store.evict(scope, rid)
        self.model.evict(scope, rid)

    @precondition(lambda self: self.moves_clock)
    @rule(seconds=st.sampled_from([1.0, 10.0]))
    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    @invariant()
    def layout_is_sound(self) -> None:
        check_layout(self.store)
        if not self.moves_clock:  # with time standing still, the same anchors are held
            assert len(self.model.lru) == len(self.store)


class StoreVersusModelWithTime(StoreVersusModel):
    """The same, with expiry instead of the bound."""

    max_anchors = 1000
    moves_clock = True


TestStoreVersusModel = StoreVersusModel.TestCase
TestStoreVersusModel.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
TestStoreVersusModelWithTime = StoreVersusModelWithTime.TestCase
TestStoreVersusModelWithTime.settings = settings(max_examples=100, stateful_step_count=40, deadline=None)
