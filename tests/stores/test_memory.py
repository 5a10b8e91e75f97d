"""
`MemoryStore` beyond the contract: LRU bound, sweeping, threads, its memory
cost, and its answers checked against a naive reference model.
"""

from __future__ import annotations

import gc
import threading
import time
import tracemalloc

import attrs
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from anchortrack.stores import Anchor, MemoryStore

from ..helpers import FakeClock
from .helpers import SCOPE, make_anchor, view


def check_layout(store: MemoryStore) -> None:
    """Assert the store's two structures index the same anchors, and no empty scope is kept."""
    by_scope: dict[str, dict[str, bytes]] = {}
    children: dict[str, dict[str, list[str]]] = {}
    for (scope, v), anchor in store._anchors.items():
        assert v == anchor.view
        by_scope.setdefault(scope, {})[anchor.response_id] = v
        if anchor.parent is not None:
            children.setdefault(scope, {}).setdefault(anchor.parent, []).append(anchor.response_id)
    assert len(by_scope) == len(store._scopes)
    for scope, sc in store._scopes.items():
        assert by_scope[scope] == sc.views
        kids = {p: sorted([k] if isinstance(k, str) else k) for p, k in sc.children.items()}
        assert all(isinstance(k, str) or len(k) > 1 for k in sc.children.values())
        assert {p: sorted(k) for p, k in children.get(scope, {}).items()} == kids


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
    assert 0 == len(store)
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


@pytest.mark.parametrize("chained", [False, True])
def test_memory_per_anchor(chained: bool) -> None:
    """100,000 anchors (16-byte views, 30-character ids) cost at most 450 bytes each, chained or not."""
    n, now = 100_000, time.time()
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
    assert per_anchor <= 450, per_anchor


# -- response ids and parents ---------------------------------------------------------

ODD_IDS = [
    "resp_0123456789abcdef0123456789abcdef0123456789abcdef",  # OpenAI's form
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
    check_layout(store)

    store.put(SCOPE, make_anchor("parent", clock.now, response_id="resp_other"))  # the parent goes
    assert child == store.get(SCOPE, child.response_id)
    assert {child.view: child} == store.find(SCOPE, [child.view])
    check_layout(store)


def test_an_answer_is_as_of_find(clock: FakeClock) -> None:
    """What find returned stays as it was when the store changes or the anchor expires later."""
    store = MemoryStore(clock=clock)
    a, b = make_anchor("a", clock.now, ttl=5), make_anchor("b", clock.now)
    store.put(SCOPE, a)
    store.put(SCOPE, b)
    found = store.find(SCOPE, [a.view, b.view])
    store.evict(SCOPE, b.response_id)
    store.put(SCOPE, make_anchor("a", clock.now, response_id="resp_newer"))
    clock.advance(10)

    assert {a.view: a, b.view: b} == found
    assert None is store.get(SCOPE, b.response_id)


def test_evicting_a_response_no_longer_held_forgets_its_descendants(clock: FakeClock) -> None:
    """The server resolves a child through its parent: the child goes even when the parent went first."""
    store = MemoryStore(clock=clock)
    root = make_anchor("root", clock.now)
    child = make_anchor("child", clock.now, parent=root.response_id)
    other = make_anchor("other", clock.now)
    for a in (root, child, other):
        store.put(SCOPE, a)
    store.put(SCOPE, make_anchor("root", clock.now, response_id="resp_elsewhere"))  # root's view, another id

    store.evict(SCOPE, root.response_id)

    assert None is store.get(SCOPE, child.response_id)
    assert other == store.get(SCOPE, other.response_id)
    check_layout(store)


def test_a_parent_with_many_children(clock: FakeClock) -> None:
    """Children recorded, replaced and dropped one by one keep the parent's index exact."""
    store = MemoryStore(clock=clock)
    root = make_anchor("root", clock.now)
    kids = [make_anchor(f"kid-{i}", clock.now, parent=root.response_id) for i in range(5)]
    for a in (root, *kids):
        store.put(SCOPE, a)
    check_layout(store)
    store.evict(SCOPE, kids[0].response_id)
    store.put(SCOPE, attrs.evolve(kids[1], parent=None))
    check_layout(store)

    store.evict(SCOPE, root.response_id)

    assert {kids[1].view: attrs.evolve(kids[1], parent=None)} == store.find(SCOPE, [a.view for a in kids])
    check_layout(store)


# -- against a naive reference model ------------------------------------------------------

SCOPES = ["0" * 16, "1" * 16]
VIEWS = [view(i) for i in range(6)]
RIDS = [f"resp_{i}" for i in range(5)]


class Model:
    """The MemoryStore semantics written naively: one list, least recently used first."""

    def __init__(self, max_anchors: int) -> None:
        self.max_anchors = max_anchors
        self.entries: list[tuple[str, Anchor]] = []

    def _index(self, scope: str, match: object) -> int | None:
        for i, (s, a) in enumerate(self.entries):
            if s == scope and match in (a.view, a.response_id):
                return i
        return None

    def _use(self, scope: str, match: object, now: float) -> Anchor | None:
        i = self._index(scope, match)
        if i is None:
            return None
        entry = self.entries.pop(i)
        if not entry[1].is_live(now):
            return None
        self.entries.append(entry)
        return entry[1]

    def find(self, scope: str, views: list[bytes], now: float) -> dict[bytes, Anchor]:
        return {v: a for v in views if (a := self._use(scope, v, now)) is not None}

    def get(self, scope: str, rid: str, now: float) -> Anchor | None:
        return self._use(scope, rid, now)

    def put(self, scope: str, anchor: Anchor, now: float) -> None:
        self.entries = [
            (s, a)
            for s, a in self.entries
            if s != scope or (a.view != anchor.view and a.response_id != anchor.response_id)
        ]
        if anchor.is_live(now):
            del self.entries[: max(0, len(self.entries) + 1 - self.max_anchors)]
            self.entries.append((scope, anchor))

    def evict(self, scope: str, rid: str) -> None:
        dead = {rid}
        while True:
            more = {a.response_id for s, a in self.entries if s == scope and a.parent in dead} - dead
            if not more:
                break
            dead |= more
        self.entries = [(s, a) for s, a in self.entries if s != scope or a.response_id not in dead]


class StoreVersusModel(RuleBasedStateMachine):
    """Random operations give the same answers from the store and the model."""

    max_anchors = 4

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
        parent=st.sampled_from([None, None, *RIDS]),
    )
    def put(self, scope: str, v: bytes, rid: str, count: int, ttl: float, parent: str | None) -> None:
        anchor = Anchor(v, rid, count, self.clock.now, self.clock.now + ttl, parent=parent)
        self.store.put(scope, anchor)
        self.model.put(scope, anchor, self.clock.now)

    @rule(scope=st.sampled_from(SCOPES), views=st.lists(st.sampled_from(VIEWS), max_size=8))
    def find(self, scope: str, views: list[bytes]) -> None:
        assert self.model.find(scope, views, self.clock.now) == self.store.find(scope, views)

    @rule(scope=st.sampled_from(SCOPES), rid=st.sampled_from(RIDS))
    def get(self, scope: str, rid: str) -> None:
        assert self.model.get(scope, rid, self.clock.now) == self.store.get(scope, rid)

    @rule(scope=st.sampled_from(SCOPES), rid=st.sampled_from(RIDS))
    def evict(self, scope: str, rid: str) -> None:
        self.store.evict(scope, rid)
        self.model.evict(scope, rid)

    @rule(seconds=st.sampled_from([1.0, 10.0]))
    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    @invariant()
    def layout_is_sound(self) -> None:
        check_layout(self.store)
        live = [(s, a) for s, a in self.model.entries if a.is_live(self.clock.now)]
        held = [(s, a) for (s, _), a in self.store._anchors.items() if a.is_live(self.clock.now)]
        assert live == held


TestStoreVersusModel = StoreVersusModel.TestCase
TestStoreVersusModel.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
