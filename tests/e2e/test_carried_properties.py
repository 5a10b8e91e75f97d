"""
End to end: requests chain only from responses made with the same carried-over properties
(tools, tool_choice, text, …), and loops that keep them keep chaining. The agentic-api suite
(tests/thirdparty) shows the server that carries them over. Here the local server does not
announce that it applies them per request, so anchortrack treats it as a server it does not know.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest

import anchortrack
from anchortrack.server import ResponsesServer, WireTap

from ..helpers import assert_server_saw, function_tools, sent, user


@pytest.fixture(scope="module", name="server")
def _unannounced_server() -> Iterator[ResponsesServer]:
    """A local server whose responses do not say it applies the properties per request."""
    with ResponsesServer(store="memory") as srv:
        srv.state.announce_per_request = False
        yield srv


def test_a_loop_with_the_same_tools_keeps_chaining_whatever_its_instructions(
    client: openai.OpenAI, server: ResponsesServer, wire: WireTap
) -> None:
    """Equal tools rebuilt every call, instructions swapped every call: every call after the first chains."""
    history: list[Any] = []
    for n in range(4):
        history.append(user(f"turn {n}"))
        resp = client.responses.create(
            model="scripted",
            input=history,
            tools=function_tools("a", "b"),
            instructions=f"persona {n}",
            tool_choice="auto",
        )
        assert_server_saw(server, resp.id, history)
        assert (n > 0) == ("previous_response_id" in sent(wire))
        history += resp.output

    assert 3 == anchortrack.tracker(client).stats.count("chained")


def test_changed_tools_go_out_in_full_then_chaining_resumes(
    client: openai.OpenAI, server: ResponsesServer, wire: WireTap
) -> None:
    """A turn that drops or changes the tools is sent in full; the next turn with its tools chains from it."""
    stats = anchortrack.tracker(client).stats
    history: list[Any] = []
    plan = [("a",), ("a",), (), (), ("b",), ("b",), ("a", "b")]
    for n, names in enumerate(plan):
        history.append(user(f"turn {n}"))
        params: dict[str, Any] = {"tools": function_tools(*names)} if names else {}
        resp = client.responses.create(model="scripted", input=history, **params)
        assert_server_saw(server, resp.id, history)
        changed = n > 0 and names != plan[n - 1]
        assert (n > 0 and not changed) == ("previous_response_id" in sent(wire)), n
        history += resp.output

    assert 3 == stats.count(decision="stateless", reason="properties_changed")
    assert 3 == stats.count("chained")


async def test_async_twin(aclient: openai.AsyncOpenAI, server: ResponsesServer, wire: WireTap) -> None:
    """The same decisions for an async client, text format included."""
    text = {"format": {"type": "json_object"}}
    history: list[Any] = [user("one")]
    first = await aclient.responses.create(model="scripted", input=history, text=text)
    history += [*first.output, user("two")]
    second = await aclient.responses.create(model="scripted", input=history, text=text)
    assert first.id == sent(wire)["previous_response_id"]
    history += [*second.output, user("three")]

    third = await aclient.responses.create(model="scripted", input=history)

    assert "previous_response_id" not in sent(wire)
    assert_server_saw(server, third.id, history)
    assert 1 == anchortrack.tracker(aclient).stats.count(reason="properties_changed")
