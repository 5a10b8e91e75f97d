"""
`MemoryStore.find` answers with a lazy mapping: anchors are decoded, checked
and marked as used only when read, and the mapping behaves like the ``dict``
it replaces.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping

import attrs
import pytest

from anchortrack.stores import Anchor, MemoryStore, memory

from ..helpers import FakeClock
from .helpers import SCOPE, make_anchor, view
from .test_memory import check_layout


@pytest.fixture
def decoded(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """The views whose records were decoded into an `Anchor`, in order."""
    calls: list[bytes] = []
    real = memory._anchor

    def counting(v: bytes, f: memory._Fields, parent: bytes) -> Anchor:
        calls.append(v)
        return real(v, f, parent)

    monkeypatch.setattr(memory, "_anchor", counting)
    return calls


def lru_order(store: MemoryStore) -> list[bytes]:
    """The held views from most to least recently used."""
    order, slot = [], store._next[0]
    while slot:
        key = store._keys[slot]
        assert key is not None
        order.append(key)
        slot = store._next[slot]
    return order


def chain(n: int, now: float) -> list[Anchor]:
    """n anchors, each chained from the one before, with counts 1..n."""
    anchors: list[Anchor] = []
    for i in range(n):
        parent = anchors[-1].response_id if anchors else None
        anchors.append(make_anchor(f"turn-{i}", now, count=i + 1, parent=parent))
    return anchors


def test_find_decodes_nothing_until_read(clock: FakeClock, decoded: list[bytes]) -> None:
    """find only collects records; a read decodes that one anchor, once."""
    store = MemoryStore(clock=clock)
    anchors = chain(200, clock.now)
    for a in anchors:
        store.put(SCOPE, a)
    views = [view(f"miss-{i}") for i in range(200)] + [a.view for a in reversed(anchors)]

    found = store.find(SCOPE, views)

    assert [] == decoded
    assert anchors[-1] == found.get(anchors[-1].view)
    assert anchors[-1] == found[anchors[-1].view]  # the decoded anchor is kept
    assert [anchors[-1].view] == decoded
    assert 200 == len(found)  # counting and membership decode nothing
    assert anchors[0].view in found
    assert [anchors[-1].view] == decoded


def test_only_read_anchors_count_as_used(clock: FakeClock) -> None:
    """The LRU order moves for what was read from a find, not for everything it found."""
    store = MemoryStore(3, clock=clock)
    a, b, c, d = (make_anchor(x, clock.now) for x in "abcd")
    for anchor in (a, b, c):
        store.put(SCOPE, anchor)

    found = store.find(SCOPE, [c.view, b.view, a.view])
    assert [c.view, b.view, a.view] == lru_order(store)  # find alone moves nothing
    assert a == found[a.view]
    assert [a.view, c.view, b.view] == lru_order(store)
    assert a == found[a.view]  # a second read is not a second use
    store.put(SCOPE, d)  # drops b, the least recently used

    assert {a.view, c.view, d.view} == set(store.find(SCOPE, [x.view for x in (a, b, c, d)]))
    check_layout(store)


def test_an_anchor_expired_at_find_is_dropped_when_met(clock: FakeClock, decoded: list[bytes]) -> None:
    """An anchor that had expired when find ran is left out, and dropped from the store when met."""
    store = MemoryStore(clock=clock)
    short, long = make_anchor("short", clock.now, ttl=5), make_anchor("long", clock.now, ttl=50)
    store.put(SCOPE, short)
    store.put(SCOPE, long)
    clock.advance(5)

    found = store.find(SCOPE, [short.view, long.view])
    assert 2 == len(store)  # not met yet
    assert None is found.get(short.view)
    assert 1 == len(store)
    assert short.view not in found
    assert [long.view] == list(found)
    assert {long.view: long} == found
    assert [long.view] == decoded  # the expired one was never decoded
    check_layout(store)


@pytest.mark.parametrize("how", ["in", "len", "iter", "bool", "equality", "keys"])
def test_every_way_of_meeting_an_expired_anchor_drops_it(clock: FakeClock, how: str) -> None:
    """Membership, counting, iteration, truth and comparison all leave an expired anchor out."""
    store = MemoryStore(clock=clock)
    a = make_anchor("a", clock.now, ttl=5)
    store.put(SCOPE, a)
    clock.advance(10)
    found = store.find(SCOPE, [a.view])

    ways: dict[str, tuple[Callable[[], object], object]] = {
        "in": (lambda: a.view in found, False),
        "len": (lambda: len(found), 0),
        "iter": (lambda: list(found), []),
        "bool": (lambda: bool(found), False),
        "equality": (lambda: found == {}, True),
        "keys": (lambda: set(found.keys()), set()),
    }
    meet, expected = ways[how]

    assert 1 == len(store)
    assert expected == meet()
    assert 0 == len(store)
    assert not found
    check_layout(store)


def test_an_anchor_expiring_after_find_is_still_returned(clock: FakeClock) -> None:
    """The answer is as of find: an anchor live then comes back, and the planner checks its expiry itself."""
    store = MemoryStore(clock=clock)
    a = make_anchor("a", clock.now, ttl=5)
    store.put(SCOPE, a)
    found = store.find(SCOPE, [a.view])
    clock.advance(10)

    assert a == found[a.view]
    assert not found[a.view].is_live(clock.now)


def test_bool_stops_at_the_first_live_anchor(clock: FakeClock) -> None:
    """Truth drops the expired anchors it passes, and only those."""
    store = MemoryStore(clock=clock)
    old = [make_anchor(f"old-{i}", clock.now, ttl=5) for i in range(3)]
    fresh = [make_anchor(f"fresh-{i}", clock.now, ttl=50) for i in range(3)]
    for a in old + fresh:
        store.put(SCOPE, a)
    clock.advance(10)  # no write after this, so no sweep
    found = store.find(SCOPE, [old[0].view, fresh[0].view, old[1].view, old[2].view])
    held = len(store)

    assert found
    assert held - 1 == len(store)  # old[0] met and dropped; old[1], old[2] not met yet
    assert 1 == len(found)
    assert held - 3 == len(store)
    check_layout(store)


def test_evicted_between_find_and_read(clock: FakeClock) -> None:
    """An anchor evicted after find comes back as found; its slot, reused since, is not touched."""
    store = MemoryStore(clock=clock)
    a, b, x, y = (make_anchor(k, clock.now) for k in "abxy")
    store.put(SCOPE, a)
    store.put(SCOPE, b)
    found = store.find(SCOPE, [a.view, b.view])
    store.evict(SCOPE, a.response_id)
    store.put(SCOPE, x)  # takes a's slot
    store.put(SCOPE, y)
    assert [y.view, x.view, b.view] == lru_order(store)

    assert a == found[a.view]
    assert [y.view, x.view, b.view] == lru_order(store)  # nothing touched, nothing revived
    assert None is store.get(SCOPE, a.response_id)
    assert b == found[b.view]
    assert [b.view, y.view, x.view] == lru_order(store)
    check_layout(store)


def test_recorded_over_between_find_and_read(clock: FakeClock) -> None:
    """A view recorded again after find: the read gives what was found and marks nothing."""
    store = MemoryStore(clock=clock)
    a, other = make_anchor("a", clock.now), make_anchor("other", clock.now)
    store.put(SCOPE, a)
    store.put(SCOPE, other)
    found = store.find(SCOPE, [a.view])
    newer = make_anchor("a", clock.now, response_id="resp_newer", count=9)
    store.put(SCOPE, newer)
    store.put(SCOPE, other)  # other is the most recent again

    assert a == found[a.view]
    assert [other.view, a.view] == lru_order(store)
    assert {a.view: newer} == store.find(SCOPE, [a.view])
    check_layout(store)


def test_parent_exact_when_the_parent_goes_after_find(clock: FakeClock) -> None:
    """A child found while linked to its parent still names it after the parent is gone."""
    store = MemoryStore(clock=clock)
    root = make_anchor("root", clock.now)
    child = make_anchor("child", clock.now, parent=root.response_id)
    store.put(SCOPE, root)
    store.put(SCOPE, child)
    found = store.find(SCOPE, [child.view])
    store.put(SCOPE, make_anchor("root", clock.now, response_id="resp_elsewhere"))  # root's view, another id

    assert child == found[child.view]
    assert root.response_id == found[child.view].parent
    store.evict(SCOPE, "resp_elsewhere")
    assert child == store.get(SCOPE, child.response_id)  # unlinked: not evicted with the view's new id
    check_layout(store)


def test_linked_parent_of_an_anchor_dropped_after_find_is_unknown(clock: FakeClock) -> None:
    """An anchor dropped after find comes back; a parent the store held only as a link is then None."""
    store = MemoryStore(clock=clock)
    root = make_anchor("root", clock.now)
    child = make_anchor("child", clock.now, parent=root.response_id)
    unlinked = make_anchor("unlinked", clock.now, parent="resp_not_held")
    for a in (root, child, unlinked):
        store.put(SCOPE, a)
    found = store.find(SCOPE, [child.view, unlinked.view])
    store.evict(SCOPE, root.response_id)  # and child, its descendant
    store.evict(SCOPE, unlinked.response_id)
    others = [make_anchor(f"other-{i}", clock.now) for i in range(3)]
    for a in others:  # they take the freed slots, root's among them
        store.put(SCOPE, a)

    assert attrs.evolve(child, parent=None) == found[child.view]
    assert unlinked == found[unlinked.view]  # a parent kept as an id stays exact
    assert 3 == len(store)
    check_layout(store)


def test_the_mapping_behaves_like_a_dict(clock: FakeClock) -> None:
    """Every read-only dict operation the callers may use gives the dict's answer."""
    store = MemoryStore(clock=clock)
    anchors = chain(5, clock.now)
    for a in anchors:
        store.put(SCOPE, a)
    views = [anchors[3].view, view("miss"), anchors[1].view, anchors[3].view, anchors[0].view]
    expected = {a.view: a for a in (anchors[3], anchors[1], anchors[0])}

    found = store.find(SCOPE, views)

    assert isinstance(found, Mapping)
    assert list(expected) == list(found) == list(found.keys())  # the order of the views asked about
    assert 3 == len(found)
    assert found
    assert expected == found
    assert found == expected
    assert not found != expected  # noqa: SIM202 - the != operator itself is under test
    assert found != {**expected, view("x"): anchors[2]}
    assert expected == dict(found) == {**found} == dict(found.items())
    assert list(expected.values()) == list(found.values())
    assert list(expected.items()) == list(found.items())
    assert anchors[1].view in found
    assert view("miss") not in found
    assert "text" not in found  # type: ignore[comparison-overlap]
    assert None is found.get(view("miss"))
    assert "default" == found.get(view("miss"), "default")
    assert anchors[0] == found.get(anchors[0].view, "default")
    with pytest.raises(KeyError):
        found[view("miss")]
    with pytest.raises(TypeError):
        found[[]]  # type: ignore[index]
    with pytest.raises(TypeError):
        found[view("x")] = anchors[2]  # type: ignore[index]
    assert {**expected, view("x"): anchors[2]} == {**found, view("x"): anchors[2]}
    assert repr(anchors[3].response_id) in repr(found)


def test_repr_marks_nothing_as_used(clock: FakeClock) -> None:
    """Showing the mapping (a debugger, a failed assertion) does not change the LRU order."""
    store = MemoryStore(clock=clock)
    a, b = make_anchor("a", clock.now), make_anchor("b", clock.now)
    store.put(SCOPE, a)
    store.put(SCOPE, b)
    found = store.find(SCOPE, [a.view, b.view])

    assert a.response_id in repr(found)
    assert b.response_id in repr(found)
    assert [b.view, a.view] == lru_order(store)


def test_empty_answers(clock: FakeClock) -> None:
    """No scope, no views, no hits: an empty mapping."""
    store = MemoryStore(clock=clock)
    assert {} == store.find(SCOPE, [view("a")])
    store.put(SCOPE, make_anchor("a", clock.now))
    assert {} == store.find(SCOPE, [])
    assert {} == store.find(SCOPE, [view("b")])
    assert not store.find(SCOPE, [view("b")])


async def test_afind_is_as_lazy(clock: FakeClock, decoded: list[bytes]) -> None:
    """The async twin answers with the same mapping."""
    store = MemoryStore(clock=clock)
    a, b = make_anchor("a", clock.now), make_anchor("b", clock.now)
    store.put(SCOPE, a)
    store.put(SCOPE, b)

    found = await store.afind(SCOPE, [a.view, b.view])

    assert [] == decoded
    assert b == found[b.view]
    assert [b.view] == decoded


def test_reads_race_writers(clock: FakeClock) -> None:
    """Threads reading old answers while others record, evict and drop keep the layout sound."""
    store = MemoryStore(40, clock=clock)
    errors: list[BaseException] = []
    anchors = chain(60, clock.now)

    def writer(w: int) -> None:
        try:
            for i in range(400):
                a = anchors[(i * 7 + w) % len(anchors)]
                store.put(SCOPE, a)
                if i % 5 == 0:
                    store.evict(SCOPE, anchors[(i * 3 + w) % len(anchors)].response_id)
        except BaseException as error:
            errors.append(error)

    def reader(w: int) -> None:
        try:
            for i in range(200):
                found = store.find(SCOPE, [a.view for a in reversed(anchors)])
                for a in anchors[(i + w) % 20 :: 7]:
                    got = found.get(a.view)
                    assert got is None or got.response_id == a.response_id
                    assert got is None or got.parent in (a.parent, None)
                assert len(found) == len(list(found))
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=f, args=(w,)) for w in range(3) for f in (writer, reader)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert [] == errors
    check_layout(store)
