"""End to end: the caller's own loop, wrapped, against the local server over real HTTP."""

from __future__ import annotations

import copy
import json
from typing import Any

import openai
import pytest

import anchortrack
from anchortrack.server import ResponsesServer, WireTap
from anchortrack.stores import MemoryStore

from ..helpers import assert_server_saw, sent


TOOLS = [
    {
        "type": "function",
        "name": "weather",
        "description": "Weather for a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        "strict": False,
    }
]


def test_wrapped_client_is_the_same_class_and_leaves_the_original_alone(
    raw_client: openai.OpenAI, client: openai.OpenAI
) -> None:
    """isinstance holds, the pool is shared, and the original client is not tracked."""
    assert isinstance(client, openai.OpenAI)
    assert type(raw_client) is openai.OpenAI
    assert client._client is raw_client._client
    with pytest.raises(TypeError):
        anchortrack.tracker(raw_client)


@pytest.mark.parametrize("append", ["models", "dumps", "shorthand"])
def test_plain_chat_chains_every_turn(
    server: ResponsesServer, client: openai.OpenAI, wire: WireTap, append: str
) -> None:
    """history += resp.output in any of its forms sends previous_response_id + the new message."""
    history: list[Any] = [{"role": "user", "content": "turn 0"}]
    ids = []
    for turn in range(1, 6):
        resp = client.responses.create(model="scripted", input=history, instructions="be brief")
        ids.append(resp.id)
        assert_server_saw(server, resp.id, history)
        if append == "models":
            history += resp.output
        elif append == "dumps":
            history += [item.model_dump() for item in resp.output]
        else:
            history.append({"role": "assistant", "content": resp.output_text})
        history.append({"role": "user", "content": f"turn {turn}"})

    bodies = [json.loads(b) for b in wire.bodies]
    assert "previous_response_id" not in bodies[0]
    for previous, body in zip(ids, bodies[1:], strict=False):
        assert previous == body["previous_response_id"]
        assert [{"role": "user", "content": body["input"][0]["content"]}] == body["input"]
        assert "be brief" == body["instructions"]


def test_string_first_input(server: ResponsesServer, client: openai.OpenAI, wire: WireTap) -> None:
    """A plain string as the first input is one user message, and the next turn chains."""
    first = client.responses.create(model="scripted", input="hello")
    history: list[Any] = [
        {"role": "user", "content": "hello"},
        *first.output,
        {"role": "user", "content": "more"},
    ]

    second = client.responses.create(model="scripted", input=history)

    assert first.id == sent(wire)["previous_response_id"]
    assert_server_saw(server, second.id, history)


def test_tool_loop_sends_exactly_the_function_call_outputs(
    server: ResponsesServer, client: openai.OpenAI, wire: WireTap
) -> None:
    """In a tool loop the delta is exactly the function_call_output items; tools go every call."""
    ask = 'weather please\n!call weather {"city": "Paris"}\n!call weather {"city": "Oslo"}\n!rounds 2'
    history: list[Any] = [{"role": "user", "content": ask}]
    expected_delta: list[Any] | None = None
    previous: str | None = None
    rounds = 0
    for _ in range(6):
        resp = client.responses.create(model="scripted", input=history, tools=TOOLS)
        body = sent(wire)
        assert TOOLS == body["tools"]
        if previous is not None:
            assert previous == body["previous_response_id"]
            assert expected_delta == body["input"]
        assert_server_saw(server, resp.id, history)
        history += resp.output
        calls = [item for item in resp.output if item.type == "function_call"]
        if not calls:
            break
        rounds += 1
        expected_delta = [
            {
                "type": "function_call_output",
                "call_id": c.call_id,
                "output": f"sunny in {json.loads(c.arguments)['city']}",
            }
            for c in calls
        ]
        history += expected_delta
        previous = resp.id

    assert 2 == rounds
    assert "tool results" in resp.output_text


def test_caller_history_is_never_mutated(client: openai.OpenAI) -> None:
    """I2: the caller's list and its items are left exactly as they were."""
    history: list[Any] = [{"role": "user", "content": "a"}]
    resp = client.responses.create(model="scripted", input=history)
    history += [item.model_dump() for item in resp.output]
    history.append({"role": "user", "content": "b"})
    snapshot = copy.deepcopy(history)
    ids = [id(item) for item in history]

    client.responses.create(model="scripted", input=history)

    assert snapshot == history
    assert ids == [id(item) for item in history]


def test_instructions_and_parameters_are_sent_on_every_call(client: openai.OpenAI, wire: WireTap) -> None:
    """Every parameter but input/previous_response_id goes out exactly as given."""
    kwargs: dict[str, Any] = {
        "model": "scripted",
        "instructions": "you are terse",
        "tools": TOOLS,
        "temperature": 0.2,
        "metadata": {"k": "v"},
        "max_output_tokens": 64,
    }
    history: list[Any] = [{"role": "user", "content": "one"}]
    first = client.responses.create(input=history, **kwargs)
    history += [*first.output, {"role": "user", "content": "two"}]
    client.responses.create(input=history, **kwargs)

    for body in (sent(wire, 0), sent(wire, 1)):
        for key, value in kwargs.items():
            assert value == body[key]
    assert {"input", "previous_response_id", *kwargs} == set(sent(wire, 1))


def test_with_options_and_copy_keep_tracking(client: openai.OpenAI, wire: WireTap) -> None:
    """with_options()/copy() return tracked clients sharing the same tracker and store."""
    history: list[Any] = [{"role": "user", "content": "one"}]
    first = client.with_options(timeout=30).responses.create(model="scripted", input=history)
    history += [*first.output, {"role": "user", "content": "two"}]

    copied = client.copy(max_retries=0)
    copied.responses.create(model="scripted", input=history)

    assert isinstance(copied, openai.OpenAI)
    assert anchortrack.tracker(copied) is anchortrack.tracker(client)
    assert first.id == sent(wire)["previous_response_id"]


async def test_async_loop_chains(server: ResponsesServer, aclient: openai.AsyncOpenAI, wire: WireTap) -> None:
    """The async twin chains the same way."""
    history: list[Any] = [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"}]
    previous = None
    for turn in range(4):
        resp = await aclient.responses.create(model="scripted", input=history)
        assert_server_saw(server, resp.id, history)
        if previous is not None:
            assert previous == sent(wire)["previous_response_id"]
            assert 1 == len(sent(wire)["input"])
        previous = resp.id
        history += [*resp.output, {"role": "user", "content": f"t{turn}"}]
    assert isinstance(aclient, openai.AsyncOpenAI)


def test_a_long_tool_loop_looks_up_a_handful_of_views_per_call(
    server: ResponsesServer, raw_client: openai.OpenAI, wire: WireTap
) -> None:
    """With the in-process store, each call asks for the views after the last history, not for all of them."""

    class CountingStore(MemoryStore):
        never_blocks = True  # its find never blocks either: still the in-process store's path

        def __init__(self) -> None:
            super().__init__()
            self.asked: list[int] = []

        def find(self, scope: str, views: Any) -> Any:
            self.asked.append(len(views))
            return super().find(scope, views)

    store = CountingStore()
    client = anchortrack.wrap(raw_client, store=store)
    history: list[Any] = [{"role": "user", "content": 'Go.\n!call fetch {"page": 1}\n!rounds 39'}]
    for _ in range(40):
        resp = client.responses.create(model="scripted", input=history)
        assert_server_saw(server, resp.id, history)
        history += resp.output
        history += [
            {"type": "function_call_output", "call_id": item.call_id, "output": "x" * 100}
            for item in resp.output
            if item.type == "function_call"
        ]

    assert 39 == anchortrack.tracker(client).stats.count("chained")
    assert max(store.asked[2:]) <= 2  # 79 views by the last call, had they all been asked for
    assert len(store.asked) == 39  # one lookup per call (the first has nothing to look up)
