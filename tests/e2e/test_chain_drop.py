"""
A server that accepts ``previous_response_id`` and ignores it: the local server with its
``ignore_previous_response_id`` switch, announcing nothing (a server anchortrack does not know).
The first chained response shows it (no ``previous_response_id`` echoed): the call is resent in full
before the caller sees anything, chaining stops for that server in the scope, one warning, one count.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import openai
import pytest
from structlog.testing import capture_logs

import anchortrack
from anchortrack.server import ResponsesServer, WireTap
from anchortrack.stores import MemoryStore

from ..helpers import assert_server_saw, sent


FORMS = ["create", "stream", "manager"]


@pytest.fixture(scope="module", name="unknown")
def _unknown() -> Iterator[ResponsesServer]:
    """A server anchortrack does not know (no announcement); it chains until a test says otherwise."""
    with ResponsesServer() as srv:
        srv.state.announce_per_request = False
        yield srv


@pytest.fixture(name="dropping")
def _dropping(unknown: ResponsesServer) -> Iterator[ResponsesServer]:
    unknown.state.ignore_previous_response_id = True
    yield unknown
    unknown.state.ignore_previous_response_id = False


@pytest.fixture(name="dclient")
def _dclient(unknown: ResponsesServer, wire: WireTap) -> Iterator[openai.OpenAI]:
    client = openai.OpenAI(
        base_url=unknown.base_url, api_key="test", max_retries=0, http_client=wire.http_client()
    )
    yield anchortrack.wrap(client, store=MemoryStore())
    client.close()


@pytest.fixture(name="adclient")
async def _adclient(unknown: ResponsesServer, wire: WireTap) -> AsyncIterator[openai.AsyncOpenAI]:
    client = openai.AsyncOpenAI(
        base_url=unknown.base_url, api_key="test", max_retries=0, http_client=wire.async_http_client()
    )
    yield anchortrack.wrap(client, store=MemoryStore())
    await client.close()


def call(client: openai.OpenAI, form: str, **params: Any) -> tuple[Any, list[str]]:
    """One call in *form*: the final response, and the event types the caller saw."""
    if form == "create":
        return client.responses.create(**params), []
    if form == "stream":
        events = list(client.responses.create(stream=True, **params))
        return events[-1].response, [event.type for event in events]
    with client.responses.stream(**params) as stream:
        seen = [event.type for event in stream]
        return stream.get_final_response(), seen


async def acall(client: openai.AsyncOpenAI, form: str, **params: Any) -> tuple[Any, list[str]]:
    """The async twin of `call`."""
    if form == "create":
        return await client.responses.create(**params), []
    if form == "stream":
        events = [event async for event in await client.responses.create(stream=True, **params)]
        return events[-1].response, [event.type for event in events]
    async with client.responses.stream(**params) as stream:
        seen = [event.type async for event in stream]
        return await stream.get_final_response(), seen


def _check_caught(
    server: ResponsesServer, client: Any, wire: WireTap, history: list[Any], second: Any, seen: list[str]
) -> None:
    """The second call chained, was caught, and the caller got the full request's answer only."""
    assert "previous_response_id" in sent(wire, -2)
    assert "previous_response_id" not in sent(wire)
    assert_server_saw(server, second.id, history)  # the response handed over saw the whole history
    assert seen.count("response.created") <= 1  # the caller saw one stream: the resend's
    stats = anchortrack.tracker(client).stats.snapshot()
    assert 1 == stats["chains_dropped"]
    assert {"chain_dropped": 1} == stats["resends"]


@pytest.mark.parametrize("form", FORMS)
def test_a_server_that_ignores_the_chain_costs_no_response(
    dropping: ResponsesServer, dclient: openai.OpenAI, wire: WireTap, form: str
) -> None:
    history: list[Any] = [{"role": "user", "content": "one"}]
    first, _ = call(dclient, "create", model="scripted", input=list(history))
    history += [*first.output, {"role": "user", "content": "two"}]

    with capture_logs() as logs:
        second, seen = call(dclient, form, model="scripted", input=list(history))

    _check_caught(dropping, dclient, wire, history, second, seen)
    [warning] = [log for log in logs if log["event"] == "anchortrack.chain_dropped"]
    assert dropping.base_url == warning["base_url"]
    assert "names no previous_response_id" in warning["seen"]

    history += [*second.output, {"role": "user", "content": "three"}]
    before = len(wire.bodies)
    with capture_logs() as logs:
        third, _ = call(dclient, form, model="scripted", input=list(history))
    assert 1 == len(wire.bodies) - before
    assert "previous_response_id" not in sent(wire)  # chaining stopped for this server in this scope
    assert_server_saw(dropping, third.id, history)
    assert not [log for log in logs if log["event"] == "anchortrack.chain_dropped"]  # warned once
    assert 1 == anchortrack.tracker(dclient).stats.count("stateless", "chain_dropped")


@pytest.mark.parametrize("form", FORMS)
async def test_a_server_that_ignores_the_chain_costs_no_response_async(
    dropping: ResponsesServer, adclient: openai.AsyncOpenAI, wire: WireTap, form: str
) -> None:
    history: list[Any] = [{"role": "user", "content": "one"}]
    first, _ = await acall(adclient, "create", model="scripted", input=list(history))
    history += [*first.output, {"role": "user", "content": "two"}]

    second, seen = await acall(adclient, form, model="scripted", input=list(history))

    _check_caught(dropping, adclient, wire, history, second, seen)


@pytest.mark.parametrize("form", FORMS)
def test_a_server_that_applies_the_chain_keeps_chaining(
    unknown: ResponsesServer, dclient: openai.OpenAI, wire: WireTap, form: str
) -> None:
    """No false alarm: an unknown server that echoes the chain and reads a larger context is trusted."""
    history: list[Any] = []
    for text in ["one", "two", "three"]:
        history.append({"role": "user", "content": text})
        response, _ = call(dclient, form, model="scripted", input=list(history))
        assert_server_saw(unknown, response.id, history)
        history += response.output
    assert "previous_response_id" in sent(wire)
    stats = anchortrack.tracker(dclient).stats.snapshot()
    assert (0, {}) == (stats["chains_dropped"], stats["resends"])
