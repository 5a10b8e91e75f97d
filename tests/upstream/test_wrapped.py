"""A wrapped client's tool loop through the bridge: chained on the wire, full context at the provider."""

from __future__ import annotations

import json
from typing import Any

import openai

import anchortrack
from anchortrack.server import ResponsesServer, http_client_classes
from anchortrack.stores import MemoryStore

from .provider import FakeProvider, Reply


TOOLS = [
    {"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {}}},
    {"type": "function", "name": "get_time", "parameters": {"type": "object", "properties": {}}},
]


def _script(provider: FakeProvider) -> None:
    provider.script(
        Reply(
            content=None,
            reasoning="need weather",
            tool_calls=[("call_w", "get_weather", '{"city":"Lisbon"}'), ("call_t", "get_time", "{}")],
            finish_reason="tool_calls",
        ),
        Reply(content="Lisbon: 21°C at 10:00."),
        Reply(
            content=None,
            tool_calls=[("call_w2", "get_weather", '{"city":"Porto"}')],
            finish_reason="tool_calls",
        ),
        Reply(content="Porto: 18°C."),
    )


def _loop(client: Any) -> list[dict[str, Any]]:
    """Two user turns of a tool loop, each call sending the whole history."""
    history: list[dict[str, Any]] = []
    for text in ("Weather and time in Lisbon?", "And Porto?"):
        history.append({"role": "user", "content": text})
        for _ in range(3):
            response = client.responses.create(model="m1", input=history, tools=TOOLS)
            output = [item.to_dict(mode="json") for item in response.output]
            history += output
            calls = [item for item in output if item["type"] == "function_call"]
            if not calls:
                break
            history += [
                {
                    "type": "function_call_output",
                    "call_id": c["call_id"],
                    "output": json.dumps({"ok": c["name"]}),
                }
                for c in calls
            ]
    return history


def test_wrapped_tool_loop_chains_and_the_provider_sees_the_full_context(
    provider: FakeProvider, bridge: ResponsesServer
) -> None:
    """Same loop, stateless then wrapped: the wrapped one chains; the provider's messages are identical."""
    bodies: list[dict[str, Any]] = []
    sync, _ = http_client_classes()

    def hook(request: Any) -> None:
        if request.url.path.endswith("/responses"):
            bodies.append(json.loads(request.content))

    _script(provider)
    with openai.OpenAI(base_url=bridge.base_url, api_key="k", max_retries=0) as plain:
        plain_history = _loop(plain)
    stateless_messages = provider.messages
    provider.reset()

    _script(provider)
    raw = openai.OpenAI(
        base_url=bridge.base_url,
        api_key="k",
        max_retries=0,
        http_client=sync(event_hooks={"request": [hook]}),
    )
    with raw:
        wrapped_history = _loop(anchortrack.wrap(raw, store=MemoryStore()))

    assert len(bodies) == 4
    assert "previous_response_id" not in bodies[0]
    assert all(body.get("previous_response_id") for body in bodies[1:])
    assert [len(body["input"]) for body in bodies][1:] == [2, 1, 1]  # only what the server has not seen
    assert provider.messages == stateless_messages
    assert [len(messages) for messages in provider.messages] == [1, 4, 6, 8]
    assert provider.messages[-1][-2:] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_w2",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Porto"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_w2", "content": '{"ok": "get_weather"}'},
    ]
    assert len(wrapped_history) == len(plain_history) == 11
