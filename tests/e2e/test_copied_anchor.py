"""
I8, end to end: a custom store written the natural way (dicts keyed by scope and view, and by scope
and response id), a secret key, and a second writer who copies one conversation's anchor under
another conversation's key. The MAC proves the anchor is one this deployment recorded, not that
it is the one asked for: the planner must check that too, and count what it refused.
"""

from __future__ import annotations

from typing import Any

import openai
import pytest

import anchortrack
from anchortrack.server import ResponsesServer, WireTap

from ..helpers import DictStore, ask, assert_server_saw, canon, sent


SECRET = "a secret only the deployment knows"


class KeyedDictStore(DictStore):
    """A custom store as a user would write one: the anchors themselves, in two dicts, with a secret key."""

    def __init__(self, secret_key: str) -> None:
        super().__init__(secret_key=secret_key.encode())


def _scope_key(client: openai.OpenAI, store: KeyedDictStore) -> str:
    tracker = anchortrack.tracker(client)
    return tracker.scope_for(client).store_key(store.secret_key)


def _mentions_alice(items: Any) -> bool:
    return "ALICE" in str(canon(items))


@pytest.mark.parametrize("tenancy", ["one app, two users", "two namespaces"])
def test_an_anchor_copied_onto_another_view_is_refused(
    tenancy: str, server: ResponsesServer, raw_client: openai.OpenAI, wire: WireTap
) -> None:
    """Alice's anchor copied under Bob's view key: Bob's next call goes out in full and it is counted."""
    store = KeyedDictStore(SECRET)
    if tenancy == "two namespaces":
        alice = anchortrack.wrap(raw_client, store=store, namespace="alice")
        bob = anchortrack.wrap(raw_client.with_options(), store=store, namespace="bob")
    else:
        alice = bob = anchortrack.wrap(raw_client, store=store)
    _, alice_reply = ask(alice, [], "ALICE: my diagnosis is X")
    bob_history, bob_reply = ask(bob, [], "Bob: hello")
    alice_scope, bob_scope = _scope_key(alice, store), _scope_key(bob, store)
    bob_view = store.ids[bob_scope, bob_reply.id].view

    store.views[bob_scope, bob_view] = store.ids[alice_scope, alice_reply.id]  # the copy
    rejected_before = anchortrack.tracker(bob).stats.anchors_rejected
    bob_history, resp = ask(bob, bob_history, "Bob: what did I say?")

    assert "previous_response_id" not in sent(wire)
    assert_server_saw(server, resp.id, bob_history[:-1])
    assert not _mentions_alice(server.state.resolved_context(resp.id))
    assert 1 == anchortrack.tracker(bob).stats.anchors_rejected - rejected_before


def test_an_anchor_copied_onto_another_response_id_is_refused(
    server: ResponsesServer, raw_client: openai.OpenAI, wire: WireTap
) -> None:
    """
    A caller-managed call names Bob's response; the store answers with Alice's anchor.

    The call goes out as given (the caller chose the parent), but the child is not recorded
    under a view continued from Alice's, and the refusal is counted.
    """
    store = KeyedDictStore(SECRET)
    client = anchortrack.wrap(raw_client, store=store)
    _, alice_reply = ask(client, [], "ALICE: my diagnosis is X")
    _, bob_reply = ask(client, [], "Bob: hello")
    scope = _scope_key(client, store)
    store.ids[scope, bob_reply.id] = store.ids[scope, alice_reply.id]  # the copy
    tracker = anchortrack.tracker(client)
    rejected_before = tracker.stats.anchors_rejected

    resp = client.responses.create(
        model="scripted",
        input=[{"role": "user", "content": "Bob: what did I say?"}],
        previous_response_id=bob_reply.id,
    )

    assert bob_reply.id == sent(wire)["previous_response_id"]
    assert not _mentions_alice(server.state.resolved_context(resp.id))
    assert 1 == tracker.stats.anchors_rejected - rejected_before
    assert (scope, resp.id) not in store.ids  # nothing recorded from the wrong parent
