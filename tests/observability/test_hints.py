"""Hints before mistakes: once per tracker, as warning events that say what to do."""

from __future__ import annotations

from typing import Any

import openai
import pytest
from structlog.testing import capture_logs

import anchortrack

from ..helpers import user


def _hints(logs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in logs if e["event"].startswith("anchortrack.hint_")]


def test_a_loop_that_forgets_the_output_is_told_once(client: openai.OpenAI) -> None:
    """A history that keeps growing without any response's output never chains: say so, once."""
    history = [user("plan a trip")]
    with capture_logs() as logs:
        for turn in range(6):
            client.responses.create(model="scripted", input=history)
            history = [*history, user(f"and then {turn}")]  # the output is never appended

    assert [
        {
            "event": "anchortrack.hint_output_missing",
            "log_level": "warning",
            "items": 3,
            "calls": 3,
            "hint": "the history grows but never holds a response's output: append it "
            "(history += response.output) so the next call can chain",
        }
    ] == _hints(logs)
    assert 6 == anchortrack.tracker(client).stats.count("stateless", "no_history")


def test_new_conversations_that_share_a_system_prompt_get_no_hint(client: openai.OpenAI) -> None:
    """First turns of different conversations, and a loop that appends its outputs, are no mistake."""
    system = {"role": "system", "content": "be brief"}
    with capture_logs() as logs:
        for n in range(4):
            client.responses.create(model="scripted", input=[system, user(f"question {n}")])
        history = [user("one")]
        for turn in range(3):
            reply = client.responses.create(model="scripted", input=history)
            history = [*history, *reply.output, user(f"turn {turn}")]

    assert [] == _hints(logs)


def test_previous_response_id_with_the_items_it_holds_is_told_before_the_400(client: openai.OpenAI) -> None:
    """The server answers 400 Duplicate item; the hint, logged first, says what to change."""
    history = [user("one")]
    reply = client.responses.create(model="scripted", input=history)
    history = [*history, *reply.output, user("two")]

    with capture_logs() as logs:
        for _ in range(2):
            with pytest.raises(openai.BadRequestError, match="Duplicate item"):
                client.responses.create(model="scripted", input=history, previous_response_id=reply.id)

    assert [
        {
            "event": "anchortrack.hint_duplicate_items",
            "log_level": "warning",
            "previous_response_id": reply.id,
            "items_held": 2,
            "hint": "previous_response_id already holds these items: pass only the items after that "
            "response (or leave previous_response_id out and let anchortrack chain)",
        }
    ] == [e for e in _hints(logs) if e["event"] == "anchortrack.hint_duplicate_items"]  # once per tracker


CALLER_MANAGED_HINT = (
    "the caller set previous_response_id (a framework's own chaining does), so anchortrack sends such "
    "calls as given and stands aside: to let anchortrack chain, pass the whole history as input and "
    "leave previous_response_id out"
)


def test_previous_response_id_of_the_caller_is_told_once_that_anchortrack_stands_aside(
    client: openai.OpenAI,
) -> None:
    """Managing the chain yourself is no mistake, but stats say passthrough: say why, once."""
    reply = client.responses.create(model="scripted", input=[user("one")])
    with capture_logs() as logs:
        second = client.responses.create(model="scripted", input=[user("two")], previous_response_id=reply.id)
        client.responses.create(model="scripted", input=[user("three")], previous_response_id=second.id)

    assert [
        {
            "event": "anchortrack.hint_caller_managed",
            "log_level": "warning",
            "previous_response_id": reply.id,
            "hint": CALLER_MANAGED_HINT,
        }
    ] == _hints(logs)
    assert 2 == anchortrack.tracker(client).stats.count("passthrough", "caller_managed")
