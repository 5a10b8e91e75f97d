"""
End to end: items the canonical form once told apart or could not write, in loops against the
local server. Each loop must keep chaining, and the server must resolve exactly the history.
"""

from __future__ import annotations

from typing import Any

import openai

import anchortrack
from anchortrack.server import ResponsesServer, WireTap

from ..helpers import assert_server_saw, sent


def test_a_lone_surrogate_escape_in_arguments_keeps_chaining(
    server: ResponsesServer, client: openai.OpenAI, wire: WireTap
) -> None:
    """A tool call whose arguments hold the JSON-legal escape ``\\ud800``: every later call still chains."""
    ask = 'look it up\n!call lookup {"q": "\\ud800 and \\udfff"}\n!rounds 3'
    history: list[Any] = [{"role": "user", "content": ask}]
    for turn in range(4):
        resp = client.responses.create(model="scripted", input=history)
        if turn:
            assert "previous_response_id" in sent(wire)
        assert_server_saw(server, resp.id, history)
        calls = [item for item in resp.output if item.type == "function_call"]
        assert all("\\ud800" in c.arguments for c in calls)
        history += resp.output
        history += [{"type": "function_call_output", "call_id": c.call_id, "output": "done"} for c in calls]

    stats = anchortrack.tracker(client).stats
    assert 3 == stats.count("chained")
    assert 0 == stats.count(reason="internal_error")


def test_reasoning_sent_back_with_an_empty_content_list_keeps_chaining(
    server: ResponsesServer, client: openai.OpenAI, wire: WireTap
) -> None:
    """OpenAI returns reasoning with ``content: []``, frameworks send it back without (or the reverse)."""
    history: list[Any] = [{"role": "user", "content": "think about it\n!reason"}]
    for turn in range(3):
        resp = client.responses.create(model="scripted", input=history)
        if turn:
            assert "previous_response_id" in sent(wire)
        assert_server_saw(server, resp.id, history)
        for item in resp.output:
            data = item.to_dict(mode="json")
            if data["type"] == "reasoning":
                assert "content" not in data
                data["content"] = []  # the other form of the same item
            history.append(data)
        history.append({"role": "user", "content": f"and then? {turn}\n!reason"})

    assert 2 == anchortrack.tracker(client).stats.count("chained")
