"""
LiteLLM's proxy (1.108.7, no database, a master key) in front of the local server as an OpenAI-type
upstream, in its three setups: ``default`` (response ids encrypted with the master key), ``plain``
(``disable_responses_id_security: true``) and ``bridge`` (a Chat Completions deployment behind its
Responses API, ``openai/chat_completions/…``, in front of a fake model).

Each wrapped call is checked on the wire (did it chain?) and at the model: the local server's scripted
model answers with a digest of the whole context it saw, so a wrapped answer equal to the answer of the
same call sent unwrapped, in full, means the model saw the same context; the bridge's fake model records
the messages it got. Without the ``litellm`` executable this suite is skipped, unless
``ANCHORTRACK_TEST_LITELLM`` names one (then it fails).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

import anchortrack
from anchortrack.server import ResponsesServer, ScriptedModel, WireTap
from anchortrack.stores import MemoryStore

from .._redis import free_port
from ..helpers import canon, sent
from ._litellm import LITELLM_ENV, MASTER_KEY, LiteLLM, config, litellm_binary
from ._upstream import FakeModel


FORMS = ["create", "stream", "manager"]
SETUPS = ["default", "plain"]
BRIDGED = "bridged"  # the model name of the Chat Completions deployment (in the default setup)


class Recording(ScriptedModel):
    """The scripted model, keeping the canonical form of every context it answers (and instructions)."""

    def __init__(self) -> None:
        super().__init__()
        self.contexts: list[Any] = []

    def respond(self, context: Any, *, instructions: Any = None) -> Any:
        self.contexts.append((canon(list(context)), instructions))
        return super().respond(context, instructions=instructions)


class Upstream:
    """The local server LiteLLM forwards to, on a fixed port, so that a restart forgets every response."""

    def __init__(self) -> None:
        self.port = free_port()
        self.model = Recording()
        self.server = ResponsesServer(port=self.port, model=self.model).start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def restart(self) -> None:
        self.server.stop()
        self.server = ResponsesServer(port=self.port, model=self.model).start()

    def equivalent(self, plain: openai.OpenAI, history: list[Any], **params: Any) -> None:
        """The model saw for the last call what it sees for the same call unwrapped, in full (unstored)."""
        got = self.model.contexts[-1]
        plain.responses.create(**params, input=list(history), store=False)
        assert self.model.contexts[-1] == got


@pytest.fixture(scope="module", name="litellm")
def _litellm() -> str:
    """
    The proxy's executable. Missing, the suite is skipped, unless ``ANCHORTRACK_TEST_LITELLM`` names
    one: then it fails (.ci/run installs LiteLLM in a venv of its own and names it, so CI cannot skip).
    """
    binary, named = litellm_binary()
    if binary is None:
        message = f"litellm is not installed: set {LITELLM_ENV} to a litellm[proxy] 1.108.7 executable"
        if named:
            pytest.fail(f"{message} ({LITELLM_ENV} names one that is not there)", pytrace=False)
        pytest.skip(message)
    return binary


@pytest.fixture(scope="module", name="upstream")
def _upstream() -> Iterator[Upstream]:
    upstream = Upstream()
    yield upstream
    upstream.server.stop()


@pytest.fixture(scope="module", name="fake")
def _fake() -> Iterator[FakeModel]:
    model = FakeModel().start()
    yield model
    model.stop()


@pytest.fixture(scope="module", name="proxies")
def _proxies(
    litellm: str, upstream: Upstream, fake: FakeModel, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, LiteLLM]]:
    """Both proxies, started side by side (each takes tens of seconds to import)."""
    scripted = f"model: openai/scripted\napi_base: {upstream.base_url}\napi_key: test"
    bridged = f"model: openai/chat_completions/fake-model\napi_base: {fake.base_url}/v1\napi_key: test"
    proxies = {
        "default": LiteLLM(
            litellm,
            config({"scripted": scripted, BRIDGED: bridged}, plain_ids=False),
            _home(tmp_path_factory),
        ),
        "plain": LiteLLM(litellm, config({"scripted": scripted}, plain_ids=True), _home(tmp_path_factory)),
    }
    try:
        for proxy in proxies.values():
            proxy.start()
        for proxy in proxies.values():
            proxy.wait()
        yield proxies
    finally:
        for proxy in proxies.values():
            proxy.stop()


def _home(factory: pytest.TempPathFactory) -> Path:
    return factory.mktemp("litellm")


@pytest.fixture(name="setup", params=SETUPS)
def _setup(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _clients(proxy: LiteLLM, wire: WireTap) -> tuple[openai.OpenAI, openai.OpenAI]:
    """A wrapped client on the wire record, and a plain one off it (the reference requests)."""
    raw = openai.OpenAI(
        base_url=proxy.base_url, api_key=MASTER_KEY, max_retries=0, http_client=wire.http_client()
    )
    plain = openai.OpenAI(base_url=proxy.base_url, api_key=MASTER_KEY, max_retries=0)
    return anchortrack.wrap(raw, store=MemoryStore()), plain


@pytest.fixture(name="pair")
def _pair(
    proxies: dict[str, LiteLLM], setup: str, wire: WireTap
) -> Iterator[tuple[openai.OpenAI, openai.OpenAI]]:
    client, plain = _clients(proxies[setup], wire)
    yield client, plain
    client.close()
    plain.close()


@pytest.fixture(name="apair")
async def _apair(
    proxies: dict[str, LiteLLM], setup: str, wire: WireTap
) -> AsyncIterator[tuple[openai.AsyncOpenAI, openai.OpenAI]]:
    proxy = proxies[setup]
    raw = openai.AsyncOpenAI(
        base_url=proxy.base_url, api_key=MASTER_KEY, max_retries=0, http_client=wire.async_http_client()
    )
    plain = openai.OpenAI(base_url=proxy.base_url, api_key=MASTER_KEY, max_retries=0)
    yield anchortrack.wrap(raw, store=MemoryStore()), plain
    await raw.close()
    plain.close()


def call(client: openai.OpenAI, form: str, **params: Any) -> Any:
    """One Responses call in *form*; the final response."""
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


# ---- default and plain ids: LiteLLM forwards previous_response_id to the local server ----


@pytest.mark.parametrize("form", FORMS)
def test_multi_turn_chat(
    pair: tuple[openai.OpenAI, openai.OpenAI], upstream: Upstream, wire: WireTap, form: str
) -> None:
    client, plain = pair
    history: list[Any] = []
    chained = []
    for text in ["one", "two", "three"]:
        history.append({"role": "user", "content": text})
        response = call(client, form, model="scripted", input=list(history), instructions="Be brief.")
        chained.append("previous_response_id" in sent(wire))
        upstream.equivalent(plain, history, model="scripted", instructions="Be brief.")
        history += response.output
    assert [False, True, True] == chained
    assert [{"role": "user", "content": "three"}] == sent(wire)["input"]


@pytest.mark.parametrize("form", FORMS)
async def test_multi_turn_chat_async(
    apair: tuple[openai.AsyncOpenAI, openai.OpenAI], upstream: Upstream, wire: WireTap, form: str
) -> None:
    client, plain = apair
    history: list[Any] = []
    chained = []
    for text in ["one", "two", "three"]:
        history.append({"role": "user", "content": text})
        response = await acall(client, form, model="scripted", input=list(history))
        chained.append("previous_response_id" in sent(wire))
        upstream.equivalent(plain, history, model="scripted")
        history += response.output
    assert [False, True, True] == chained


def test_tool_loop(pair: tuple[openai.OpenAI, openai.OpenAI], upstream: Upstream, wire: WireTap) -> None:
    client, plain = pair
    tools = [{"type": "function", "name": "weather", "parameters": {"type": "object", "properties": {}}}]
    history: list[Any] = [{"role": "user", "content": '!call weather {"city": "Oslo"}\nweather?'}]
    asked = client.responses.create(model="scripted", input=list(history), tools=tools)
    [fc] = [item for item in asked.output if item.type == "function_call"]
    history += [*asked.output, {"type": "function_call_output", "call_id": fc.call_id, "output": "snow"}]

    answer = client.responses.create(model="scripted", input=list(history), tools=tools)

    assert "previous_response_id" in sent(wire)
    assert "snow" in answer.output_text
    upstream.equivalent(plain, history, model="scripted", tools=tools)


@pytest.mark.parametrize("form", FORMS)
def test_stale_anchor_after_upstream_restart(
    pair: tuple[openai.OpenAI, openai.OpenAI], upstream: Upstream, wire: WireTap, form: str
) -> None:
    """The upstream forgot the anchor: LiteLLM's rewrapped 400 is recognised, one full resend, no error."""
    client, plain = pair
    history: list[Any] = [{"role": "user", "content": "one"}]
    first = call(client, "create", model="scripted", input=list(history))
    history += [*first.output, {"role": "user", "content": "two"}]
    upstream.restart()

    before = len(wire.bodies)
    second = call(client, form, model="scripted", input=list(history))

    assert 2 == len(wire.bodies) - before
    assert "previous_response_id" in sent(wire, -2)
    assert "previous_response_id" not in sent(wire)
    upstream.equivalent(plain, history, model="scripted")
    assert {"stale_anchor": 1} == anchortrack.tracker(client).stats.snapshot()["resends"]

    history += [*second.output, {"role": "user", "content": "three"}]
    call(client, form, model="scripted", input=list(history))
    assert "previous_response_id" in sent(wire)  # chaining resumes from the resend
    upstream.equivalent(plain, history, model="scripted")


@pytest.mark.parametrize("form", FORMS)
async def test_stale_anchor_after_upstream_restart_async(
    apair: tuple[openai.AsyncOpenAI, openai.OpenAI], upstream: Upstream, wire: WireTap, form: str
) -> None:
    client, plain = apair
    history: list[Any] = [{"role": "user", "content": "one"}]
    first = await acall(client, "create", model="scripted", input=list(history))
    history += [*first.output, {"role": "user", "content": "two"}]
    upstream.restart()

    await acall(client, form, model="scripted", input=list(history))

    assert "previous_response_id" in sent(wire, -2)
    assert "previous_response_id" not in sent(wire)
    upstream.equivalent(plain, history, model="scripted")
    assert {"stale_anchor": 1} == anchortrack.tracker(client).stats.snapshot()["resends"]


def test_a_genuine_400_reaches_the_caller_as_the_full_request_gets_it(
    pair: tuple[openai.OpenAI, openai.OpenAI], wire: WireTap
) -> None:
    """Not about the anchor: resent once in full, and that request's error is the caller's."""
    client, plain = pair
    history: list[Any] = [{"role": "user", "content": "one"}]
    first = client.responses.create(model="scripted", input=list(history))
    bad = [*history, *first.output, {"type": "function_call_output", "call_id": "call_nope", "output": "x"}]

    before = len(wire.bodies)
    with pytest.raises(openai.BadRequestError) as wrapped:
        client.responses.create(model="scripted", input=bad)
    with pytest.raises(openai.BadRequestError) as unwrapped:
        plain.responses.create(model="scripted", input=bad)

    assert 2 == len(wire.bodies) - before
    assert "previous_response_id" not in sent(wire)
    assert unwrapped.value.message == wrapped.value.message
    assert {} == anchortrack.tracker(client).stats.snapshot()["resends"]


# ---- the Chat Completions bridge: LiteLLM accepts previous_response_id and, without its
# ---- database, answers from the new items alone


def _messages(fake: FakeModel, mark: int) -> list[Any]:
    """The messages of the last request since *mark*: the one whose answer the caller got."""
    assert fake.requests[mark:]
    return list(fake.requests[-1]["messages"])


@pytest.mark.parametrize("form", FORMS)
def test_the_bridge_drops_the_chain_and_costs_no_response(
    proxies: dict[str, LiteLLM], fake: FakeModel, wire: WireTap, form: str
) -> None:
    client, plain = _clients(proxies["default"], wire)
    history: list[Any] = []
    chained = []
    for text in ["one", "two", "three"]:
        history.append({"role": "user", "content": text})
        mark = len(fake.requests)
        response = call(client, form, model=BRIDGED, input=list(history))
        chained.append("previous_response_id" in sent(wire))
        got = _messages(fake, mark)
        mark = len(fake.requests)
        plain.responses.create(model=BRIDGED, input=list(history))
        assert _messages(fake, mark) == got
        history += response.output
    assert [False, False, False] == chained  # what answered each call: no chain after the second's resend
    assert 1 == sum("previous_response_id" in json.loads(body) for body in wire.bodies)
    stats = anchortrack.tracker(client).stats.snapshot()
    assert (1, {"chain_dropped": 1}) == (stats["chains_dropped"], stats["resends"])


async def test_the_bridge_drops_the_chain_and_costs_no_response_async(
    proxies: dict[str, LiteLLM], fake: FakeModel, wire: WireTap
) -> None:
    proxy = proxies["default"]
    raw = openai.AsyncOpenAI(
        base_url=proxy.base_url, api_key=MASTER_KEY, max_retries=0, http_client=wire.async_http_client()
    )
    client = anchortrack.wrap(raw, store=MemoryStore())
    history: list[Any] = []
    for text in ["one", "two", "three"]:
        history.append({"role": "user", "content": text})
        response = await acall(client, "stream", model=BRIDGED, input=list(history))
        assert len(history) == len(fake.requests[-1]["messages"])
        history += response.output
    await raw.close()
    assert 1 == anchortrack.tracker(client).stats.snapshot()["chains_dropped"]
