"""
`MemoryStore` beyond the contract: LRU bound, sweeping, its compact layout
(checked against a plain reference model) and its memory cost.
"""

from __future__ import annotations

import gc
import threading
import time
import tracemalloc
from collections import OrderedDict

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from anchortrack.stores import Anchor, MemoryStore
from anchortrack.stores.memory import _RECORD, _rid

from ..helpers import FakeClock
from .helpers import SCOPE, make_anchor, view


def check_layout(store: MemoryStore) -> None:
    """Assert the store's internal structures agree with each other."""
    slots = [s for s, key in enumerate(store._keys) if key is not None]
    assert len(slots) == store._live == len(store)
    assert sum(len(sc.views) for sc in store._scope_ids.values()) == store._live
    assert all(sc.views for sc in store._scope_ids.values())  # no empty scope kept
    assert store._scopes == {sc.name: sc for sc in store._scope_ids.values()}
    for slot in slots:
        key = store._keys[slot]
        assert key is not None
        rec = store._scope_ids[store._sids[slot]].views[key]
        assert slot == _RECORD.unpack_from(rec)[0]
        assert 1 == list(store._rids).count(slot)
        sid = store._sids[slot]
        assert (store._probe(sid, _rid(rec)))[1] == slot
    ring, slot = [], store._next[0]
    while slot != 0:
        ring.append(slot)
        assert store._next[store._prev[slot]] == slot
        slot = store._next[slot]
    assert sorted(ring) == slots
    assert store._rids_used == sum(1 for c in store._rids if c != 0)
    assert not set(store._free) & set(slots)


def test_least_recently_used_anchor_is_dropped_at_the_bound(clock: FakeClock) -> None:
    """At max_anchors, a new anchor pushes out the least recently used one."""
    store = MemoryStore(3, clock=clock)
    a, b, c, d, e = (make_anchor(x, clock.now) for x in "abcde")
    for anchor in (a, b, c):
        store.put(SCOPE, anchor)
    store.find(SCOPE, [a.view])  # a is now the most recently used
    store.put(SCOPE, d)  # drops b

    assert {a.view, c.view, d.view} == set(store.find(SCOPE, [x.view for x in (a, b, c, d)]))

    store.get(SCOPE, c.response_id)  # recency now: c, a, d (d was found after a)
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


def test_memory_per_anchor() -> None:
    """30,000 anchors (16-byte views, 30-character ids) cost under 210 bytes each."""
    n, now = 30_000, time.time()
    inputs = [(view(i), f"resp_{view(i).hex()[:25]}") for i in range(n)]
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        store = MemoryStore(n)
        for v, rid in inputs:  # fresh view objects, as from a digest, are kept by the store
            store.put(SCOPE, Anchor(v[:8] + v[8:], rid, 7, now, now + 3600))
        gc.collect()
        per_anchor = (tracemalloc.get_traced_memory()[0] - before) / n
    finally:
        tracemalloc.stop()

    assert n == len(store)
    assert per_anchor < 210, per_anchor


# -- the layout against a reference model ----------------------------------------

SCOPES = ["0" * 16, "1" * 16]
VIEWS = [view(i) for i in range(6)]
RIDS = [f"resp_{i}" for i in range(5)]


class Model:
    """The MemoryStore semantics written plainly: an OrderedDict and a dict."""

    def __init__(self, max_anchors: int) -> None:
        self.max_anchors = max_anchors
        self.lru: OrderedDict[tuple[str, bytes], Anchor] = OrderedDict()
        self.by_rid: dict[tuple[str, str], bytes] = {}

    def drop(self, scope: str, v: bytes) -> None:
        anchor = self.lru.pop((scope, v))
        del self.by_rid[scope, anchor.response_id]

    def find(self, scope: str, views: list[bytes], now: float) -> dict[bytes, Anchor]:
        found = {}
        for v in views:
            anchor = self.lru.get((scope, v))
            if anchor is not None and anchor.is_live(now):
                self.lru.move_to_end((scope, v))
                found[v] = anchor
        return found

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
        elif len(self.lru) >= self.max_anchors:
            self.drop(*next(iter(self.lru)))
        self.lru[key] = anchor
        self.lru.move_to_end(key)
        self.by_rid[scope, rid] = anchor.view

    def evict(self, scope: str, rid: str) -> None:
        v = self.by_rid.get((scope, rid))
        if v is not None:
            self.drop(scope, v)


class StoreVersusModel(RuleBasedStateMachine):
    """Random operations give the same answers from the store and the model."""

    max_anchors = 4
    moves_clock = False

    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.store = MemoryStore(self.max_anchors, clock=self.clock)
        self.model = Model(self.max_anchors)

    @rule(
        scope=st.sampled_from(SCOPES),
        v=st.sampled_from(VIEWS),
        rid=st.sampled_from(RIDS),
        count=st.integers(0, 3),
        ttl=st.sampled_from([5.0, 50.0, -1.0]),
    )
    def put(self, scope: str, v: bytes, rid: str, count: int, ttl: float) -> None:
        anchor = Anchor(v, rid, count, self.clock.now, self.clock.now + ttl)
        self.store.put(scope, anchor)
        self.model.put(scope, anchor, self.clock.now)

    @rule(scope=st.sampled_from(SCOPES), views=st.lists(st.sampled_from(VIEWS), max_size=8))
    def find(self, scope: str, views: list[bytes]) -> None:
        now = self.clock.now
        assert self.model.find(scope, views, now) == self.store.find(scope, views)

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


# -- the compact record ----------------------------------------------------------


@pytest.mark.parametrize(
    "response_id",
    [
        "resp_67ccd2bed1ec8190b14f964abc0542670bb6a6b452d3795b",  # OpenAI's form: held as bytes
        "resp_abc",  # odd digit count
        "resp_ABCD",  # upper case: kept as text, never equal to resp_abcd
        "resp_abcd",
        "resp_",
        "resp_ab cd",
        "resp_0a\u00e9",
        "\u00ab",  # UTF-8 c2 ab, the bytes of resp_c2ab
        "resp_c2ab",
        "\x01ab",
        "r",
    ],
)
def test_response_ids_round_trip_and_stay_apart(response_id: str, clock: FakeClock) -> None:
    """Every id comes back as given, and ids whose packed bytes could meet stay distinct."""
    store = MemoryStore(clock=clock)
    others = ["resp_abcd", "resp_ABCD", "\u00ab", "resp_c2ab", "resp_abc", "resp_abc0"]
    for i, rid in enumerate(others):
        store.put(SCOPE, Anchor(view(100 + i), rid, i, clock.now, clock.now + 60))
    store.put(SCOPE, Anchor(view(1), response_id, 3, clock.now, clock.now + 60))

    found = store.get(SCOPE, response_id)
    assert found is not None
    assert (found.response_id, found.view) == (response_id, view(1))
    assert found.response_id == store.find(SCOPE, [view(1)])[view(1)].response_id
    for i, rid in enumerate(others):
        if rid != response_id:
            assert store.get(SCOPE, rid) == Anchor(view(100 + i), rid, i, clock.now, clock.now + 60)
    check_layout(store)


@pytest.mark.parametrize(
    ("created_at", "expires_at"),
    [
        (1_700_000_000.123456, 1_700_003_600.123456),  # lifetime not exact in float32
        (1_700_000_000.0, 1_700_003_600.0),
        (0.1, 0.30000000000000004),
        (-1e300, 1e300),  # lifetime beyond float32
        (5.0, 5.0),
    ],
)
def test_times_round_trip_exactly(created_at: float, expires_at: float) -> None:
    """created_at comes back bit for bit, whether the float32 lifetime gives it or not."""
    clock = FakeClock(created_at)
    store = MemoryStore(clock=clock)
    anchor = Anchor(view(1), "resp_0123", 2, created_at, expires_at, properties=b"p" * 16, mac=b"m" * 16)
    store.put(SCOPE, anchor)
    if expires_at > created_at:
        assert store.get(SCOPE, "resp_0123") == anchor
        assert store.find(SCOPE, [view(1)]) == {view(1): anchor}
    check_layout(store)
