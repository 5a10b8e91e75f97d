"""
A real third-party Responses server: vLLM's agentic-api 0.9.0, in front of a fake model.

Every wrapped call is checked twice: on the wire (did it chain, and send only
the new items?) and at the model (did the fake model receive the same context
as the same call sent unwrapped, with the full history and no
``previous_response_id``?).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest

import anchortrack
from anchortrack.server import WireTap, http_client_classes

from ..helpers import sent
from ._upstream import FakeModel
from .helpers import MODEL, AgenticAPI, model_view


WEATHER = {
    "type": "function",
    "name": "weather",
    "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
}
FORMS = ["create", "stream", "manager"]


@pytest.fixture(name="plain")
def _plain(gateway: AgenticAPI) -> Iterator[openai.OpenAI]:
    """An unwrapped client, off the wire record: it sends the reference full-history requests."""
    sync, _ = http_client_classes()
    client = openai.OpenAI(base_url=gateway.base_url, api_key="test", max_retries=0, http_client=sync())
    yield client
    client.close()


def call(client: openai.OpenAI, form: str, **params: Any) -> Any:
    """One Responses call in *form*; return the final response."""
    if form == "create":
        return client.responses.create(**params)
    if form == "stream":
        events = list(client.responses.create(stream=True, **params))
        assert "response.completed" == events[-1].type
        return events[-1].response
    with client.responses.stream(**params) as stream:
        return stream.get_final_response()


async def acall(client: openai.AsyncOpenAI, form: str, **params: Any) -> Any:
    """The async twin of `call`."""
    if form == "create":
        return await client.responses.create(**params)
    if form == "stream":
        events = [event async for event in await client.responses.create(stream=True, **params)]
        assert "response.completed" == events[-1].type
        return events[-1].response
    async with client.responses.stream(**params) as stream:
        return await stream.get_final_response()


class Conversation:
    """Drives one conversation and checks each request against its unwrapped full-history twin."""

    def __init__(self, upstream: FakeModel, plain: openai.OpenAI, wire: WireTap, **params: Any) -> None:
        self.upstream = upstream
        self.plain = plain
        self.wire = wire
        self.params = {"model": MODEL, **params}
        self.history: list[Any] = []
        self.chained: list[bool] = []

    def before(self, *items: Any) -> dict[str, Any]:
        self.history.extend(items)
        self._wire_at = len(self.wire.bodies)
        self._upstream_at = len(self.upstream.requests)
        return {**self.params, "input": list(self.history)}

    def after(self, response: Any, *, refused: int = 0) -> Any:
        """Check the call that just returned *response*; the server *refused* that many of its requests."""
        assert 1 + refused == len(self.wire.bodies) - self._wire_at
        assert 1 == len(self.upstream.requests) - self._upstream_at
        body = sent(self.wire)
        self.chained.append("previous_response_id" in body)
        got = self.upstream.requests[-1]
        self.assert_equivalent(got, self.history, self.params)
        self.history.extend(response.output)
        return response

    def assert_equivalent(self, got: dict[str, Any], history: list[Any], params: dict[str, Any]) -> None:
        """
        The model saw what the same call, unwrapped and in full, makes it see.

        The reference goes with ``store=False``: agentic-api refuses (500) a
        stored request that replays items it already stored, and passes an
        unstored one through as sent.
        """
        mark = len(self.upstream.requests)
        self.plain.responses.create(**{**params, "input": list(history), "store": False})
        reference = self.upstream.requests[mark]
        assert "previous_response_id" not in reference
        assert model_view(reference) == model_view(got)


@pytest.fixture(name="talk")
def _talk(upstream: FakeModel, plain: openai.OpenAI, wire: WireTap) -> Any:
    def make(**params: Any) -> Conversation:
        return Conversation(upstream, plain, wire, **params)

    return make


# ---- chat and tool loops, in every form ----


@pytest.mark.parametrize("form", FORMS)
def test_multi_turn_chat(client: openai.OpenAI, wire: WireTap, talk: Any, form: str) -> None:
    chat = talk(instructions="Be brief.")
    for text in ["one", "two", "three"]:
        params = chat.before({"role": "user", "content": text})
        chat.after(call(client, form, **params))
        if len(chat.chained) > 1:
            assert [{"role": "user", "content": text}] == sent(wire)["input"]
            assert "Be brief." == sent(wire)["instructions"]
    assert [False, True, True] == chat.chained


@pytest.mark.parametrize("form", FORMS)
async def test_multi_turn_chat_async(
    aclient: openai.AsyncOpenAI, wire: WireTap, talk: Any, form: str
) -> None:
    chat = talk()
    for text in ["one", "two", "three"]:
        params = chat.before({"role": "user", "content": text})
        chat.after(await acall(aclient, form, **params))
    assert [False, True, True] == chat.chained


@pytest.mark.parametrize("form", FORMS)
def test_tool_loop(client: openai.OpenAI, wire: WireTap, talk: Any, form: str) -> None:
    loop = talk(tools=[WEATHER])
    params = loop.before({"role": "user", "content": "hello"})
    loop.after(call(client, form, **params))
    params = loop.before({"role": "user", "content": "what is the weather in Paris?"})
    asked = loop.after(call(client, form, **params))
    calls = [item for item in asked.output if item.type == "function_call"]
    assert ["weather"] == [c.name for c in calls]

    params = loop.before({"type": "function_call_output", "call_id": calls[0].call_id, "output": "sunny"})
    answer = loop.after(call(client, form, **params))

    assert "sunny" in answer.output_text
    assert [{"type": "function_call_output", "call_id": calls[0].call_id, "output": "sunny"}] == sent(wire)[
        "input"
    ]
    assert [False, True, True] == loop.chained


@pytest.mark.parametrize("form", FORMS)
async def test_tool_loop_async(aclient: openai.AsyncOpenAI, talk: Any, form: str) -> None:
    loop = talk(tools=[WEATHER])
    params = loop.before({"role": "user", "content": "weather in Oslo?"})
    asked = loop.after(await acall(aclient, form, **params))
    (fc,) = [item for item in asked.output if item.type == "function_call"]
    params = loop.before({"type": "function_call_output", "call_id": fc.call_id, "output": "snow"})
    answer = loop.after(await acall(aclient, form, **params))
    params = loop.before({"role": "user", "content": "thanks"})
    loop.after(await acall(aclient, form, **params))

    assert "snow" in answer.output_text
    assert [False, True, True] == loop.chained


# ---- the server forgets: a restart with its in-memory store ----


@pytest.mark.parametrize("form", FORMS)
def test_stale_anchor_after_restart(
    client: openai.OpenAI, gateway: AgenticAPI, wire: WireTap, talk: Any, form: str
) -> None:
    """agentic-api forgot the anchor (404 naming it): one full resend, no error, chaining resumes."""
    chat = talk()
    params = chat.before({"role": "user", "content": "one"})
    first = chat.after(call(client, "create", **params))
    gateway.restart()

    params = chat.before({"role": "user", "content": "two"})
    second = chat.after(call(client, form, **params), refused=1)

    assert first.id == sent(wire, -2)["previous_response_id"]
    assert "previous_response_id" not in sent(wire)
    assert len(chat.history) - len(second.output) == len(sent(wire)["input"])
    tracker = anchortrack.tracker(client)
    assert {"stale_anchor": 1} == tracker.stats.snapshot()["resends"]

    params = chat.before({"role": "user", "content": "three"})
    chat.after(call(client, form, **params))
    assert second.id == sent(wire)["previous_response_id"]
    assert [False, False, True] == chat.chained  # what the model got: the resend, then a chain


@pytest.mark.parametrize("form", FORMS)
async def test_stale_anchor_after_restart_async(
    aclient: openai.AsyncOpenAI, gateway: AgenticAPI, wire: WireTap, talk: Any, form: str
) -> None:
    chat = talk()
    params = chat.before({"role": "user", "content": "one"})
    first = chat.after(await acall(aclient, "create", **params))
    gateway.restart()

    params = chat.before({"role": "user", "content": "two"})
    second = chat.after(await acall(aclient, form, **params), refused=1)

    assert first.id == sent(wire, -2)["previous_response_id"]
    assert "previous_response_id" not in sent(wire)
    assert {"stale_anchor": 1} == anchortrack.tracker(aclient).stats.snapshot()["resends"]

    params = chat.before({"role": "user", "content": "three"})
    chat.after(await acall(aclient, form, **params))
    assert second.id == sent(wire)["previous_response_id"]


def test_other_refusals_reach_the_caller_with_one_request(
    client: openai.OpenAI, gateway: AgenticAPI, wire: WireTap
) -> None:
    """A caller's own previous_response_id that the server lost is the caller's error: no resend."""
    before = len(wire.bodies)
    with pytest.raises(openai.NotFoundError) as raised:
        client.responses.create(model=MODEL, input="x", previous_response_id="resp_lost")
    assert 1 == len(wire.bodies) - before
    assert "resp_lost" in str(raised.value.body)


def test_agentic_api_refuses_a_stored_replay_of_items_it_stored(plain: openai.OpenAI) -> None:
    """
    Why the references above are unstored: agentic-api keeps items by id, so a
    stored request replaying a stored output item fails (500, "failed to
    persist response") after the model already answered. A stateless resend
    by anchortrack meets this only if the server still holds those items.
    """
    first = plain.responses.create(model=MODEL, input="hi")
    replay = [{"role": "user", "content": "hi"}, *first.output, {"role": "user", "content": "again"}]
    with pytest.raises(openai.InternalServerError, match="failed to persist response"):
        plain.responses.create(model=MODEL, input=replay)


# ---- store=False ----


def test_store_false_is_never_chained(
    client: openai.OpenAI, upstream: FakeModel, wire: WireTap, talk: Any
) -> None:
    """store=False responses are not anchors: each turn goes in full, and agentic-api passes it through."""
    chat = talk(store=False)
    for text in ["one", "two", "three"]:
        params = chat.before({"role": "user", "content": text})
        response = chat.after(call(client, "create", **params))
        assert response.id.startswith("resp_up")  # the upstream's own id: agentic-api stored nothing
        assert upstream.requests[-1]["store"] is False
    assert [False, False, False] == chat.chained
    assert 5 == len(sent(wire)["input"])


# ---- properties carried over by the server ----


def test_a_request_whose_tools_changed_goes_in_full_and_is_equivalent(
    client: openai.OpenAI, upstream: FakeModel, wire: WireTap, talk: Any
) -> None:
    """
    agentic-api carries ``tools`` (and ``tool_choice``) over a chain: a chained
    request without ``tools`` would reach the model with the previous response's.
    anchortrack chains only from a response made with the same carried-over
    properties, so the request that drops the tools goes out in full, and the
    model sees what it sees for the same call unwrapped: no tools. The next
    turn, with the same (absent) tools, chains again, and nothing is carried.

    The assistant's answers go back as frameworks resend them (shorthand, no
    ids): a full request replaying output items agentic-api stored is refused
    by agentic-api itself (see the test above).
    """
    chat = talk()
    first = client.responses.create(**chat.before({"role": "user", "content": "hello"}), tools=[WEATHER])
    assert "tools" in upstream.requests[-1]
    chat.history.append({"role": "assistant", "content": first.output_text})

    mark = len(upstream.requests)
    second = client.responses.create(**chat.before({"role": "user", "content": "and the weather?"}))

    got = upstream.requests[mark]
    assert "previous_response_id" not in sent(wire)
    assert 3 == len(sent(wire)["input"])
    assert "tools" not in got
    assert ["message"] == [item.type for item in second.output]  # no tool the caller did not offer
    chat.assert_equivalent(got, chat.history, chat.params)
    stats = anchortrack.tracker(client).stats
    assert 1 == stats.count(decision="stateless", reason="properties_changed")

    chat.history.append({"role": "assistant", "content": second.output_text})
    mark = len(upstream.requests)
    client.responses.create(**chat.before({"role": "user", "content": "weather, please"}))

    got = upstream.requests[mark]
    assert second.id == sent(wire)["previous_response_id"]
    assert [{"role": "user", "content": "weather, please"}] == sent(wire)["input"]
    assert "tools" not in got
    chat.assert_equivalent(got, chat.history, chat.params)


def test_a_request_whose_tool_choice_changed_is_not_chained(
    client: openai.OpenAI, upstream: FakeModel, wire: WireTap, talk: Any
) -> None:
    """tool_choice is carried over too: a request that stops forcing a tool goes in full, without it."""
    chat = talk(tools=[WEATHER])
    first = client.responses.create(
        **chat.before({"role": "user", "content": "hello"}), tool_choice="required"
    )
    assert "required" == upstream.requests[-1]["tool_choice"]
    chat.history.append({"role": "assistant", "content": first.output_text})

    mark = len(upstream.requests)
    client.responses.create(**chat.before({"role": "user", "content": "and now?"}))

    got = upstream.requests[mark]
    assert "previous_response_id" not in sent(wire)
    assert "tool_choice" not in got
    chat.assert_equivalent(got, chat.history, chat.params)


def test_agentic_api_carries_tools_over_a_chain(plain: openai.OpenAI, upstream: FakeModel) -> None:
    """
    What the two tests above guard against, shown with the caller's own
    previous_response_id: agentic-api resolves a chain's tools too (and its
    tool_choice), where OpenAI carries nothing but the items over.
    """
    first = plain.responses.create(model=MODEL, input="hello", tools=[WEATHER], tool_choice="required")
    plain.responses.create(model=MODEL, input="and the weather?", previous_response_id=first.id)

    chained = upstream.requests[-1]
    assert ["weather"] == [tool["name"] for tool in chained["tools"]]
    assert "required" == chained["tool_choice"]
