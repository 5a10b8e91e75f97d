"""
I8: tests for anchor MACs (`anchortrack._seal`) and how the flow treats anchors that fail them:
as absent, listed in the plan, reported with a warning.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from anchortrack import Anchor, Reason, Scope
from anchortrack._flow import CallContext, Find, Get, Log, Planned, Send, call_flow
from anchortrack._hashing import api_key_digest
from anchortrack._request import read_request
from anchortrack._seal import anchor_mac, authentic, mac_key, seal

from ..helpers import SCOPE, DictStore, assistant, turn, user


KEY = mac_key(b"the store's secret")
SCOPE_KEY = "0123456789abcdef"


def _anchor(**changes: Any) -> Anchor:
    base = Anchor(b"v" * 16, "resp_1", 4, 1_700_000_000.0, 1_700_003_600.5, b"p" * 16)
    return attrs.evolve(base, **changes)


def test_a_sealed_anchor_is_authentic_only_where_it_was_sealed() -> None:
    """The MAC covers scope, view, response id, count, expiry and properties: changing any one fails it."""
    sealed = seal(_anchor(), SCOPE_KEY, KEY)
    assert sealed.mac is not None
    assert 16 == len(sealed.mac)
    assert authentic(sealed, SCOPE_KEY, KEY)

    changed = {
        "view": b"w" * 16,
        "response_id": "resp_evil",
        "count": 5,
        "expires_at": 1_800_000_000.0,
        "properties": b"",
    }
    for field, value in changed.items():
        assert not authentic(attrs.evolve(sealed, **{field: value}), SCOPE_KEY, KEY), field
    assert not authentic(sealed, "fedcba9876543210", KEY)
    assert not authentic(sealed, SCOPE_KEY, mac_key(b"another secret"))
    assert not authentic(attrs.evolve(sealed, mac=None), SCOPE_KEY, KEY)
    assert not authentic(attrs.evolve(sealed, mac=sealed.mac[:8]), SCOPE_KEY, KEY)
    # created_at is informational: nothing is decided on it, so it is not covered
    assert authentic(attrs.evolve(sealed, created_at=0.0), SCOPE_KEY, KEY)


def test_without_a_key_nothing_is_sealed_or_checked() -> None:
    """No secret key: no MAC is written and every anchor is accepted (the README's trust model says so)."""
    assert None is mac_key(None)
    assert None is mac_key(b"")
    plain = seal(_anchor(), SCOPE_KEY, None)

    assert None is plain.mac
    assert authentic(plain, SCOPE_KEY, None)


def test_anchors_of_the_wrong_types_are_not_authentic() -> None:
    """A value another writer left with fields of other types fails the check instead of raising."""
    sealed = seal(_anchor(), SCOPE_KEY, KEY)

    assert not authentic(attrs.evolve(sealed, properties="text"), SCOPE_KEY, KEY)  # type: ignore[arg-type]
    assert not authentic(attrs.evolve(sealed, count=-1), SCOPE_KEY, KEY)
    assert not authentic(attrs.evolve(sealed, mac="00" * 16), SCOPE_KEY, KEY)  # type: ignore[arg-type]


def test_long_secret_keys_and_mac_keys() -> None:
    """Keys longer than BLAKE2b's 64 bytes work; the MAC key is derived, never the secret itself."""
    long_key = mac_key(b"k" * 200)
    assert long_key is not None
    assert 32 == len(long_key)
    assert b"k" * 32 != long_key
    assert anchor_mac(long_key, SCOPE_KEY, _anchor()) != anchor_mac(KEY, SCOPE_KEY, _anchor())  # type: ignore[arg-type]


def test_store_keys_and_api_key_digests_are_keyed_by_the_secret() -> None:
    """With a secret key, the printable scope key and the API key digest cannot be recomputed without it."""
    scope = Scope("https://api.openai.com/v1", namespace="tenant-acme")

    assert scope.key == scope.store_key(None)
    assert scope.store_key(b"s1") != scope.key
    assert scope.store_key(b"s1") != scope.store_key(b"s2")
    assert 16 == len(scope.store_key(b"s1"))
    assert api_key_digest("sk-abc") != api_key_digest("sk-abd")
    assert api_key_digest("sk-abc", b"s1") != api_key_digest("sk-abc")
    assert "sk-abc" not in api_key_digest("sk-abc")


def test_the_api_key_digest_separates_scopes() -> None:
    """Two keys, two scopes (key and root); no digest is the scope as it was before keys were added."""
    a = Scope("https://api.openai.com/v1", api_key_digest=api_key_digest("sk-a"))
    b = Scope("https://api.openai.com/v1", api_key_digest=api_key_digest("sk-b"))
    none = Scope("https://api.openai.com/v1")

    assert len({a.key, b.key, none.key}) == 3
    assert len({a.root(None), b.root(None), none.root(None)}) == 3
    assert "169b4acc8b78eb44" == none.key  # unchanged: anchors recorded without key scoping stay valid


# -- the flow -------------------------------------------------------------------------------------


SECRET = b"shared-store secret"


def _keyed() -> tuple[DictStore, CallContext, list[Any]]:
    """A keyed store with two sealed turns, its context, and the history of the third call."""
    store = DictStore(secret_key=SECRET)
    u1, a1, u2, a2 = user("one"), assistant("ONE"), user("two"), assistant("TWO")
    turn(store, [u1], [a1])
    turn(store, [u1, a1, u2], [a2])
    context = CallContext(scope_key=SCOPE.store_key(SECRET), root=SCOPE.root(SECRET), mac_key=mac_key(SECRET))
    return store, context, [u1, a1, u2, a2, user("three")]


def _run(context: CallContext, store: DictStore, body: dict[str, Any]) -> tuple[Send, list[Any]]:
    """Drive one call to its send, answering store effects from *store*; return the send and the notes."""
    flow = call_flow(context, read_request(body))
    notes: list[Any] = []
    effect = next(flow)
    while not isinstance(effect, Send):
        if isinstance(effect, Find):
            answer: Any = store.find(effect.scope, effect.views)
        elif isinstance(effect, Get):
            answer = store.get(effect.scope, effect.response_id)
        else:
            notes.append(effect)
            answer = None
        effect = flow.send(answer)
    return effect, notes


def _forge(store: DictStore, items: int, **changes: Any) -> Anchor:
    """Rewrite the stored anchor of *items* items in place, as another writer could."""
    [(key, anchor)] = [(k, a) for k, a in store.views.items() if a.count == items]
    forged = attrs.evolve(anchor, **changes)
    store.views[key] = forged
    store.ids[key[0], forged.response_id] = forged
    return forged


def test_sealed_anchors_chain_as_before() -> None:
    """With a key and honest writers, the newest anchor is used and nothing is rejected."""
    store, context, history = _keyed()

    send, notes = _run(context, store, {"model": "m", "input": history})

    assert [history[-1]] == send.body["input"]
    [planned] = [n for n in notes if isinstance(n, Planned)]
    assert () == planned.plan.rejected
    assert all(a.mac is not None for a in store.views.values())


def test_a_rewritten_response_id_is_rejected_and_an_older_anchor_used() -> None:
    """The newest view now names an attacker's response: it is treated as absent and reported."""
    store, context, history = _keyed()
    _forge(store, 4, response_id="resp_attacker")

    send, notes = _run(context, store, {"model": "m", "input": history})

    assert "resp_attacker" != send.body["previous_response_id"]
    assert history[2:] == send.body["input"]  # chained from the authentic first turn
    [planned] = [n for n in notes if isinstance(n, Planned)]
    assert (Reason.CHAINED, ("resp_attacker",)) == (planned.plan.reason, planned.plan.rejected)
    [warning] = [n for n in notes if isinstance(n, Log) and n.level == "warning"]
    assert (
        Log(
            "warning",
            "anchortrack.anchor_rejected",
            {"rejected": 1, "anchor_ids": ["resp_attacker"], "scope": context.scope_key},
        )
        == warning
    )


def test_every_forged_anchor_rejected_means_a_full_request() -> None:
    """Forged counts, expiries and stripped MACs all fail: the request goes out stateless."""
    store, context, history = _keyed()
    first = _forge(store, 2, expires_at=4e9)
    second = _forge(store, 4, mac=None)
    body = {"model": "m", "input": history}

    send, notes = _run(context, store, body)

    assert body is send.body
    [planned] = [n for n in notes if isinstance(n, Planned)]
    assert Reason.PREFIX_DIVERGED == planned.plan.reason
    assert (second.response_id, first.response_id) == planned.plan.rejected


def test_a_caller_managed_parent_that_fails_its_mac_is_not_extended() -> None:
    """previous_response_id from the caller: a forged parent is not trusted to record the child."""
    store, context, _ = _keyed()
    forged = _forge(store, 4, count=40)
    body = {"model": "m", "input": [user("three")], "previous_response_id": forged.response_id}

    send, notes = _run(context, store, body)

    assert body is send.body
    assert None is send.ticket
    [planned] = [n for n in notes if isinstance(n, Planned)]
    assert (Reason.CALLER_MANAGED, (forged.response_id,)) == (planned.plan.reason, planned.plan.rejected)
    assert ["anchortrack.anchor_rejected", "anchortrack.hint_caller_managed"] == [
        n.event for n in notes if isinstance(n, Log) and n.level == "warning"
    ]


@pytest.mark.parametrize("secret", [None, SECRET])
def test_anchors_are_sealed_for_the_scope_key_they_are_stored_under(secret: bytes | None) -> None:
    """record_response seals with the store's key for the keyed scope key (and not at all without a key)."""
    store = DictStore(secret_key=secret)
    turn(store, [user("one")], [assistant("ONE")])

    [(scope_key, anchor)] = [(k[0], a) for k, a in store.views.items()]

    assert SCOPE.store_key(secret) == scope_key
    assert (anchor.mac is not None) == (secret is not None)
    assert authentic(anchor, scope_key, mac_key(secret))
