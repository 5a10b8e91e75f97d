"""``anchortrack.explain``: chained, diverged, empty, caller-managed and a failing store."""

from __future__ import annotations

import openai

import anchortrack
from anchortrack import Reason, Scope
from anchortrack.stores import MemoryStore

from ..helpers import BreakableStore, ask, conversation, dumped, scope_of, user


class TestExplainFunction:
    def test_chained_history_marks_anchor_holders_and_delta(
        self, client: openai.OpenAI, store: MemoryStore
    ) -> None:
        """Each item names the shortest recorded view holding it; the delta is the new message."""
        history, (first, second, last) = conversation(client)

        result = anchortrack.explain([*history, user("more")], store=store, scope=scope_of(client))

        assert Reason.CHAINED == result.reason
        assert last == result.plan.anchor.response_id if result.plan.anchor else None
        assert [first, first, first, second, second, last, last, None] == [r.held_by for r in result.items]
        assert [False] * 7 + [True] == [r.in_delta for r in result.items]
        assert ("message", "system") == (result.items[0].type, result.items[0].role)
        assert ("function_call", None) == (result.items[2].type, result.items[2].role)
        assert result.summary.startswith(f"chained: sends 1 of 8 items after {last} (its view is items 0-6)")

    def test_diverged_history_says_where_with_recent_views(
        self, client: openai.OpenAI, store: MemoryStore
    ) -> None:
        """An edited item 1 falls back; a live tracker locates the divergence at index 1."""
        history, _ = conversation(client)
        edited = [history[0], user("WEATHER?"), *history[2:], user("more")]

        result = anchortrack.explain(
            edited, store=store, scope=scope_of(client), recent=anchortrack.tracker(client).recent
        )

        assert (Reason.PREFIX_DIVERGED, 1) == (result.reason, result.plan.diverged_at)
        assert [None] * len(edited) == [r.held_by for r in result.items]
        assert all(r.in_delta for r in result.items)
        assert result.summary == (
            "stateless (prefix_diverged): item 1 is the first that differs from the closest recorded view; "
            "no recorded response's view is a prefix of the history"
        )

    def test_empty_history(self, store: MemoryStore) -> None:
        """An empty history has nothing to chain."""
        result = anchortrack.explain([], store=store, scope=Scope("https://api.openai.com/v1"))

        assert (Reason.NO_HISTORY, ()) == (result.reason, result.items)
        assert "stateless (no_history): the history is empty" == result.summary

    def test_request_body_with_previous_response_id_is_caller_managed(self, store: MemoryStore) -> None:
        """A body that chains itself is a passthrough; store=false is noted."""
        body = {"model": "m", "input": "hi", "previous_response_id": "resp_1", "store": False}

        result = anchortrack.explain(body, store=store, scope=Scope("https://api.openai.com/v1"))

        assert ("passthrough", Reason.CALLER_MANAGED) == (result.decision, result.reason)
        assert result.summary == (
            "passthrough (caller_managed): the request sets previous_response_id=resp_1 itself, "
            "so it is sent as given; the response will not be recorded (store=false)"
        )

    def test_a_failing_store_is_store_unavailable(self, client: openai.OpenAI) -> None:
        """A store that raises explains as store_unavailable, naming the error class."""
        store = BreakableStore()
        store.broken = True

        result = anchortrack.explain([user("a"), user("b")], store=store, scope=scope_of(client))

        assert Reason.STORE_UNAVAILABLE == result.reason
        assert result.summary.endswith("(ConnectionError)")

    def test_history_that_is_exactly_a_view_has_nothing_to_send(
        self, client: openai.OpenAI, store: MemoryStore
    ) -> None:
        """A first turn's history plus its output, sent again, cannot chain: the delta would be empty."""
        history, first = ask(client, [], "one")

        result = anchortrack.explain(dumped(history), store=store, scope=scope_of(client))

        assert Reason.NOTHING_NEW == result.reason
        assert result.plan.diverged_at is None
        assert result.closest is not None
        assert first.id == result.closest.response_id
        assert result.summary == (
            f"stateless (nothing_new): the history ends exactly where {first.id}'s view ends, "
            "so there is nothing new to send after it"
        )
