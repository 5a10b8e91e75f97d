"""End to end: which responses become anchors, and when."""

from __future__ import annotations

from typing import Any

import openai

import anchortrack
from anchortrack.server import ResponsesServer, WireTap
from anchortrack.stores import MemoryStore

from ..helpers import assert_server_saw, scope_of, sent


def _next(history: list[Any], resp: Any, text: str) -> list[Any]:
    return [*history, *resp.output, {"role": "user", "content": text}]


def test_store_false_responses_are_never_anchors(client: openai.OpenAI, wire: WireTap) -> None:
    """I3: a store=false response is not recorded; the next call goes out in full."""
    history: list[Any] = [{"role": "user", "content": "one"}]
    resp = client.responses.create(model="scripted", input=history, store=False)

    client.responses.create(model="scripted", input=_next(history, resp, "two"))

    assert "previous_response_id" not in sent(wire)
    assert {"store_false": 1} == anchortrack.tracker(client).stats.snapshot()["not_recorded"]


def test_store_false_request_may_chain_from_a_stored_anchor(
    server: ResponsesServer, client: openai.OpenAI, wire: WireTap
) -> None:
    """A store=false request still chains from a stored anchor (only it is not recorded)."""
    history: list[Any] = [{"role": "user", "content": "one"}]
    first = client.responses.create(model="scripted", input=history)
    history = _next(history, first, "two")

    client.responses.create(model="scripted", input=history, store=False)

    assert first.id == sent(wire)["previous_response_id"]


def test_failed_responses_are_never_anchors(client: openai.OpenAI, wire: WireTap) -> None:
    """I3: a failed response is not recorded; the next call chains from the last good one."""
    history: list[Any] = [{"role": "user", "content": "one"}]
    good = client.responses.create(model="scripted", input=history)
    history = _next(history, good, "two\n!fail")
    failed = client.responses.create(model="scripted", input=history)
    assert "failed" == failed.status

    client.responses.create(model="scripted", input=_next(history, failed, "three"))

    assert good.id == sent(wire)["previous_response_id"]


def test_incomplete_is_an_option(raw_client: openai.OpenAI, wire: WireTap) -> None:
    """incomplete responses are not anchors by default, and are with record_incomplete=True."""
    for record, expect_chain in ((False, False), (True, True)):
        client = anchortrack.wrap(raw_client, store=MemoryStore(), record_incomplete=record)
        history: list[Any] = [{"role": "user", "content": "long\n!incomplete"}]
        resp = client.responses.create(model="scripted", input=history)
        assert "incomplete" == resp.status

        client.responses.create(model="scripted", input=_next(history, resp, "go on"))

        assert expect_chain == ("previous_response_id" in sent(wire))


def test_streamed_response_is_recorded_at_its_terminal_event_only(
    client: openai.OpenAI, store: MemoryStore, wire: WireTap
) -> None:
    """Nothing is in the store at response.created; the anchor appears with response.completed."""
    key = scope_of(client).key
    history: list[Any] = [{"role": "user", "content": "stream me"}]
    stream = client.responses.create(model="scripted", input=history, stream=True)
    seen = []
    for event in stream:
        seen.append(event.type)
        if event.type == "response.created":
            assert 0 == anchortrack.tracker(client).stats.recorded
            assert None is store.get(key, event.response.id)
        final = event
    assert 1 == anchortrack.tracker(client).stats.recorded
    assert "response.created" == seen[0]
    anchor = store.get(key, final.response.id)
    assert anchor is not None
    assert (final.response.id, len(history) + len(final.response.output)) == (
        anchor.response_id,
        anchor.count,
    )

    client.responses.create(model="scripted", input=_next(history, final.response, "next"))
    assert final.response.id == sent(wire)["previous_response_id"]


def test_abandoned_stream_records_nothing(client: openai.OpenAI, wire: WireTap) -> None:
    """A stream closed before its terminal event never becomes an anchor."""
    history: list[Any] = [{"role": "user", "content": "one"}]
    stream = client.responses.create(model="scripted", input=history, stream=True)
    first_event = next(iter(stream))
    stream.close()
    assert "response.created" == first_event.type
    resp_id = first_event.response.id

    assert 0 == anchortrack.tracker(client).stats.recorded
    history = [*history, {"role": "assistant", "content": "made up"}, {"role": "user", "content": "two"}]
    client.responses.create(model="scripted", input=history)
    assert "previous_response_id" not in sent(wire)
    assert resp_id


def test_failed_stream_records_nothing(client: openai.OpenAI, wire: WireTap) -> None:
    """A stream ending in response.failed is not recorded."""
    history: list[Any] = [{"role": "user", "content": "one\n!fail"}]
    events = list(client.responses.create(model="scripted", input=history, stream=True))
    assert "response.failed" == events[-1].type
    assert 0 == anchortrack.tracker(client).stats.recorded
    assert {"not_completed": 1} == anchortrack.tracker(client).stats.snapshot()["not_recorded"]

    client.responses.create(model="scripted", input=_next(history, events[-1].response, "two"))

    assert "previous_response_id" not in sent(wire)


def test_hand_chained_calls_mix_with_automatic_ones(
    server: ResponsesServer, client: openai.OpenAI, wire: WireTap
) -> None:
    """Caller-managed previous_response_id is sent as given, and its child becomes an anchor."""
    history: list[Any] = [{"role": "user", "content": "one"}]
    first = client.responses.create(model="scripted", input=history)
    manual_input = [{"role": "user", "content": "two"}]
    manual = client.responses.create(model="scripted", input=manual_input, previous_response_id=first.id)
    assert {"model": "scripted", "input": manual_input, "previous_response_id": first.id} == sent(wire)

    history = [*history, *first.output, *manual_input, *manual.output, {"role": "user", "content": "three"}]
    auto = client.responses.create(model="scripted", input=history)

    assert manual.id == sent(wire)["previous_response_id"]
    assert 1 == len(sent(wire)["input"])
    assert_server_saw(server, auto.id, history)
