"""One record of what a call did: `Outcome`, handed to subscribers and counted by `Stats`."""

from __future__ import annotations

from typing import Any

import openai
import pytest
from structlog.testing import capture_logs

import anchortrack
from anchortrack._outcome import Decision, Outcome
from anchortrack.server import ResponsesServer

from ..helpers import ask, user


def _subscribed(client: openai.OpenAI) -> list[Outcome]:
    outcomes: list[Outcome] = []
    anchortrack.tracker(client).subscribe(outcomes.append)
    return outcomes


def test_every_call_hands_one_outcome_to_subscribers(server: ResponsesServer, client: openai.OpenAI) -> None:
    """Stateless, chained, refused and resent, caller-managed: one outcome each, with what went out."""
    outcomes = _subscribed(client)
    history, first = ask(client, [], "one")
    history, second = ask(client, history, "two")
    server.state.drop(second.id)
    history, third = ask(client, history, "three")
    client.responses.create(model="scripted", input=[user("four")], previous_response_id=first.id)

    assert [
        (Decision.STATELESS, "no_history", None),
        (Decision.CHAINED, "chained", first.id),
        (Decision.RESENT, "stale_anchor", second.id),
        (Decision.PASSTHROUGH, "caller_managed", None),
    ] == [(o.decision, o.reason.value, o.anchor_id) for o in outcomes]
    assert [first.id, second.id, third.id] == [o.response_id for o in outcomes[:3]]
    chained, resent = outcomes[1], outcomes[2]
    assert 1 == chained.items_sent == chained.items_planned < chained.items_total
    assert chained.bytes_sent == chained.bytes_planned < chained.bytes_stateless
    # the refused chained attempt and the full resend both went out
    assert resent.items_sent == resent.items_planned + resent.items_total
    assert resent.bytes_sent == resent.bytes_planned + resent.bytes_stateless
    assert all(o.mode == "chained" and o.transport == "http" for o in outcomes)
    assert all(o.plan_seconds is not None for o in outcomes[:3])


def test_stats_count_exactly_the_outcomes(server: ResponsesServer, client: openai.OpenAI) -> None:
    """The counters are the outcomes added up: nothing is derived twice."""
    outcomes = _subscribed(client)
    history, _ = ask(client, [], "one")
    history, second = ask(client, history, "two")
    server.state.drop(second.id)
    ask(client, history, "three")
    ask(client, [user("ONE"), *history[1:]], "edited")

    snap = anchortrack.tracker(client).stats.snapshot()
    for key in (
        "items_sent",
        "items_total",
        "items_planned",
        "bytes_sent",
        "bytes_stateless",
        "bytes_planned",
    ):
        assert sum(getattr(o, key) for o in outcomes) == snap[key], key
    assert {"stale_anchor": 1} == snap["resends"]
    assert {"no_history": 1, "unknown_history": 1} == snap["stateless"]  # the first item changed


def test_delta_items_counts_only_chained_requests_the_server_accepted(
    server: ResponsesServer, client: openai.OpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Neither a refused chained attempt nor a shadow would-be chain is an item sent by a chained request."""
    history, _ = ask(client, [], "one")
    history, second = ask(client, history, "two")  # chained: 1 item
    server.state.drop(second.id)
    history, _ = ask(client, history, "three")  # refused, resent in full
    monkeypatch.setenv("ANCHORTRACK_MODE", "shadow")
    ask(client, history, "four")  # would chain

    snap = anchortrack.tracker(client).stats.snapshot()
    assert 1 == snap["delta_items"]["count"]
    assert 1 == anchortrack.tracker(client).stats.count("chained", mode="shadow")


def test_a_failing_subscriber_never_breaks_the_call(client: openai.OpenAI) -> None:
    """What a subscriber raises is logged; the call, and the subscribers after it, carry on."""
    tracker = anchortrack.tracker(client)
    seen: list[Any] = []

    def broken(outcome: Outcome) -> None:
        raise ValueError("observer bug")

    tracker.subscribe(broken)
    stop = tracker.subscribe(seen.append)
    with capture_logs() as logs:
        history, reply = ask(client, [], "one")
    assert reply.status == "completed"
    assert 1 == len(seen)
    assert [{"event": "anchortrack.subscriber_failed", "log_level": "warning", "error": "ValueError"}] == [
        e for e in logs if e["event"] == "anchortrack.subscriber_failed"
    ]

    stop()
    ask(client, history, "two")
    assert 1 == len(seen)


def test_a_call_passed_through_untouched_has_its_outcome(
    client: openai.OpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call passed through untouched still has its outcome."""
    outcomes = _subscribed(client)
    monkeypatch.setenv("ANCHORTRACK_MODE", "off")
    ask(client, [], "one")

    assert [
        Outcome(
            mode="off", transport="http", decision=Decision.PASSTHROUGH, reason=anchortrack.Reason.MODE_OFF
        )
    ] == (outcomes)
