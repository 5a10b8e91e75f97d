"""
The `AnchorStore` contract, run against every backend through its sync and
its async methods (``api`` is parametrized over backend and mode).
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from anchortrack.stores import DEFAULT_TTL, Anchor, AnchorStore

from ..helpers import FakeClock
from .helpers import OTHER_SCOPE, SCOPE, Api, StoreFactory, make_anchor, view


async def test_store_satisfies_the_protocol(api: Api) -> None:
    """Every backend is an `AnchorStore` with the default TTL and no key."""
    assert isinstance(api.store, AnchorStore)
    assert DEFAULT_TTL == api.store.ttl
    assert api.store.secret_key is None


@pytest.mark.parametrize("ttl", [0, -1.0, float("inf"), float("nan"), "30"])
async def test_a_ttl_that_is_not_a_finite_number_of_seconds_is_refused(
    make_store: StoreFactory, ttl: object
) -> None:
    """Every backend refuses such a ttl at construction, naming itself: an infinite one used to be taken,
    and then every anchor write failed (anchor times must be finite) and the store was reported degraded."""
    with pytest.raises((ValueError, TypeError), match=r"^\w+Store\(ttl="):
        make_store(ttl=ttl)


async def test_secret_key_from_argument_and_environment(
    make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The secret key comes from the argument, else the environment."""
    assert b"k1" == make_store(secret_key="k1").secret_key
    monkeypatch.setenv("ANCHORTRACK_SECRET_KEY", "k2")

    assert b"k2" == make_store().secret_key
    assert b"k3" == make_store(secret_key=b"k3").secret_key


async def test_find_returns_only_requested_live_anchors(api: Api, clock: FakeClock) -> None:
    """find answers for the views asked about, and only for recorded, live ones."""
    a, b, c = (make_anchor(x, clock.now) for x in "abc")
    gone = make_anchor("gone", clock.now - 100, ttl=10)
    for anchor in (a, b, c, gone):
        await api.put(SCOPE, anchor)

    found = await api.find(SCOPE, [a.view, view("never"), c.view, gone.view])

    assert {a.view: a, c.view: c} == found


async def test_empty_views(api: Api, clock: FakeClock) -> None:
    """No views, no anchors (and no error)."""
    await api.put(SCOPE, make_anchor("a", clock.now))

    assert {} == await api.find(SCOPE, [])


async def test_unknown_scope_and_ids(api: Api) -> None:
    """An empty store finds nothing and evicting nothing is fine."""
    assert {} == await api.find(SCOPE, [view("a")])
    assert None is await api.get(SCOPE, "resp_missing")

    await api.evict(SCOPE, "resp_missing")


async def test_values_round_trip_exactly(api: Api) -> None:
    """Counts, float times, long and non-ASCII ids and odd view sizes survive."""
    anchors = [
        Anchor(view("a"), "resp_" + "9" * 60, 0, 1712345678.123456, 1712345678.123456 + 1e9),
        Anchor(view("b", 32), "resp_ünïcode|with|bars", 2**31, 1e9 + 0.1, 4e9 + 1 / 3),
        Anchor(b"\x00", "x", 1, 1.5e9, 4e9),
    ]
    for anchor in anchors:
        await api.put(SCOPE, anchor)

    assert {a.view: a for a in anchors} == await api.find(SCOPE, [a.view for a in anchors])
    for anchor in anchors:
        assert anchor == await api.get(SCOPE, anchor.response_id)


async def test_properties_and_mac_round_trip_exactly(api: Api, clock: FakeClock) -> None:
    """The properties digest and the MAC come back as they were put, absent ones too."""
    anchors = [
        make_anchor("a", clock.now, properties=bytes(range(16)), mac=bytes(range(16, 32))),
        make_anchor("b", clock.now, properties=b"|\x00" * 8),
        make_anchor("c", clock.now, mac=b"\xff" * 32),
        make_anchor("d", clock.now),
    ]
    for anchor in anchors:
        await api.put(SCOPE, anchor)

    assert {a.view: a for a in anchors} == await api.find(SCOPE, [a.view for a in anchors])
    for anchor in anchors:
        assert anchor == await api.get(SCOPE, anchor.response_id)


async def test_get_by_response_id(api: Api, clock: FakeClock) -> None:
    """get finds an anchor by its response id."""
    a, b = make_anchor("a", clock.now), make_anchor("b", clock.now)
    await api.put(SCOPE, a)
    await api.put(SCOPE, b)

    assert a == await api.get(SCOPE, a.response_id)
    assert b == await api.get(SCOPE, b.response_id)


async def test_put_overwrites_same_view(api: Api, clock: FakeClock) -> None:
    """The last writer wins for a view; the loser's id no longer resolves."""
    first = make_anchor("a", clock.now, response_id="resp_first", count=2)
    second = make_anchor("a", clock.now + 1, response_id="resp_second", count=5)
    await api.put(SCOPE, first)
    await api.put(SCOPE, second)

    assert {second.view: second} == await api.find(SCOPE, [second.view])
    assert second == await api.get(SCOPE, "resp_second")
    assert None is await api.get(SCOPE, "resp_first")


async def test_put_same_anchor_twice(api: Api, clock: FakeClock) -> None:
    """Recording the same anchor again changes nothing."""
    a = make_anchor("a", clock.now)
    await api.put(SCOPE, a)
    await api.put(SCOPE, a)

    assert {a.view: a} == await api.find(SCOPE, [a.view])
    assert a == await api.get(SCOPE, a.response_id)


async def test_response_id_moves_to_its_new_view(api: Api, clock: FakeClock) -> None:
    """A response id lives under one view: recording it again moves it."""
    old = make_anchor("old", clock.now, response_id="resp_1")
    new = make_anchor("new", clock.now, response_id="resp_1")
    await api.put(SCOPE, old)
    await api.put(SCOPE, new)

    assert {new.view: new} == await api.find(SCOPE, [old.view, new.view])
    assert new == await api.get(SCOPE, "resp_1")

    await api.evict(SCOPE, "resp_1")

    assert {} == await api.find(SCOPE, [old.view, new.view])


async def test_evict_removes_both_entries(api: Api, clock: FakeClock) -> None:
    """evict forgets the response id and its view, and nothing else."""
    a, b = make_anchor("a", clock.now), make_anchor("b", clock.now)
    await api.put(SCOPE, a)
    await api.put(SCOPE, b)

    await api.evict(SCOPE, a.response_id)

    assert None is await api.get(SCOPE, a.response_id)
    assert {b.view: b} == await api.find(SCOPE, [a.view, b.view])

    await api.evict(SCOPE, a.response_id)  # again: a no-op


async def test_evict_keeps_a_view_now_owned_by_another_response(api: Api, clock: FakeClock) -> None:
    """Evicting a response whose view was re-recorded keeps the newer entry."""
    first = make_anchor("a", clock.now, response_id="resp_first")
    second = make_anchor("a", clock.now, response_id="resp_second")
    await api.put(SCOPE, first)
    await api.put(SCOPE, second)

    await api.evict(SCOPE, "resp_first")

    assert {second.view: second} == await api.find(SCOPE, [second.view])
    assert second == await api.get(SCOPE, "resp_second")


# -- parents: one refused request per dead chain -------------------------------


async def test_parents_round_trip(api: Api, clock: FakeClock) -> None:
    """An anchor's parent comes back from find and get; an anchor without one has None."""
    root = make_anchor("root", clock.now)
    child = make_anchor("child", clock.now, parent=root.response_id)
    odd = make_anchor("odd", clock.now, parent="resp_ünï|code|" + "9" * 80)
    for anchor in (root, child, odd):
        await api.put(SCOPE, anchor)

    assert {a.view: a for a in (root, child, odd)} == await api.find(SCOPE, [root.view, child.view, odd.view])
    assert root.response_id == (await api.get(SCOPE, child.response_id)).parent  # type: ignore[union-attr]
    assert odd == await api.get(SCOPE, odd.response_id)
    assert None is (await api.get(SCOPE, root.response_id)).parent  # type: ignore[union-attr]


async def test_evict_forgets_every_descendant_and_nothing_else(api: Api, clock: FakeClock) -> None:
    """
    Evicting a response evicts what was chained from it, transitively.

    a ─ b ─ c ─ d      evict(b) forgets b, c, d and e; a (the ancestor), x (chained from
          └ e          a sibling branch) and y (another chain) stay.
    a ─ x
    y
    """
    a = make_anchor("a", clock.now)
    b = make_anchor("b", clock.now, parent=a.response_id)
    c = make_anchor("c", clock.now, parent=b.response_id)
    d = make_anchor("d", clock.now, parent=c.response_id)
    e = make_anchor("e", clock.now, parent=b.response_id)
    x = make_anchor("x", clock.now, parent=a.response_id)
    y = make_anchor("y", clock.now)
    everything = (a, b, c, d, e, x, y)
    for anchor in everything:
        await api.put(SCOPE, anchor)

    await api.evict(SCOPE, b.response_id)

    assert {v.view: v for v in (a, x, y)} == await api.find(SCOPE, [v.view for v in everything])
    for gone in (b, c, d, e):
        assert None is await api.get(SCOPE, gone.response_id)


async def test_evicting_descendants_keeps_views_now_owned_by_others(api: Api, clock: FakeClock) -> None:
    """A descendant's view re-recorded by a response sent in full (no parent) survives the eviction."""
    a = make_anchor("a", clock.now)
    b = make_anchor("b", clock.now, parent=a.response_id)
    resent = make_anchor("b", clock.now, response_id="resp_resent")
    for anchor in (a, b, resent):
        await api.put(SCOPE, anchor)

    await api.evict(SCOPE, a.response_id)

    assert {resent.view: resent} == await api.find(SCOPE, [a.view, b.view])
    assert resent == await api.get(SCOPE, "resp_resent")


async def test_eviction_stays_in_its_scope_and_survives_cycles(api: Api, clock: FakeClock) -> None:
    """Descendants in another scope stay; a parent cycle does not loop."""
    a = make_anchor("a", clock.now, parent="resp_b")
    b = make_anchor("b", clock.now, response_id="resp_b", parent=a.response_id)
    other = make_anchor("other", clock.now, parent=a.response_id)
    await api.put(SCOPE, a)
    await api.put(SCOPE, b)
    await api.put(SCOPE, a)  # now a is b's parent and b is a's
    await api.put(OTHER_SCOPE, a)
    await api.put(OTHER_SCOPE, other)

    await api.evict(SCOPE, a.response_id)

    assert {} == await api.find(SCOPE, [a.view, b.view])
    assert {a.view: a, other.view: other} == await api.find(OTHER_SCOPE, [a.view, other.view])


async def test_expired_anchors_are_never_returned(api: Api, clock: FakeClock) -> None:
    """Anchors disappear once the clock passes their expires_at."""
    short = make_anchor("short", clock.now, ttl=10)
    long = make_anchor("long", clock.now, ttl=1000)
    await api.put(SCOPE, short)
    await api.put(SCOPE, long)
    clock.advance(9.5)

    assert {short.view, long.view} == set(await api.find(SCOPE, [short.view, long.view]))

    clock.advance(0.5)  # exactly at expires_at: no longer live

    assert {long.view: long} == await api.find(SCOPE, [short.view, long.view])
    assert None is await api.get(SCOPE, short.response_id)
    assert long == await api.get(SCOPE, long.response_id)


async def test_store_honours_the_anchor_expiry_not_its_ttl(
    make_store: StoreFactory, mode: str, clock: FakeClock
) -> None:
    """expires_at decides, even when it is later than created_at + store.ttl."""
    api = Api(make_store(ttl=5), mode)
    a = make_anchor("a", clock.now, ttl=100)
    await api.put(SCOPE, a)
    clock.advance(50)

    assert a == await api.get(SCOPE, a.response_id)


async def test_putting_an_expired_anchor_replaces_and_hides(api: Api, clock: FakeClock) -> None:
    """An already expired anchor is not returned, and replaces its view's entry."""
    live = make_anchor("a", clock.now, response_id="resp_live")
    dead = make_anchor("a", clock.now - 100, response_id="resp_dead", ttl=10)
    await api.put(SCOPE, live)
    await api.put(SCOPE, dead)

    assert {} == await api.find(SCOPE, [dead.view])
    assert None is await api.get(SCOPE, "resp_dead")
    assert None is await api.get(SCOPE, "resp_live")


async def test_scopes_are_isolated(api: Api, clock: FakeClock) -> None:
    """Anchors never cross scopes, for find, get and evict."""
    mine = make_anchor("a", clock.now, response_id="resp_1")
    theirs = make_anchor("a", clock.now, response_id="resp_1", count=9)
    await api.put(SCOPE, mine)

    assert {} == await api.find(OTHER_SCOPE, [mine.view])
    assert None is await api.get(OTHER_SCOPE, "resp_1")

    await api.put(OTHER_SCOPE, theirs)
    await api.evict(OTHER_SCOPE, "resp_1")

    assert {mine.view: mine} == await api.find(SCOPE, [mine.view])
    assert mine == await api.get(SCOPE, "resp_1")
    assert {} == await api.find(OTHER_SCOPE, [mine.view])


async def test_invalid_arguments_raise(api: Api, clock: FakeClock) -> None:
    """Bad scopes, ids and anchors are refused with ValueError."""
    with pytest.raises(ValueError, match="scope"):
        await api.find("", [view("a")])
    with pytest.raises(ValueError, match="scope"):
        await api.put("has{brace}", make_anchor("a", clock.now))
    with pytest.raises(ValueError, match="response_id"):
        await api.get(SCOPE, "")
    with pytest.raises(ValueError, match="view"):
        await api.put(SCOPE, Anchor(b"", "resp_1", 1, clock.now, clock.now + 1))
    with pytest.raises(ValueError, match="finite"):
        await api.put(SCOPE, Anchor(view("a"), "resp_1", 1, clock.now, float("inf")))


async def test_many_views_in_one_call(api: Api, clock: FakeClock) -> None:
    """1,000 views in one find, half of them recorded, duplicates included."""
    anchors = [make_anchor(i, clock.now) for i in range(0, 1000, 2)]
    for anchor in anchors:
        await api.put(SCOPE, anchor)
    views = [view(i) for i in range(1000)]

    found = await api.find(SCOPE, [*views, *views[:10]])

    assert {a.view: a for a in anchors} == found


async def test_concurrent_writers_lose_nothing(api: Api, make_store: StoreFactory, clock: FakeClock) -> None:
    """Threads (sync) or tasks (async) writing at once lose no write."""
    workers, per_worker = 8, 40
    anchors = [make_anchor(f"{w}-{i}", clock.now) for w in range(workers) for i in range(per_worker)]
    shared = [make_anchor("shared", clock.now, response_id=f"resp_shared_{w}") for w in range(workers)]
    chunks = [[*anchors[w::workers], shared[w]] for w in range(workers)]

    if api.mode == "sync":
        errors: list[BaseException] = []

        def work(chunk: list[Anchor]) -> None:
            try:
                for anchor in chunk:
                    api.store.put(SCOPE, anchor)
                    assert anchor == api.store.get(SCOPE, anchor.response_id) or anchor in shared
            except BaseException as error:
                errors.append(error)

        threads = [threading.Thread(target=work, args=(c,)) for c in chunks]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert [] == errors
    else:

        async def awork(chunk: list[Anchor]) -> None:
            for anchor in chunk:
                await api.put(SCOPE, anchor)

        await asyncio.gather(*(awork(c) for c in chunks))

    found = await api.find(SCOPE, [a.view for a in anchors])
    assert {a.view: a for a in anchors} == found
    winner = (await api.find(SCOPE, [shared[0].view]))[shared[0].view]
    assert winner in shared
    assert [winner] == [a for a in shared if await api.get(SCOPE, a.response_id) is not None]
