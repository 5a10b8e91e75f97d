"""End to end: every tracked surface — streams, stream(), parse(), raw forms — sync and async."""

from __future__ import annotations

from typing import Any

import openai

import anchortrack
from anchortrack.server import ResponsesServer, WireTap

from ..helpers import assert_server_saw, sent


def _first_turn(client: openai.OpenAI) -> tuple[list[Any], str]:
    history: list[Any] = [{"role": "user", "content": "first"}]
    resp = client.responses.create(model="scripted", input=history)
    history += [*resp.output, {"role": "user", "content": "second"}]
    return history, resp.id


async def _afirst_turn(client: openai.AsyncOpenAI) -> tuple[list[Any], str]:
    history: list[Any] = [{"role": "user", "content": "first"}]
    resp = await client.responses.create(model="scripted", input=history)
    history += [*resp.output, {"role": "user", "content": "second"}]
    return history, resp.id


def test_stream_true_chains_and_records_at_completion(
    server: ResponsesServer, client: openai.OpenAI, wire: WireTap
) -> None:
    """create(stream=True) is chained, keeps the Stream contract, and its response becomes an anchor."""
    history, first = _first_turn(client)

    stream = client.responses.create(model="scripted", input=history, stream=True)
    assert isinstance(stream, openai.Stream)
    events = list(stream)
    final = events[-1].response

    assert "response.completed" == events[-1].type
    assert first == sent(wire)["previous_response_id"]
    assert_server_saw(server, final.id, history)
    history += [*final.output, {"role": "user", "content": "third"}]
    client.responses.create(model="scripted", input=history)
    assert final.id == sent(wire)["previous_response_id"]


def test_stream_manager_and_final_response(
    server: ResponsesServer, client: openai.OpenAI, wire: WireTap
) -> None:
    """responses.stream() + get_final_response() chains and records."""
    history, first = _first_turn(client)

    with client.responses.stream(model="scripted", input=history) as stream:
        final = stream.get_final_response()

    assert first == sent(wire)["previous_response_id"]
    assert_server_saw(server, final.id, history)
    history += [*final.output, {"role": "user", "content": "third"}]
    with client.responses.stream(model="scripted", input=history) as stream:
        for _ in stream:
            pass
    assert final.id == sent(wire)["previous_response_id"]


def test_parse_chains_and_records(server: ResponsesServer, client: openai.OpenAI, wire: WireTap) -> None:
    """responses.parse() goes through the same tracking."""
    history, first = _first_turn(client)

    parsed = client.responses.parse(model="scripted", input=history)
    history += [*parsed.output, {"role": "user", "content": "third"}]
    after = client.responses.parse(model="scripted", input=history)

    assert first == sent(wire, -2)["previous_response_id"]
    assert parsed.id == sent(wire)["previous_response_id"]
    assert_server_saw(server, after.id, history)


def test_raw_response_forms(server: ResponsesServer, client: openai.OpenAI, wire: WireTap) -> None:
    """with_raw_response.create/parse and with_streaming_response.create are tracked."""
    history, first = _first_turn(client)

    raw = client.responses.with_raw_response.create(model="scripted", input=history)
    resp = raw.parse()
    assert first == sent(wire)["previous_response_id"]
    history += [*resp.output, {"role": "user", "content": "third"}]

    raw_parsed = client.responses.with_raw_response.parse(model="scripted", input=history)
    parsed = raw_parsed.parse()
    assert resp.id == sent(wire)["previous_response_id"]
    history += [*parsed.output, {"role": "user", "content": "fourth"}]

    with client.responses.with_streaming_response.create(model="scripted", input=history) as streaming:
        streamed = streaming.parse()
    assert parsed.id == sent(wire)["previous_response_id"]
    history += [*streamed.output, {"role": "user", "content": "fifth"}]

    raw_stream = client.responses.with_raw_response.create(model="scripted", input=history, stream=True)
    events = list(raw_stream.parse())
    assert streamed.id == sent(wire)["previous_response_id"]
    final = events[-1].response
    assert_server_saw(server, final.id, history)
    history += [*final.output, {"role": "user", "content": "sixth"}]
    client.responses.create(model="scripted", input=history)
    assert final.id == sent(wire)["previous_response_id"]


async def test_async_stream_true(server: ResponsesServer, aclient: openai.AsyncOpenAI, wire: WireTap) -> None:
    """Async create(stream=True) chains and records."""
    history, first = await _afirst_turn(aclient)

    stream = await aclient.responses.create(model="scripted", input=history, stream=True)
    assert isinstance(stream, openai.AsyncStream)
    events = [event async for event in stream]
    final = events[-1].response

    assert first == sent(wire)["previous_response_id"]
    assert_server_saw(server, final.id, history)
    history += [*final.output, {"role": "user", "content": "third"}]
    await aclient.responses.create(model="scripted", input=history)
    assert final.id == sent(wire)["previous_response_id"]


async def test_async_stream_manager_parse_and_raw(
    server: ResponsesServer, aclient: openai.AsyncOpenAI, wire: WireTap
) -> None:
    """Async responses.stream(), parse(), with_raw_response and with_streaming_response are tracked."""
    history, first = await _afirst_turn(aclient)

    async with aclient.responses.stream(model="scripted", input=history) as stream:
        final = await stream.get_final_response()
    assert first == sent(wire)["previous_response_id"]
    history += [*final.output, {"role": "user", "content": "3"}]

    parsed = await aclient.responses.parse(model="scripted", input=history)
    assert final.id == sent(wire)["previous_response_id"]
    history += [*parsed.output, {"role": "user", "content": "4"}]

    raw = await aclient.responses.with_raw_response.create(model="scripted", input=history)
    resp = raw.parse()
    assert parsed.id == sent(wire)["previous_response_id"]
    history += [*resp.output, {"role": "user", "content": "5"}]

    async with aclient.responses.with_streaming_response.create(model="scripted", input=history) as streaming:
        streamed = await streaming.parse()
    assert resp.id == sent(wire)["previous_response_id"]
    history += [*streamed.output, {"role": "user", "content": "6"}]

    last = await aclient.responses.create(model="scripted", input=history)
    assert streamed.id == sent(wire)["previous_response_id"]
    assert_server_saw(server, last.id, history)


def test_other_resources_pass_through(server: ResponsesServer, client: openai.OpenAI) -> None:
    """retrieve, input_items and delete reach the server unchanged."""
    resp = client.responses.create(model="scripted", input="hello")

    assert resp.id == client.responses.retrieve(resp.id).id
    items = client.responses.input_items.list(resp.id)
    assert 1 == len(items.data)
    client.responses.delete(resp.id)
    assert 0 == anchortrack.tracker(client).stats.count("chained")
