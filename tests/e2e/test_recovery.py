"""End to end: the server forgets an anchor, or refuses chaining; anchortrack recovers, once."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from structlog.testing import capture_logs

import anchortrack
import anchortrack._flow
from anchortrack.server import ResponsesServer, WireTap

from ..helpers import assert_server_saw, canon, scope_of, sent, user


@pytest.fixture(name="zdr")
def _zdr(server: ResponsesServer) -> Iterator[None]:
    server.state.zdr = True
    yield
    server.state.zdr = False


def _two_turns(client: openai.OpenAI) -> tuple[list[Any], str]:
    history: list[Any] = [{"role": "user", "content": "one"}]
    resp = client.responses.create(model="scripted", input=history)
    return [*history, *resp.output, {"role": "user", "content": "two"}], resp.id


@pytest.mark.parametrize("stream", [False, True])
def test_a_delta_naming_an_item_the_anchor_holds_is_resent_in_full_and_the_anchor_kept(
    server: ResponsesServer, client: openai.OpenAI, wire: WireTap, stream: bool
) -> None:
    """400 Duplicate item on the chained request → one full resend; the anchor stays; the next call chains."""
    history: list[Any] = [{"role": "user", "content": "one"}]
    first = client.responses.create(model="scripted", input=history)
    [message] = [item for item in first.output if item.type == "message"]
    # Middleware rewrote the answer without its id (the same value), then names it again by id.
    history = [
        *history,
        {"role": "assistant", "content": message.content[0].text},
        {"type": "item_reference", "id": message.id},
        {"role": "user", "content": "two"},
    ]
    before = len(wire.bodies)

    with capture_logs() as logs:
        if stream:
            resp = list(client.responses.create(model="scripted", input=history, stream=True))[-1].response
        else:
            resp = client.responses.create(model="scripted", input=history)

    assert 2 == len(wire.bodies) - before
    assert first.id == sent(wire, -2)["previous_response_id"]
    assert [{"type": "item_reference", "id": message.id}, user("two")] == sent(wire, -2)["input"]
    assert "previous_response_id" not in sent(wire)
    assert history == sent(wire)["input"]
    assert canon(server.state.resolve_input(history)) == canon(server.state.resolved_context(resp.id))
    refused = [e for e in logs if e["event"] == "anchortrack.anchor_refused"]
    resent = [e for e in logs if e["event"] == "anchortrack.request_resent"]
    assert [("duplicate_item", first.id)] == [(e["reason"], e["anchor_id"]) for e in refused]
    assert [("resent", "duplicate_item", first.id)] == [
        (e["decision"], e["reason"], e["anchor_id"]) for e in resent
    ]
    tracker = anchortrack.tracker(client)
    assert {"duplicate_item": 1} == tracker.stats.snapshot()["resends"]
    assert tracker.store.get(scope_of(client).key, first.id) is not None  # not evicted
    client.responses.create(model="scripted", input=[*history, *resp.output, user("three")])
    assert resp.id == sent(wire)["previous_response_id"]


@pytest.mark.parametrize("forget", ["drop", "expire"])
@pytest.mark.parametrize("stream", [False, True])
def test_stale_anchor_is_evicted_and_resent_in_full(
    server: ResponsesServer, client: openai.OpenAI, wire: WireTap, forget: str, stream: bool
) -> None:
    """previous_response_not_found → one stateless resend, no error for the caller, anchor evicted."""
    history, anchor_id = _two_turns(client)
    getattr(server.state, forget)(anchor_id)
    before = len(wire.bodies)

    if stream:
        events = list(client.responses.create(model="scripted", input=history, stream=True))
        resp = events[-1].response
    else:
        resp = client.responses.create(model="scripted", input=history)

    assert 2 == len(wire.bodies) - before
    assert anchor_id == sent(wire, -2)["previous_response_id"]
    assert "previous_response_id" not in sent(wire)
    assert_server_saw(server, resp.id, history)
    tracker = anchortrack.tracker(client)
    assert tracker.store.get(scope_of(client).key, anchor_id) is None
    assert {"stale_anchor": 1} == tracker.stats.snapshot()["resends"]
    client.responses.create(
        model="scripted", input=[*history, *resp.output, {"role": "user", "content": "3"}]
    )
    assert resp.id == sent(wire)["previous_response_id"]


def test_stale_anchor_with_stream_manager(
    server: ResponsesServer, client: openai.OpenAI, wire: WireTap
) -> None:
    """responses.stream() recovers before any event is yielded."""
    history, anchor_id = _two_turns(client)
    server.state.drop(anchor_id)

    with client.responses.stream(model="scripted", input=history) as stream:
        final = stream.get_final_response()

    assert "previous_response_id" not in sent(wire)
    assert_server_saw(server, final.id, history)


async def test_async_stale_anchor(
    server: ResponsesServer, aclient: openai.AsyncOpenAI, wire: WireTap
) -> None:
    """The async twin recovers the same way, streamed or not."""
    history: list[Any] = [{"role": "user", "content": "one"}]
    first = await aclient.responses.create(model="scripted", input=history)
    history = [*history, *first.output, {"role": "user", "content": "two"}]
    server.state.expire(first.id)

    resp = await aclient.responses.create(model="scripted", input=history)
    assert first.id == sent(wire, -2)["previous_response_id"]
    assert "previous_response_id" not in sent(wire)
    assert_server_saw(server, resp.id, history)

    history = [*history, *resp.output, {"role": "user", "content": "three"}]
    server.state.drop(resp.id)
    stream = await aclient.responses.create(model="scripted", input=history, stream=True)
    events = [event async for event in stream]
    assert "previous_response_id" not in sent(wire)
    assert_server_saw(server, events[-1].response.id, history)


@pytest.mark.usefixtures("zdr")
def test_zdr_refusal_stops_chaining_in_that_scope(client: openai.OpenAI, wire: WireTap) -> None:
    """unsupported_parameter on previous_response_id: resend in full, then stop chaining."""
    history: list[Any] = [{"role": "user", "content": "one"}]
    first = client.responses.create(model="scripted", input=history)
    history = [*history, *first.output, {"role": "user", "content": "two"}]
    second = client.responses.create(model="scripted", input=history)
    assert "previous_response_id" in sent(wire, -2)
    assert "previous_response_id" not in sent(wire)
    before = len(wire.bodies)

    client.responses.create(
        model="scripted", input=[*history, *second.output, {"role": "user", "content": "3"}]
    )

    assert 1 == len(wire.bodies) - before
    assert "previous_response_id" not in sent(wire)
    assert 1 == anchortrack.tracker(client).stats.count("stateless", "zdr")


def test_other_client_errors_reach_the_caller_as_the_full_request_gets_them(
    raw_client: openai.OpenAI, client: openai.OpenAI, wire: WireTap
) -> None:
    """
    A 400 that is not about the anchor: the chained request is resent once in full, and that
    request's error is raised, as the unwrapped client gets it; the anchor stays.
    """
    history, _ = _two_turns(client)
    bad = [*history, {"type": "function_call_output", "call_id": "call_nope", "output": "x"}]
    before = len(wire.bodies)

    with pytest.raises(openai.BadRequestError) as wrapped_error:
        client.responses.create(model="scripted", input=bad)
    assert 2 == len(wire.bodies) - before
    assert "previous_response_id" in sent(wire, -2)
    assert "previous_response_id" not in sent(wire)
    assert {} == anchortrack.tracker(client).stats.snapshot()["resends"]
    with pytest.raises(openai.BadRequestError) as raw_error:
        raw_client.responses.create(model="scripted", input=bad)

    assert raw_error.value.code == wrapped_error.value.code
    assert raw_error.value.param == wrapped_error.value.param == "input"


def test_caller_managed_errors_are_not_retried(client: openai.OpenAI, wire: WireTap) -> None:
    """A caller's own stale previous_response_id gets the server's error, unchanged."""
    before = len(wire.bodies)
    with pytest.raises(openai.BadRequestError) as error:
        client.responses.create(model="scripted", input="hi", previous_response_id="resp_unknown")

    assert "previous_response_not_found" == error.value.code
    assert 1 == len(wire.bodies) - before


def test_a_fault_inside_anchortrack_degrades_to_the_callers_own_request(
    server: ResponsesServer, client: openai.OpenAI, wire: WireTap, monkeypatch: pytest.MonkeyPatch
) -> None:
    """I4: a bug in planning sends the call exactly as given, with one warning, never an error."""
    history, _ = _two_turns(client)
    tracker = anchortrack.tracker(client)

    def broken(items: object, *args: object, **kwargs: object) -> object:
        raise RuntimeError("planner bug")

    monkeypatch.setattr(anchortrack._flow, "fingerprint_history", broken)
    with capture_logs() as logs:
        resp = client.responses.create(model="scripted", input=history)

    assert "previous_response_id" not in sent(wire)
    assert_server_saw(server, resp.id, history)
    faults = [e for e in logs if e["event"] == "anchortrack.tracker_fault"]
    assert [
        {
            "event": "anchortrack.tracker_fault",
            "error": "RuntimeError",
            "fallback": "stateless",
            "log_level": "warning",
        }
    ] == faults
    assert 1 == tracker.stats.count(reason="internal_error")


def test_bad_input_gets_the_clients_own_clear_error(
    raw_client: openai.OpenAI, client: openai.OpenAI, wire: WireTap
) -> None:
    """An input that is no list of items fails exactly as it would unwrapped."""
    with pytest.raises(openai.BadRequestError) as raw_error:
        raw_client.responses.create(model="scripted", input=42)  # type: ignore[arg-type]
    with pytest.raises(openai.BadRequestError) as wrapped_error:
        client.responses.create(model="scripted", input=42)  # type: ignore[arg-type]

    assert raw_error.value.message == wrapped_error.value.message
    assert wire.bodies[0] == wire.bodies[1]
    wire.bodies.clear()  # the caller's own invalid bodies are not the wrapper's to validate


# -- refusals inside a stream (llama-stack's shape) ------------------------------


@pytest.fixture(name="stale_in_stream")
def _stale_in_stream(server: ResponsesServer) -> Iterator[None]:
    server.state.stale_in_stream = True
    yield
    server.state.stale_in_stream = False


def _assert_recovered_once(server: ResponsesServer, client: Any, wire: WireTap, before: int, anchor_id: str,
                           history: list[Any], final: Any) -> None:  # fmt: skip
    assert 2 == len(wire.bodies) - before
    assert anchor_id == sent(wire, -2)["previous_response_id"]
    assert "previous_response_id" not in sent(wire)
    assert_server_saw(server, final.id, history)
    tracker = anchortrack.tracker(client)
    assert {"stale_anchor": 1} == tracker.stats.snapshot()["resends"]
    assert {} == tracker.stats.snapshot()["not_recorded"]  # the refused stream counts nowhere
    assert tracker.store.get(scope_of(client).key, anchor_id) is None
    assert tracker.store.get(scope_of(client).key, final.id) is not None


@pytest.mark.usefixtures("stale_in_stream")
@pytest.mark.parametrize("form", ["create", "manager"])
def test_stale_anchor_refused_inside_the_stream_is_recovered(
    server: ResponsesServer, client: openai.OpenAI, wire: WireTap, form: str
) -> None:
    """HTTP 200, then a first event {"error": …} naming the anchor: evicted, resent; the caller sees none."""
    history, anchor_id = _two_turns(client)
    server.state.drop(anchor_id)
    before = len(wire.bodies)

    if form == "create":
        events = list(client.responses.create(model="scripted", input=history, stream=True))
        assert "response.created" == events[0].type
        final = events[-1].response
    else:
        with client.responses.stream(model="scripted", input=history) as stream:
            final = stream.get_final_response()

    _assert_recovered_once(server, client, wire, before, anchor_id, history, final)
    client.responses.create(model="scripted", input=[*history, *final.output, user("3")])
    assert final.id == sent(wire)["previous_response_id"]


@pytest.mark.usefixtures("stale_in_stream")
@pytest.mark.parametrize("form", ["create", "manager"])
async def test_stale_anchor_refused_inside_the_stream_is_recovered_async(
    server: ResponsesServer, aclient: openai.AsyncOpenAI, wire: WireTap, form: str
) -> None:
    """The async twins recover from an in-stream refusal the same way."""
    history: list[Any] = [user("one")]
    first = await aclient.responses.create(model="scripted", input=history)
    history = [*history, *first.output, user("two")]
    server.state.drop(first.id)
    before = len(wire.bodies)

    if form == "create":
        events = [
            e async for e in await aclient.responses.create(model="scripted", input=history, stream=True)
        ]
        assert "response.created" == events[0].type
        final = events[-1].response
    else:
        async with aclient.responses.stream(model="scripted", input=history) as stream:
            final = await stream.get_final_response()

    _assert_recovered_once(server, aclient, wire, before, first.id, history, final)
    await aclient.responses.create(model="scripted", input=[*history, *final.output, user("3")])
    assert final.id == sent(wire)["previous_response_id"]


@pytest.mark.usefixtures("stale_in_stream")
def test_caller_managed_in_stream_refusals_reach_the_caller(client: openai.OpenAI, wire: WireTap) -> None:
    """A stream the caller chained itself is not peeked: its in-stream refusal is the caller's."""
    before = len(wire.bodies)

    with pytest.raises(openai.APIError) as caught:
        list(
            client.responses.create(
                model="scripted", input="x", previous_response_id="resp_gone", stream=True
            )
        )

    assert 1 == len(wire.bodies) - before
    assert "404" == caught.value.code


# -- one refused request per dead chain ------------------------------------------------


def test_a_server_restart_costs_one_refusal_per_chain(raw_client: openai.OpenAI, wire: WireTap) -> None:
    """
    A server that lost a whole chain refuses its first anchor; its descendants are evicted with it.

    Five turns are recorded (anchors r1 → r2 → … → r5), the server restarts
    with an empty store, and calls are made again from turns 2, 4 and 5: the
    first is refused (r1), which evicts r2 … r5 too, so the next calls chain
    from the resend's response instead of trying r3 and r4, one refusal each.
    """
    with ResponsesServer(store="memory") as first_life:
        port = first_life.port
        client = anchortrack.wrap(raw_client.with_options(base_url=first_life.base_url))
        tracker = anchortrack.tracker(client)
        histories = [[user("one")]]
        for n in range(5):
            reply = client.responses.create(model="scripted", input=histories[-1])
            histories.append([*histories[-1], *reply.output, user(f"turn {n}")])
    assert 4 == tracker.stats.count("chained")

    with ResponsesServer(store="memory", port=port) as second_life:
        before = len(wire.bodies)
        for history in (histories[1], histories[3], histories[4]):
            reply = client.responses.create(model="scripted", input=history)
            assert_server_saw(second_life, reply.id, history)

    assert {"stale_anchor": 1} == tracker.stats.snapshot()["resends"]
    bodies = [json.loads(body) for body in wire.bodies[before:]]
    assert [True, False, True, True] == ["previous_response_id" in body for body in bodies]
