"""
Tests for planning: the longest recorded view that is a prefix, with a non-empty delta.

`plan_request` runs the very pipeline the wrapped client runs (`read_history`,
then `plan_history`, inside `call_flow`); the first tests here pin that, the
rest exercise the pipeline through `plan_request`.
"""

from __future__ import annotations

from typing import Any

import pytest

from anchortrack import Plan, Reason, Scope, Tracker, plan_request, record_response
from anchortrack._flow import CallContext, Find, Planned, Send, Ticket, call_flow, drive
from anchortrack._hashing import fingerprint, fingerprint_items, prefix_hashes
from anchortrack._plan import REASON_TEXT, RecentViews, choose, new_anchor, sizes_total
from anchortrack._request import read_request

from ..helpers import SCOPE, DictStore, assistant, call, output, response, system, turn, user


@pytest.fixture(name="store")
def _store() -> DictStore:
    return DictStore()


def _client_plan(history: list[Any], store: DictStore) -> tuple[Plan, Any]:
    """The plan the wrapped client's flow makes for *history*, and what it sends."""
    context = CallContext(scope_key=SCOPE.key, root=SCOPE.root(store.secret_key))
    planned: list[Plan] = []

    def perform(effect: Any) -> Any:
        if isinstance(effect, Find):
            return store.find(effect.scope, effect.views)
        if isinstance(effect, Planned):
            planned.append(effect.plan)
        if isinstance(effect, Send):
            return effect
        return None

    sent = drive(call_flow(context, read_request({"model": "m", "input": history})), perform)
    [plan] = planned
    return plan, sent


def test_the_client_and_plan_request_make_the_same_plan(store: DictStore) -> None:
    """Chained, diverged and first-turn histories: the flow's plan equals plan_request's, field by field."""
    u1, a1 = user("one"), assistant("ONE")
    turn(store, [u1], [a1])
    u2, a2 = user("two"), assistant("TWO")
    turn(store, [u1, a1, u2], [a2])
    histories = [
        [u1],
        [u1, a1, u2, a2, user("three")],
        [user("edited"), a1, u2, a2, user("three")],
        [user("other"), assistant("x"), user("y")],
    ]

    for history in histories:
        plan, sent = _client_plan(history, store)
        assert plan_request(history, scope=SCOPE, store=store) == plan
        assert history[plan.skip :] == sent.body["input"]
    assert [True, False] == [_client_plan(h, store)[0].chained for h in histories[1:3]]


def test_the_tracker_and_record_response_build_the_same_anchor() -> None:
    """One anchor builder: recording through a tracker and through record_response gives one anchor."""
    history, outputs = [user("one"), assistant("ONE"), user("two")], [assistant("TWO")]
    by_api, by_tracker = DictStore(), DictStore()
    record_response(history, response(outputs, rid="resp_x"), scope=SCOPE, store=by_api)
    fps, _, _ = fingerprint_items(history)
    hashes = prefix_hashes(SCOPE.root(None), fps)
    tracker = Tracker(by_tracker)
    tracker._calls.observe(
        Ticket(SCOPE.key, hashes[-1], len(history), hashes), response(outputs, rid="resp_x")
    )
    tracker.flush()

    api, tracked = by_api.ids[SCOPE.key, "resp_x"], by_tracker.ids[SCOPE.key, "resp_x"]
    assert (api.view, api.count) == (tracked.view, tracked.count)
    assert 4 == api.count


def test_new_anchor_continues_its_base_and_never_outlives_its_chain() -> None:
    """The view is the last hash (or the base), the count adds up, expiry is clamped to the chain's."""
    base, hashes = b"b" * 16, [b"1" * 16, b"2" * 16]

    anchor = new_anchor("resp_1", base=base, count=3, hashes=hashes, now=100.0, ttl=50.0)
    chained = new_anchor(
        "resp_2", base=base, count=3, hashes=hashes, now=100.0, ttl=50.0, chain_expires_at=120.0
    )
    empty = new_anchor("resp_3", base=base, count=3, hashes=[], now=100.0, ttl=50.0)

    assert (hashes[-1], 5, 100.0, 150.0) == (anchor.view, anchor.count, anchor.created_at, anchor.expires_at)
    assert 120.0 == chained.expires_at
    assert (base, 3) == (empty.view, empty.count)


def test_sizes_total_is_the_json_list_size() -> None:
    """Canonical sizes add up to the bytes of a JSON list: items, commas and brackets."""
    assert [2, 5, 6] == [sizes_total([]), sizes_total([3]), sizes_total([1, 2])]


def test_every_reason_has_one_line_of_text() -> None:
    """REASON_TEXT describes each Reason, in one line."""
    assert set(Reason) == set(REASON_TEXT)
    assert all(text and "\n" not in text for text in REASON_TEXT.values())


def test_a_plan_reads_well() -> None:
    """repr(plan) says the decision, the anchor and the sizes."""
    store = DictStore()
    u1, a1 = user("one"), assistant("ONE")
    rid = turn(store, [u1], [a1])

    chained = plan_request([u1, a1, user("two")], scope=SCOPE, store=store)
    first = plan_request([user("hi")], scope=SCOPE, store=store)

    assert repr(chained).startswith(f"<Plan chained from {rid}: send 1 of 3 items, ~")
    assert repr(first).startswith("<Plan stateless (no_history): send 1 of 1 items")


def test_first_turn_has_no_history(store: DictStore) -> None:
    """A history with no model output yet goes out in full, reason no_history."""
    plan = plan_request([system("s"), user("hi")], scope=SCOPE, store=store)

    assert plan.anchor is None
    assert plan.reason == Reason.NO_HISTORY
    assert plan.sent == 2


def test_latest_anchor_when_middleware_only_appended(store: DictStore) -> None:
    """Appending after the newest view chains from the newest response."""
    u1, a1 = user("one"), assistant("ONE")
    r1 = turn(store, [u1], [a1])
    u2, a2 = user("two"), assistant("TWO")
    r2 = turn(store, [u1, a1, u2], [a2])

    plan = plan_request(
        [u1, a1, u2, a2, user("three"), user("injected by middleware")], scope=SCOPE, store=store
    )

    assert r1 != r2
    assert plan.anchor is not None
    assert r2 == plan.anchor.response_id
    assert plan.skip == 4
    assert plan.sent == 2


def test_tool_loop_delta_is_exactly_the_outputs(store: DictStore) -> None:
    """In a tool loop the delta is the function_call_output items only."""
    u = user("weather?")
    c1, c2 = call("weather", "call_a", '{"city": "Paris"}'), call("time", "call_b")
    r = turn(store, [u], [c1, c2])
    history = [u, c1, c2, output("call_a", "sunny"), output("call_b", "noon")]

    plan = plan_request(history, scope=SCOPE, store=store)

    assert plan.anchor is not None
    assert r == plan.anchor.response_id
    assert history[plan.skip :] == history[3:]


def test_older_intact_anchor_when_middleware_inserts_inside_newest(store: DictStore) -> None:
    """An item inserted among the newest response's items falls back to the older intact anchor."""
    u1, a1 = user("one"), assistant("ONE")
    r1 = turn(store, [u1], [a1])
    u2 = user("two")
    c1, c2 = call("f", "c1"), call("g", "c2")
    turn(store, [u1, a1, u2], [c1, c2])
    history = [u1, a1, u2, c1, user("INSERTED"), c2, output("c1", "x"), output("c2", "y")]

    plan = plan_request(history, scope=SCOPE, store=store)

    assert plan.anchor is not None
    assert r1 == plan.anchor.response_id
    assert plan.skip == 2


@pytest.mark.parametrize(
    "edit",
    [
        pytest.param(lambda h: [system("NEW PROMPT"), *h[1:]], id="system-prompt-changed"),
        pytest.param(lambda h: [h[0], user("[redacted]"), *h[2:]], id="early-message-redacted"),
        pytest.param(lambda h: [h[0], user("inserted"), *h[1:]], id="inserted-before-anchors"),
        pytest.param(lambda h: [h[0], *h[2:]], id="early-message-removed"),
        pytest.param(lambda h: [h[0], h[2], h[1], *h[3:]], id="reordered"),
    ],
)
def test_stateless_when_anything_before_every_anchor_changed(store: DictStore, edit) -> None:
    """Edits, insertions, removals and reorders before every anchor give no anchor."""
    s, u1, a1 = system("sys"), user("one"), assistant("ONE")
    turn(store, [s, u1], [a1])
    u2, a2 = user("two"), assistant("TWO")
    turn(store, [s, u1, a1, u2], [a2])
    history = edit([s, u1, a1, u2, a2, user("three")])

    plan = plan_request(history, scope=SCOPE, store=store)

    assert plan.anchor is None
    assert plan.reason == Reason.PREFIX_DIVERGED
    assert len(history) == plan.sent


def test_regenerate_uses_the_previous_anchor_not_the_newest(store: DictStore) -> None:
    """Editing the last user message chains from the response before it (Effect's bug)."""
    u1, a1 = user("one"), assistant("ONE")
    r1 = turn(store, [u1], [a1])
    u2 = user("two")
    turn(store, [u1, a1, u2], [assistant("TWO")])

    edited = plan_request([u1, a1, user("two, edited")], scope=SCOPE, store=store)
    regenerated = plan_request([u1, a1, u2], scope=SCOPE, store=store)

    assert edited.anchor is not None
    assert r1 == edited.anchor.response_id
    assert regenerated.anchor is not None
    assert r1 == regenerated.anchor.response_id
    assert [u2] == [u1, a1, u2][regenerated.skip :]


def test_no_anchor_when_a_server_item_at_the_end_of_a_view_was_dropped(store: DictStore) -> None:
    """Dropping the newest response's last output invalidates that response as an anchor."""
    u1 = user("one")
    c1, c2 = call("f", "c1"), call("g", "c2")
    r1 = turn(store, [u1], [c1, c2])

    plan = plan_request([u1, c1, output("c1", "x"), user("go on")], scope=SCOPE, store=store)

    assert plan.anchor is None or r1 != plan.anchor.response_id
    assert plan.anchor is None


def test_an_edited_server_output_invalidates_its_response(store: DictStore) -> None:
    """Editing the anchor's own output (e.g. tool-call arguments) is caught."""
    u1 = user("one")
    c1 = call("f", "c1", '{"x": 1}')
    turn(store, [u1], [c1])
    edited = {**c1, "arguments": '{"x": 2}'}

    plan = plan_request([u1, edited, output("c1", "r")], scope=SCOPE, store=store)

    assert plan.anchor is None


def test_never_an_empty_delta(store: DictStore) -> None:
    """A history that ends exactly at a view does not chain from that view: the reason says so."""
    u1, a1 = user("one"), assistant("ONE")
    turn(store, [u1], [a1])

    plan = plan_request([u1, a1], scope=SCOPE, store=store)

    assert (Reason.NOTHING_NEW, None, None, 2) == (plan.reason, plan.anchor, plan.diverged_at, plan.sent)


def test_a_history_ending_at_a_view_chains_from_a_shorter_one(store: DictStore) -> None:
    """The whole history's own view is not an anchor, but an older view before it still is."""
    u1, a1, u2, a2 = user("one"), assistant("ONE"), user("two"), assistant("TWO")
    r1 = turn(store, [u1], [a1])
    turn(store, [u1, a1, u2], [a2])

    plan = plan_request([u1, a1, u2, a2], scope=SCOPE, store=store)

    assert (Reason.CHAINED, r1, 2) == (plan.reason, plan.anchor and plan.anchor.response_id, plan.sent)


def test_nothing_new_needs_a_live_view_of_the_whole_history() -> None:
    """An expired or unauthentic view of the whole history is no reason: the history diverged."""
    hashes = [b"h1", b"h2"]
    anchor = new_anchor("r", base=b"root", count=0, hashes=hashes, now=0.0, ttl=10.0)
    found = {b"h2": anchor}

    assert Reason.NOTHING_NEW == choose(hashes, found, 1.0, has_model_items=True).reason
    assert Reason.PREFIX_DIVERGED == choose(hashes, found, 11.0, has_model_items=True).reason
    refused = choose(hashes, found, 1.0, has_model_items=True, authentic=lambda _: False)
    assert (Reason.PREFIX_DIVERGED, ("r",)) == (refused.reason, refused.rejected)


def test_interleaved_conversations_are_independent(store: DictStore) -> None:
    """Two conversations on one store each chain from their own responses."""
    a_hist, b_hist = [user("A")], [user("B")]
    ra = turn(store, a_hist, [assistant("a")])
    rb = turn(store, b_hist, [assistant("b")])

    plan_a = plan_request([*a_hist, assistant("a"), user("A2")], scope=SCOPE, store=store)
    plan_b = plan_request([*b_hist, assistant("b"), user("B2")], scope=SCOPE, store=store)

    assert (ra, rb) == (plan_a.anchor.response_id, plan_b.anchor.response_id)  # type: ignore[union-attr]


def test_anchors_never_cross_scopes(store: DictStore) -> None:
    """The same conversation in another scope finds nothing."""
    u1, a1 = user("one"), assistant("ONE")
    turn(store, [u1], [a1])
    other = Scope("https://other.example/v1")

    plan = plan_request([u1, a1, user("two")], scope=other, store=store)

    assert plan.anchor is None


def test_expired_anchors_are_not_used() -> None:
    """An anchor past its expiry is ignored even if the store returns it."""
    store = DictStore(ttl=-1.0)
    u1, a1 = user("one"), assistant("ONE")
    turn(store, [u1], [a1])

    plan = plan_request([u1, a1, user("two")], scope=SCOPE, store=store)

    assert plan.anchor is None


def test_secret_key_changes_every_view() -> None:
    """Anchors recorded under one secret key are unreachable under another."""
    keyed = DictStore(secret_key=b"one")
    u1, a1 = user("one"), assistant("ONE")
    turn(keyed, [u1], [a1])
    keyed.secret_key = b"two"

    assert plan_request([u1, a1, user("2")], scope=SCOPE, store=keyed).anchor is None
    keyed.secret_key = b"one"
    assert plan_request([u1, a1, user("2")], scope=SCOPE, store=keyed).anchor is not None


def test_diverged_at_names_the_first_differing_item() -> None:
    """With recent views known, a fallback says where the history left the closest one."""
    root = SCOPE.root(None)
    view = [user("1"), assistant("2"), user("3"), assistant("4")]
    recent = RecentViews()
    recent.add(prefix_hashes(root, [fingerprint(i) for i in view]))
    edited = [view[0], view[1], user("3 edited"), view[3], user("5")]

    plan = choose(
        prefix_hashes(root, [fingerprint(i) for i in edited]), {}, 0.0, has_model_items=True, recent=recent
    )

    assert plan.reason == Reason.PREFIX_DIVERGED
    assert plan.diverged_at == 2


def test_diverged_at_is_none_when_the_closest_view_is_whole() -> None:
    """A history that extends (or equals) a recent view left none of it: that view's anchor is gone."""
    root = SCOPE.root(None)
    old = [user("1"), assistant("2")]
    view = [*old, user("3"), assistant("4")]
    recent = RecentViews()
    recent.add(prefix_hashes(root, [fingerprint(i) for i in old]))
    recent.add(prefix_hashes(root, [fingerprint(i) for i in view]))
    hashes = prefix_hashes(root, [fingerprint(i) for i in [*view, user("5")]])

    assert recent.diverged_at(hashes) is None
    assert recent.diverged_at(hashes[:4]) is None
    assert recent.diverged_at(hashes[:3]) is None  # extends the older view, which is whole
    branched = prefix_hashes(root, [fingerprint(i) for i in [*old, user("3"), assistant("other")]])
    assert recent.diverged_at(branched) == 3


def test_recent_views_are_bounded() -> None:
    """RecentViews keeps at most max_views views and max_hashes hashes."""
    recent = RecentViews(max_views=3, max_hashes=10)
    for n in range(6):
        recent.add([bytes([n, i]) for i in range(3)])

    assert recent.diverged_at([bytes([0, 0]), bytes([0, 1]), b"x"]) is None  # view 0 was dropped
    assert recent.diverged_at([bytes([5, 0]), bytes([5, 1]), b"x"]) == 2
