"""The connection-local cache: which anchors a socket accepts, the exact refusals, eviction, storage."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from anchortrack.server import ResponsesServer

from .helpers import (
    Hooks,
    acollect,
    assert_server_saw,
    collect,
    needs_lanes,
    not_found_frame,
    output_items,
    user,
)


def turn(conn: Any, text: str, **params: Any) -> Any:
    """Send one create with *text* and return its terminal response (fails on an error frame)."""
    conn.response.create(model="scripted", input=[user(text)], **params)
    return collect(conn).response


def refusal(conn: Any, text: str, **params: Any) -> dict[str, Any]:
    """Send one create that must be refused; return the error frame."""
    conn.response.create(model="scripted", input=[user(text)], **params)
    result = collect(conn)
    assert result.error is not None, result.types
    assert result.types == ["error"]
    return result.error


# -- store: false ----------------------------------------------------------------------


def test_an_older_store_false_response_of_the_same_socket_is_refused(ws_client: openai.OpenAI) -> None:
    with ws_client.responses.connect() as conn:
        first = turn(conn, "one", store=False)
        second = turn(conn, "two", store=False, previous_response_id=first.id)
        # Only the latest response of the lane is cached: a regenerate from `first` is refused ...
        assert refusal(conn, "two again", store=False, previous_response_id=first.id) == not_found_frame(
            first.id
        )
        # ... and that refusal referenced no cached response, so `second` is still usable.
        third = turn(conn, "three", store=False, previous_response_id=second.id)
        assert third.status == "completed"


def test_a_store_false_response_is_refused_on_another_socket(ws_client: openai.OpenAI) -> None:
    with ws_client.responses.connect() as one, ws_client.responses.connect() as two:
        first = turn(one, "hello", store=False)
        assert refusal(two, "elsewhere", store=False, previous_response_id=first.id) == not_found_frame(
            first.id
        )
        assert turn(one, "here", store=False, previous_response_id=first.id).status == "completed"


def test_a_store_false_response_is_refused_over_http(ws_client: openai.OpenAI) -> None:
    with ws_client.responses.connect() as conn:
        first = turn(conn, "hello", store=False)
        with pytest.raises(openai.BadRequestError) as caught:
            ws_client.responses.create(model="scripted", input="x", previous_response_id=first.id)
    assert caught.value.code == "previous_response_not_found"


def test_a_closed_socket_loses_its_cache(ws_client: openai.OpenAI) -> None:
    with ws_client.responses.connect() as conn:
        first = turn(conn, "hello", store=False)
    with ws_client.responses.connect() as conn:
        assert refusal(conn, "again", store=False, previous_response_id=first.id) == not_found_frame(first.id)


@needs_lanes
def test_the_error_frame_echoes_the_lane(ws_client: openai.OpenAI) -> None:
    with ws_client.responses.connect() as conn:
        frame = refusal(conn, "x", previous_response_id="resp_unknown", stream_id="lane-1")
    assert frame == not_found_frame("resp_unknown", stream_id="lane-1")


async def test_async_refusal_leaves_the_socket_usable(ws_aclient: openai.AsyncOpenAI) -> None:
    async with ws_aclient.responses.connect() as conn:
        await conn.response.create(model="scripted", input="a", store=False)
        first = (await acollect(conn)).response
        await conn.response.create(model="scripted", input="b", previous_response_id="resp_gone", store=False)
        assert (await acollect(conn)).error == not_found_frame("resp_gone")
        await conn.response.create(model="scripted", input="c", previous_response_id=first.id, store=False)
        assert (await acollect(conn)).response.status == "completed"


# -- eviction ------------------------------------------------------------------------------


def test_a_refused_request_evicts_the_cached_response_it_referenced(ws_client: openai.OpenAI) -> None:
    orphan = {"type": "function_call_output", "call_id": "call_nowhere", "output": "x"}
    with ws_client.responses.connect() as conn:
        first = turn(conn, "hello", store=False)
        conn.response.create(model="scripted", input=[orphan], store=False, previous_response_id=first.id)
        error = collect(conn).error
        assert error is not None
        assert error["error"]["param"] == "input"
        assert refusal(conn, "again", store=False, previous_response_id=first.id) == not_found_frame(first.id)


def test_a_failed_response_evicts_the_cached_response_it_referenced(ws_client: openai.OpenAI) -> None:
    with ws_client.responses.connect() as conn:
        first = turn(conn, "hello", store=False)
        failed = turn(conn, "!fail", store=False, previous_response_id=first.id)
        assert failed.status == "failed"
        assert refusal(conn, "again", store=False, previous_response_id=first.id) == not_found_frame(first.id)
        assert refusal(conn, "again", store=False, previous_response_id=failed.id) == not_found_frame(
            failed.id
        )


def test_an_evicted_stored_response_still_resolves_from_the_store(
    ws_client: openai.OpenAI, ws_server: ResponsesServer
) -> None:
    orphan = {"type": "function_call_output", "call_id": "call_nowhere", "output": "x"}
    with ws_client.responses.connect() as conn:
        first = turn(conn, "hello", store=True)
        conn.response.create(model="scripted", input=[orphan], previous_response_id=first.id)
        assert collect(conn).error is not None
        second = turn(conn, "again", previous_response_id=first.id)
    assert_server_saw(ws_server, second.id, [user("hello"), *output_items(first), user("again")])


def test_the_forget_hook_evicts_a_cached_response(ws_client: openai.OpenAI, ws_hooks: Hooks) -> None:
    with ws_client.responses.connect() as conn:
        first = turn(conn, "hello", store=False)
        assert ws_hooks.forget(first.id) == 200
        assert refusal(conn, "again", store=False, previous_response_id=first.id) == not_found_frame(first.id)
    assert ws_hooks.forget(first.id) == 404


# -- lanes ---------------------------------------------------------------------------------


@needs_lanes
def test_each_lane_keeps_its_latest_and_a_fork_reads_another_lanes(
    ws_client: openai.OpenAI, ws_server: ResponsesServer
) -> None:
    orphan = {"type": "function_call_output", "call_id": "call_nowhere", "output": "x"}
    with ws_client.responses.connect() as conn:
        main = turn(conn, "main", store=False, stream_id="main")
        side = turn(conn, "side", store=False, stream_id="side")
        # A fork: lane "fork" chains from lane "main"'s latest response.
        fork = turn(conn, "fork", store=False, stream_id="fork", previous_response_id=main.id)
        assert_server_saw(ws_server, fork.id, [user("main"), *output_items(main), user("fork")])
        # A failed fork does not evict the source lane's response.
        conn.response.create(
            model="scripted", input=[orphan], store=False, stream_id="fork2", previous_response_id=main.id
        )
        error = collect(conn).error
        assert error is not None
        assert error["stream_id"] == "fork2"
        assert turn(conn, "main 2", store=False, stream_id="main", previous_response_id=main.id).status == (
            "completed"
        )
        assert turn(conn, "side 2", store=False, stream_id="side", previous_response_id=side.id).status == (
            "completed"
        )


@needs_lanes
def test_lanes_answer_concurrently_and_each_in_order(ws_client: openai.OpenAI) -> None:
    with ws_client.responses.connect() as conn:
        conn.response.create(model="scripted", input="slow\n!sleep 300", store=False, stream_id="slow")
        conn.response.create(model="scripted", input="fast 1", store=False, stream_id="fast")
        conn.response.create(model="scripted", input="fast 2", store=False, stream_id="fast")
        terminals: list[Any] = []
        for event in conn:
            if event.type == "response.completed":
                terminals.append(event)
                if len(terminals) == 3:
                    break
    # The fast lane is not held up by the slow one; within a lane, requests keep their order.
    assert [(t.stream_id, t.response.output_text.split(" [")[0]) for t in terminals] == [
        ("fast", "echo: fast 1"),
        ("fast", "echo: fast 2"),
        ("slow", "echo: slow"),
    ]


def test_malformed_events_get_error_frames_and_the_socket_stays_open(ws_client: openai.OpenAI) -> None:
    with ws_client.responses.connect() as conn:
        conn.send_raw("{not json")
        assert collect(conn).error["error"]["message"].startswith("We could not parse the JSON body")
        conn.send_raw('{"type": "response.cancel"}')
        assert collect(conn).error["error"]["param"] == "type"
        conn.send_raw('{"type": "response.create", "model": "scripted", "stream_id": "bad id!"}')
        frame = collect(conn).error
        assert frame["error"]["code"] == "invalid_stream_id"
        assert "stream_id" not in frame
        conn.send_raw('{"type": "response.create", "model": "scripted", "stream_id": "x", "bogus": 1}')
        frame = collect(conn).error
        assert (frame["error"]["code"], frame["error"]["param"], frame["stream_id"]) == (
            "unknown_parameter",
            "bogus",
            "x",
        )
        assert turn(conn, "still here", store=False).status == "completed"


@needs_lanes
def test_the_named_lane_limit(ws_own_server: ResponsesServer) -> None:
    ws_own_server.app.state.websockets.max_named_streams = 2
    client = openai.OpenAI(base_url=ws_own_server.base_url, api_key="test")
    with client.responses.connect() as conn:
        turn(conn, "a", stream_id="a")
        turn(conn, "b", stream_id="b")
        conn.response.create(model="scripted", input="c", stream_id="c")
        frame = collect(conn).error
        assert frame is not None
        assert frame["error"]["code"] == "websocket_stream_limit_reached"
        assert frame["error"]["param"] == "stream_id"
        # Known lanes and the default lane still work.
        assert turn(conn, "a again", stream_id="a").status == "completed"
        assert turn(conn, "default").status == "completed"


def test_a_connection_past_its_lifetime_gets_an_error_frame_and_a_close(
    ws_own_server: ResponsesServer,
) -> None:
    ws_own_server.app.state.websockets.max_age = 0.2
    client = openai.OpenAI(base_url=ws_own_server.base_url, api_key="test")
    with client.responses.connect() as conn:
        events = list(conn)  # ends when the server closes with 1001
    assert [event.type for event in events] == ["error"]
    # As a dict: openai 2.x parses the frame as a ``ResponseErrorEvent``, its ``error`` left a dict.
    assert events[0].to_dict()["error"]["code"] == "websocket_connection_limit_reached"


# -- storage -------------------------------------------------------------------------------


def test_a_stored_response_resolves_on_another_socket_and_over_http(
    ws_client: openai.OpenAI, ws_server: ResponsesServer
) -> None:
    with ws_client.responses.connect() as one:
        first = turn(one, "hello", store=True)
        older = turn(one, "again", store=True, previous_response_id=first.id)
    with ws_client.responses.connect() as two:
        # Not cached on this socket, and not the latest on the first: the store answers.
        second = turn(two, "elsewhere", store=True, previous_response_id=first.id)
    assert_server_saw(ws_server, second.id, [user("hello"), *output_items(first), user("elsewhere")])
    over_http = ws_client.responses.create(
        model="scripted", input=[user("http")], previous_response_id=older.id
    )
    assert_server_saw(
        ws_server,
        over_http.id,
        [user("hello"), *output_items(first), user("again"), *output_items(older), user("http")],
    )
    assert ws_client.responses.retrieve(older.id).status == "completed"


def test_http_then_socket_then_http(ws_client: openai.OpenAI, ws_server: ResponsesServer) -> None:
    first = ws_client.responses.create(model="scripted", input=[user("over http")])
    with ws_client.responses.connect() as conn:
        middle = turn(conn, "over the socket", previous_response_id=first.id)
    last = ws_client.responses.create(
        model="scripted", input=[user("http again")], previous_response_id=middle.id
    )
    assert_server_saw(
        ws_server,
        last.id,
        [
            user("over http"),
            *output_items(first),
            user("over the socket"),
            *output_items(middle),
            user("http again"),
        ],
    )


def test_a_stored_response_chained_from_an_unstored_one_carries_its_whole_context(
    ws_client: openai.OpenAI, ws_server: ResponsesServer
) -> None:
    with ws_client.responses.connect() as conn:
        first = turn(conn, "private", store=False)
        second = turn(conn, "kept", store=True, previous_response_id=first.id)
    history = [user("private"), *output_items(first), user("kept"), *output_items(second)]
    later = ws_client.responses.create(
        model="scripted", input=[user("later")], previous_response_id=second.id
    )
    assert_server_saw(ws_server, later.id, [*history, user("later")])
    # The stored response still tells what it chained from.
    assert ws_client.responses.retrieve(second.id).previous_response_id == first.id


def test_zero_data_retention_keeps_the_cache_and_refuses_the_store(ws_own_server: ResponsesServer) -> None:
    client = openai.OpenAI(base_url=ws_own_server.base_url, api_key="test")
    stored = client.responses.create(model="scripted", input="stored before")
    ws_own_server.state.zdr = True
    with client.responses.connect() as conn:
        first = turn(conn, "one", store=True)
        second = turn(conn, "two", store=True, previous_response_id=first.id)
        assert_server_saw(ws_own_server, second.id, [user("one"), *output_items(first), user("two")])
        assert refusal(conn, "x", previous_response_id=stored.id) == not_found_frame(stored.id)
        assert refusal(conn, "y", previous_response_id=first.id) == not_found_frame(first.id)
    # Nothing created over the socket under zero data retention was stored.
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(second.id)
