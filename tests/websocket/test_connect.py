"""A plain openai client reaches the server's WebSocket mode: chaining, tools, warm-up, parity with HTTP."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from anchortrack.server import ResponsesServer

from .helpers import (
    Hooks,
    acollect,
    assert_server_saw,
    collect,
    function_calls,
    needs_http_websocket_base_url,
    needs_lanes,
    needs_warm_up,
    output_items,
    user,
    wait_until,
)


# -- how the SDK finds the socket -------------------------------------------------


@pytest.mark.parametrize(
    ("base_url", "websocket_base_url", "expected"),
    [
        ("http://127.0.0.1:8123/v1", None, "ws://127.0.0.1:8123/v1/responses"),
        ("http://127.0.0.1:8123/v1/", None, "ws://127.0.0.1:8123/v1/responses"),
        ("https://api.example.test/v1", None, "wss://api.example.test/v1/responses"),
        ("http://ignored.test/v1", "ws://127.0.0.1:9/other/", "ws://127.0.0.1:9/other/responses"),
        ("http://ignored.test/v1", "https://gw.example.test/v1", "https://gw.example.test/v1/responses"),
    ],
)
def test_websocket_url_is_base_url_with_ws_scheme_plus_responses(
    base_url: str, websocket_base_url: str | None, expected: str
) -> None:
    client = openai.OpenAI(base_url=base_url, websocket_base_url=websocket_base_url, api_key="k")
    # The manager's URL before connecting; http(s) is mapped to ws(s) once more when connecting.
    assert str(client.responses.connect()._prepare_url()) == expected


@pytest.mark.parametrize("scheme", ["ws", pytest.param("http", marks=needs_http_websocket_base_url)])
def test_websocket_base_url_alone_decides_where_the_socket_goes(
    ws_server: ResponsesServer, scheme: str
) -> None:
    websocket_base_url = scheme + ws_server.base_url.removeprefix("http")
    client = openai.OpenAI(
        base_url="http://127.0.0.1:9/nowhere/v1", websocket_base_url=websocket_base_url, api_key="k"
    )
    with client.responses.connect() as conn:
        conn.response.create(model="scripted", input="hello", store=False)
        turn = collect(conn)
    assert turn.response.output_text.startswith("echo: hello")


# -- chaining on one socket ----------------------------------------------------------


@pytest.mark.parametrize("store", [False, True])
def test_store_false_or_true_chains_on_the_same_socket_with_only_new_items(
    ws_client: openai.OpenAI, ws_server: ResponsesServer, store: bool
) -> None:
    history: list[Any] = []
    previous: str | None = None
    with ws_client.responses.connect() as conn:
        for text in ["first", "second", "third", "fourth"]:
            history.append(user(text))
            extra = {"previous_response_id": previous} if previous else {}
            conn.response.create(model="scripted", input=[user(text)], store=store, **extra)
            turn = collect(conn)
            response = turn.response
            assert response.status == "completed"
            assert response.previous_response_id == previous
            assert f"[items:{len(history)}]" in response.output_text
            assert_server_saw(ws_server, response.id, history)
            history.extend(output_items(response))
            previous = response.id


async def test_async_store_false_chains_on_the_same_socket(
    ws_aclient: openai.AsyncOpenAI, ws_server: ResponsesServer
) -> None:
    history: list[Any] = []
    previous: str | None = None
    async with ws_aclient.responses.connect() as conn:
        for text in ["one", "two", "three"]:
            history.append(user(text))
            extra = {"previous_response_id": previous} if previous else {}
            await conn.response.create(model="scripted", input=[user(text)], store=False, **extra)
            response = (await acollect(conn)).response
            assert_server_saw(ws_server, response.id, history)
            history.extend(output_items(response))
            previous = response.id


def test_tool_loop_chains_with_only_the_tool_outputs(
    ws_client: openai.OpenAI, ws_server: ResponsesServer
) -> None:
    ask = user('look it up\n!call lookup {"q": 1}\n!rounds 3')
    history: list[Any] = [ask]
    with ws_client.responses.connect() as conn:
        conn.response.create(model="scripted", input=[ask], store=False)
        response = collect(conn).response
        rounds = 0
        while calls := function_calls(response):
            rounds += 1
            history.extend(output_items(response))
            outputs = [
                {"type": "function_call_output", "call_id": call.call_id, "output": f"result {rounds}"}
                for call in calls
            ]
            history.extend(outputs)
            conn.response.create(
                model="scripted", input=outputs, previous_response_id=response.id, store=False
            )
            response = collect(conn).response
            assert_server_saw(ws_server, response.id, history)
    assert rounds == 3
    assert response.output_text.startswith("tool results: result 1 | result 2 | result 3")


def test_the_socket_sends_the_same_events_as_an_http_stream(
    ws_client: openai.OpenAI, ws_server: ResponsesServer
) -> None:
    ask = user('hi there\n!call f {"a": "bcdefghijklmnop"}\n!reason')
    http_events = list(ws_client.responses.create(model="scripted", input=[ask], stream=True))
    with ws_client.responses.connect() as conn:
        conn.response.create(model="scripted", input=[ask])
        socket_events = collect(conn).events

    def keys(event: Any) -> list[str]:
        return sorted(json.loads(event.to_json()))

    assert [e.type for e in socket_events] == [e.type for e in http_events]
    assert [e.sequence_number for e in socket_events] == list(range(len(http_events)))
    assert [keys(e) for e in socket_events] == [keys(e) for e in http_events]
    assert socket_events[-1].response.output_text == http_events[-1].response.output_text
    # The same model, the same context: the same reply, item for item (ids aside).
    assert [i.type for i in socket_events[-1].response.output] == [
        i.type for i in http_events[-1].response.output
    ]


# -- warm-up -------------------------------------------------------------------------


@needs_warm_up
@pytest.mark.parametrize("store", [False, True])
def test_warm_up_returns_a_chainable_id_without_output(
    ws_client: openai.OpenAI, ws_server: ResponsesServer, store: bool
) -> None:
    system = {"type": "message", "role": "developer", "content": "be brief"}
    with ws_client.responses.connect() as conn:
        conn.response.create(model="scripted", input=[system], store=store, generate=False)
        warm = collect(conn)
        assert warm.types == ["response.created", "response.in_progress", "response.completed"]
        assert warm.response.status == "completed"
        assert warm.response.output == []
        conn.response.create(
            model="scripted", input=[user("go")], store=store, previous_response_id=warm.response.id
        )
        response = collect(conn).response
    assert "[items:2]" in response.output_text
    assert_server_saw(ws_server, response.id, [system, user("go")])


@needs_warm_up
@needs_lanes
async def test_async_warm_up_on_a_named_lane(
    ws_aclient: openai.AsyncOpenAI, ws_server: ResponsesServer
) -> None:
    async with ws_aclient.responses.connect() as conn:
        await conn.response.create(
            model="scripted", input="!fail", store=False, generate=False, stream_id="warm"
        )
        warm = await acollect(conn)
        # The model never ran: a warm-up of a "!fail" message still completes.
        assert warm.response.status == "completed"
        assert {event.stream_id for event in warm.events} == {"warm"}
        await conn.response.create(
            model="scripted",
            input=[user("after")],
            store=False,
            previous_response_id=warm.response.id,
            stream_id="warm",
        )
        response = (await acollect(conn)).response
    assert_server_saw(ws_server, response.id, [user("!fail"), user("after")])


# -- hooks ---------------------------------------------------------------------------


@needs_lanes
def test_hooks_show_connections_cache_frames_and_resolved_context(
    ws_client: openai.OpenAI, ws_server: ResponsesServer, ws_hooks: Hooks
) -> None:
    before = {conn["id"] for conn in ws_hooks.connections()}
    with ws_client.responses.connect() as conn:
        conn.response.create(model="scripted", input="a", store=False)
        first = collect(conn).response
        conn.response.create(model="scripted", input="b", store=False, stream_id="side")
        side = collect(conn).response
        (mine,) = [c for c in ws_hooks.connections() if c["id"] not in before]
        assert {(c["stream_id"], c["response_id"]) for c in mine["cached"]} == {
            ("side", side.id),
            (None, first.id),
        }
        frames = [f for f in ws_hooks.received() if f["connection"] == mine["id"]]
        assert [f["event"]["input"] for f in frames] == ["a", "b"]
        assert frames[1]["event"]["stream_id"] == "side"
        assert all(f["bytes"] == len(json.dumps(f["event"])) for f in frames)
        assert ws_hooks.context(first.id) == [user("a")]
    wait_until(
        lambda: mine["id"] not in {c["id"] for c in ws_hooks.connections()}, "the server saw the close"
    )
