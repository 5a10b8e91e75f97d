"""End to end: middleware that redacts, injects and drops history between calls."""

from __future__ import annotations

from typing import Any

import openai

import anchortrack
from anchortrack.server import ResponsesServer, WireTap

from ..helpers import assert_server_saw, sent


def _build(client: openai.OpenAI, turns: int) -> tuple[list[Any], list[str]]:
    history: list[Any] = [{"role": "system", "content": "v1"}, {"role": "user", "content": "my card is 4111"}]
    ids = []
    for turn in range(turns):
        resp = client.responses.create(model="scripted", input=history)
        ids.append(resp.id)
        history = [*history, *resp.output, {"role": "user", "content": f"q{turn}"}]
    return history, ids


def test_redacting_an_early_message_goes_stateless_and_the_server_sees_the_redaction(
    server: ResponsesServer, client: openai.OpenAI, wire: WireTap
) -> None:
    """Redaction before every anchor cannot be chained: the full, redacted history goes out."""
    history, _ = _build(client, 3)
    redacted = [history[0], {"role": "user", "content": "my card is [REDACTED]"}, *history[2:]]

    resp = client.responses.create(model="scripted", input=redacted)

    assert "previous_response_id" not in sent(wire)
    assert_server_saw(server, resp.id, redacted)
    assert 1 == anchortrack.tracker(client).stats.count("stateless", "prefix_diverged")


def test_changed_system_prompt_is_not_silently_ignored(
    server: ResponsesServer, client: openai.OpenAI, wire: WireTap
) -> None:
    """A new system prompt reaches the model (langchain's silent bug)."""
    history, _ = _build(client, 2)
    changed = [{"role": "system", "content": "v2"}, *history[1:]]

    resp = client.responses.create(model="scripted", input=changed)

    assert "previous_response_id" not in sent(wire)
    assert_server_saw(server, resp.id, changed)


def test_injected_items_after_the_anchor_are_sent_in_the_delta(
    server: ResponsesServer, client: openai.OpenAI, wire: WireTap
) -> None:
    """Middleware appending context chains from the newest response and sends the injection."""
    history, ids = _build(client, 2)
    injected = [*history, {"role": "developer", "content": "retrieved: doc 7"}]

    resp = client.responses.create(model="scripted", input=injected)

    assert ids[-1] == sent(wire)["previous_response_id"]
    assert 2 == len(sent(wire)["input"])
    assert_server_saw(server, resp.id, injected)


def test_injection_inside_the_newest_response_uses_the_older_anchor(
    server: ResponsesServer, client: openai.OpenAI, wire: WireTap
) -> None:
    """An item inserted among the newest response's items chains from the response before it."""
    history: list[Any] = [{"role": "user", "content": "go\n!reason"}]
    first = client.responses.create(model="scripted", input=history)
    history = [*history, *first.output, {"role": "user", "content": "again\n!reason"}]
    second = client.responses.create(model="scripted", input=history)
    assert 2 == len(second.output)
    inside = [
        *history,
        second.output[0],
        {"role": "developer", "content": "note"},
        second.output[1],
        {"role": "user", "content": "3"},
    ]

    resp = client.responses.create(model="scripted", input=inside)

    assert first.id == sent(wire)["previous_response_id"]
    assert_server_saw(server, resp.id, inside)


def test_dropping_the_last_server_item_invalidates_that_anchor(
    server: ResponsesServer, client: openai.OpenAI, wire: WireTap
) -> None:
    """Removing an output item at the end of a view never chains from that response."""
    history: list[Any] = [{"role": "user", "content": "go\n!reason"}]
    resp = client.responses.create(model="scripted", input=history)
    assert 2 == len(resp.output)
    trimmed = [*history, resp.output[0], {"role": "user", "content": "next"}]

    out = client.responses.create(model="scripted", input=trimmed)

    assert sent(wire).get("previous_response_id") != resp.id
    assert_server_saw(server, out.id, trimmed)
