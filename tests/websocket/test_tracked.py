"""
A wrapped client over ``client.responses.connect()``: every create is planned like an HTTP call.

Real sockets on loopback, the real SDK client, the local server's test hooks.
For every response, the context the server resolved is the caller's whole history.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest
import websockets
from openai.resources.responses.responses import (
    AsyncResponsesConnection,
    AsyncResponsesConnectionManager,
    ResponsesConnection,
    ResponsesConnectionManager,
)
from prometheus_client import CollectorRegistry, generate_latest
from structlog.testing import capture_logs

import anchortrack
from anchortrack._websocket import _Socket
from anchortrack.metrics import AnchortrackCollector
from anchortrack.server import ResponsesServer
from anchortrack.stores import MemoryStore

from .helpers import (
    Frames,
    Hooks,
    acollect,
    assert_server_saw,
    collect,
    function_calls,
    needs_resend_of_failed_sends,
    not_found_frame,
    output_items,
    the_only_connection,
    user,
    wait_until,
)


@pytest.fixture(name="store")
def _store() -> MemoryStore:
    return MemoryStore()


@pytest.fixture(name="client")
def _client(ws_client: openai.OpenAI, store: MemoryStore) -> openai.OpenAI:
    """A wrapped sync client of the WebSocket test server."""
    return anchortrack.wrap(ws_client, store=store)


@pytest.fixture(name="aclient")
def _aclient(ws_aclient: openai.AsyncOpenAI, store: MemoryStore) -> openai.AsyncOpenAI:
    """A wrapped async client of the WebSocket test server."""
    return anchortrack.wrap(ws_aclient, store=store)


def _turn(conn: Any, history: list[Any], **params: Any) -> Any:
    """One create and its events (a raw event, so openai 2.x, without ``stream_id``, runs it too)."""
    conn.send({"type": "response.create", "model": "scripted", "input": history, **params})
    return collect(conn).response


async def _aturn(conn: Any, history: list[Any], **params: Any) -> Any:
    await conn.response.create(model="scripted", input=history, **params)
    return (await acollect(conn)).response


def _full_bytes(event: dict[str, Any]) -> int:
    return len(json.dumps(event))


# -- what connect() returns ------------------------------------------------------------


def test_connect_returns_the_sdks_own_types_tracked(client: openai.OpenAI, ws_client: openai.OpenAI) -> None:
    manager = client.responses.connect()
    assert isinstance(manager, ResponsesConnectionManager)
    with manager as conn:
        assert isinstance(conn, ResponsesConnection)
        assert conn.response._connection is conn
    # The client it was made from is untouched.
    assert type(ws_client.responses.connect()) is ResponsesConnectionManager


async def test_async_connect_returns_the_sdks_own_types_tracked(aclient: openai.AsyncOpenAI) -> None:
    manager = aclient.responses.connect()
    assert isinstance(manager, AsyncResponsesConnectionManager)
    async with manager as conn:
        assert isinstance(conn, AsyncResponsesConnection)


def test_mode_off_returns_the_plain_manager(ws_client: openai.OpenAI) -> None:
    client = anchortrack.wrap(ws_client, mode="off")
    assert type(client.responses.connect()) is ResponsesConnectionManager


# -- chaining on one socket ------------------------------------------------------------


@pytest.mark.parametrize("stored", [False, True])
def test_a_chat_chains_after_the_first_turn_with_only_the_new_items(
    client: openai.OpenAI, ws_server: ResponsesServer, frames: Frames, stored: bool
) -> None:
    history: list[Any] = []
    ids: list[str] = []
    full: list[int] = []
    with client.responses.connect() as conn:
        for text in ["one", "two", "three", "four", "five"]:
            history.append(user(text))
            event = {"type": "response.create", "model": "scripted", "input": history, "store": stored}
            full.append(_full_bytes(event))
            response = _turn(conn, history, store=stored)
            assert_server_saw(ws_server, response.id, history)
            ids.append(response.id)
            history.extend(output_items(response))
    sent = frames.all()
    assert [f.event.get("previous_response_id") for f in sent] == [None, *ids[:-1]]
    assert [f.event["input"] for f in sent[1:]] == [[user(t)] for t in ["two", "three", "four", "five"]]
    # A chained frame carries its delta only: its size does not grow with the history.
    assert sent[0].bytes == full[0]
    assert max(f.bytes for f in sent[1:]) < full[1] < full[-1] / 2
    assert max(f.bytes for f in sent[1:]) - min(f.bytes for f in sent[1:]) < 8
    stats = anchortrack.tracker(client).stats
    assert stats.count("chained", transport="websocket") == 4
    assert stats.count("stateless", "no_history", transport="websocket") == 1


async def test_async_a_chat_chains_after_the_first_turn(
    aclient: openai.AsyncOpenAI, ws_server: ResponsesServer, frames: Frames
) -> None:
    history: list[Any] = []
    async with aclient.responses.connect() as conn:
        for text in ["one", "two", "three"]:
            history.append(user(text))
            response = await _aturn(conn, history, store=False)
            assert_server_saw(ws_server, response.id, history)
            history.extend(output_items(response))
    sent = frames.events()
    assert [len(e["input"]) for e in sent] == [1, 1, 1]
    assert ["previous_response_id" in e for e in sent] == [False, True, True]


def test_a_tool_loop_chains_with_only_the_tool_outputs(
    client: openai.OpenAI, ws_server: ResponsesServer, frames: Frames
) -> None:
    history: list[Any] = [user('look it up\n!call lookup {"q": 1}\n!rounds 3')]
    with client.responses.connect() as conn:
        response = _turn(conn, history, store=False)
        while calls := function_calls(response):
            history.extend(output_items(response))
            history.extend(
                {"type": "function_call_output", "call_id": c.call_id, "output": "r"} for c in calls
            )
            response = _turn(conn, history, store=False)
            assert_server_saw(ws_server, response.id, history)
    sent = frames.events()
    assert len(sent) == 4
    assert all(e["input"][0]["type"] == "function_call_output" for e in sent[1:])
    assert all(len(e["input"]) == 1 for e in sent[1:])


def test_a_raw_send_is_planned_and_other_events_pass_unchanged(
    client: openai.OpenAI, ws_server: ResponsesServer, frames: Frames
) -> None:
    history = [user("one")]
    with client.responses.connect() as conn:
        conn.send({"type": "response.create", "model": "scripted", "input": history, "store": False})
        first = collect(conn).response
        history += [*output_items(first), user("two")]
        conn.send({"type": "response.create", "model": "scripted", "input": history, "store": False})
        second = collect(conn).response
        # Not a create: sent as given (this server answers other types with an error frame).
        conn.send({"type": "response.steer", "previous_response_id": second.id, "input": "x"})
        steer = collect(conn)
    assert_server_saw(ws_server, second.id, history)
    assert frames.events()[1]["input"] == [user("two")]
    assert frames.events()[2] == {"type": "response.steer", "previous_response_id": second.id, "input": "x"}
    assert steer.error is not None
    assert steer.error["error"]["param"] == "type"


def test_a_warm_up_is_an_anchor(client: openai.OpenAI, ws_server: ResponsesServer, frames: Frames) -> None:
    system = {"type": "message", "role": "developer", "content": "be brief"}
    with client.responses.connect() as conn:
        warm = _turn(conn, [system], store=False, generate=False)
        response = _turn(conn, [system, user("go")], store=False)
    assert frames.events()[1]["previous_response_id"] == warm.id
    assert frames.events()[1]["input"] == [user("go")]
    assert_server_saw(ws_server, response.id, [system, user("go")])


# -- store: false anchors belong to their socket ----------------------------------------


def test_store_false_chains_on_its_socket_and_never_on_another(
    client: openai.OpenAI, ws_server: ResponsesServer, store: MemoryStore, frames: Frames
) -> None:
    history = [user("one")]
    with client.responses.connect() as conn:
        first = _turn(conn, history, store=False)
        history += [*output_items(first), user("two")]
        second = _turn(conn, history, store=False)
        history += [*output_items(second), user("three")]
        # The same conversation on another socket, opened while the first is still open.
        with client.responses.connect() as other:
            third = _turn(other, history, store=False)
            assert_server_saw(ws_server, third.id, history)
        assert len(store) == 0  # connection-local anchors never reach the store
    snapshot = anchortrack.tracker(client).stats.snapshot()
    assert (snapshot["recorded"], snapshot["recorded_local"]) == (0, 3)
    sent = frames.events()
    assert sent[1]["previous_response_id"] == first.id
    assert "previous_response_id" not in sent[2]
    assert len(sent[2]["input"]) == len(history)


def test_local_anchors_are_sealed_like_stored_ones(ws_client: openai.OpenAI, frames: Frames) -> None:
    """With a secret-keyed store, anchors must carry a valid MAC: connection-local ones do too."""
    client = anchortrack.wrap(ws_client, store=MemoryStore(secret_key=b"k" * 32))
    history = [user("one")]
    with client.responses.connect() as conn:
        first = _turn(conn, history, store=False)
        history += [*output_items(first), user("two")]
        _turn(conn, history, store=False)
    assert frames.events()[1]["previous_response_id"] == first.id


def test_store_false_chains_only_from_the_latest_response_of_its_lane(
    client: openai.OpenAI, ws_server: ResponsesServer, frames: Frames
) -> None:
    """A regenerate (chained from an older response over HTTP) goes out in full on a socket."""
    history = [user("one")]
    with client.responses.connect() as conn:
        first = _turn(conn, history, store=False)
        base = [*history, *output_items(first)]
        _turn(conn, [*base, user("two")], store=False)
        again = _turn(conn, [*base, user("two, again")], store=False)
        on_lane = _turn(conn, [*base, user("two, again"), *output_items(again), user("three")], store=False)
    sent = frames.events()
    assert sent[1]["previous_response_id"] == first.id
    assert "previous_response_id" not in sent[2]  # `first` is no longer the lane's latest
    assert sent[3]["previous_response_id"] == again.id
    assert_server_saw(ws_server, on_lane.id, [*base, user("two, again"), *output_items(again), user("three")])


def test_lanes_keep_their_own_local_anchors(
    client: openai.OpenAI, ws_server: ResponsesServer, frames: Frames
) -> None:
    histories: dict[str | None, list[Any]] = {None: [], "side": []}
    with client.responses.connect() as conn:
        for step in range(3):
            for lane, history in histories.items():
                history.append(user(f"{lane} {step}"))
                extra = {"stream_id": lane} if lane else {}
                response = _turn(conn, history, store=False, **extra)
                assert_server_saw(ws_server, response.id, history)
                history.extend(output_items(response))
    sent = frames.events()
    assert [len(e["input"]) for e in sent] == [1, 1, 1, 1, 1, 1]
    assert ["previous_response_id" in e for e in sent] == [False, False, True, True, True, True]


# -- refusals ------------------------------------------------------------------------------


@pytest.mark.parametrize("stored", [False, True])
def test_a_stale_anchor_is_resent_in_full_on_the_same_socket_unseen(
    client: openai.OpenAI, ws_server: ResponsesServer, ws_hooks: Hooks, frames: Frames, stored: bool
) -> None:
    history = [user("one")]
    with client.responses.connect() as conn:
        first = _turn(conn, history, store=stored)
        history += [*output_items(first), user("two")]
        assert ws_hooks.forget(first.id) == 200
        if stored:
            ws_server.state.drop(first.id)
        conn.response.create(model="scripted", input=history, store=stored)
        turn = collect(conn)
        assert turn.types.count("error") == 0
        assert turn.types.count("response.created") == 1
        assert_server_saw(ws_server, turn.response.id, history)
        history += [*output_items(turn.response), user("three")]
        third = _turn(conn, history, store=stored)
    assert_server_saw(ws_server, third.id, history)
    sent = frames.events()
    assert [e.get("previous_response_id") for e in sent] == [None, first.id, None, turn.response.id]
    assert [len(e["input"]) for e in sent] == [1, 1, 3, 1]
    stats = anchortrack.tracker(client).stats
    assert stats.resends == {"stale_anchor": 1}
    # Counted once answered: the refused create as resent, the next one as chained.
    assert stats.count("resent", "stale_anchor", transport="websocket") == 1
    assert stats.count("chained", transport="websocket") == 1


async def test_async_a_stale_anchor_is_resent_unseen(
    aclient: openai.AsyncOpenAI, ws_server: ResponsesServer, ws_hooks: Hooks, frames: Frames
) -> None:
    history = [user("one")]
    async with aclient.responses.connect() as conn:
        first = await _aturn(conn, history, store=False)
        history += [*output_items(first), user("two")]
        assert ws_hooks.forget(first.id) == 200
        await conn.response.create(model="scripted", input=history, store=False)
        turn = await acollect(conn)
    assert "error" not in turn.types
    assert_server_saw(ws_server, turn.response.id, history)
    assert [e.get("previous_response_id") for e in frames.events()] == [None, first.id, None]


def test_dispatch_events_never_sees_a_recovered_stale_anchor(
    client: openai.OpenAI, ws_server: ResponsesServer, ws_hooks: Hooks
) -> None:
    """Without an error handler, dispatch_events() raises on an error frame: the recovered one never shows."""
    history = [user("one")]
    done: list[Any] = []
    with client.responses.connect() as conn:
        first = _turn(conn, history, store=False)
        history += [*output_items(first), user("two")]
        assert ws_hooks.forget(first.id) == 200

        def completed(event: Any) -> None:
            done.append(event.response)
            conn.close()

        conn.on("response.completed", completed)
        conn.response.create(model="scripted", input=history, store=False)
        conn.dispatch_events()
    assert len(done) == 1
    assert_server_saw(ws_server, done[0].id, history)


def test_other_error_frames_reach_the_caller_unchanged(
    client: openai.OpenAI, ws_server: ResponsesServer, frames: Frames
) -> None:
    with client.responses.connect() as conn:
        first = _turn(conn, [user("one")], store=False)
        # Caller-managed: sent exactly as given, and its refusal is the caller's.
        conn.response.create(model="scripted", input=[user("x")], previous_response_id="resp_unknown")
        assert collect(conn).error == not_found_frame("resp_unknown")
        conn.response.create(input=[user("no model")], store=False)
        assert collect(conn).error["error"]["param"] == "model"  # type: ignore[index]
        # A failed response is no anchor: the next turn of that history goes out in full.
        history = [user("one"), *output_items(first), user("two\n!fail")]
        failed = _turn(conn, history, store=False)
        assert failed.status == "failed"
        retry = _turn(conn, history, store=False)
    sent = frames.events()
    assert sent[1] == {
        "type": "response.create",
        "model": "scripted",
        "input": [user("x")],
        "previous_response_id": "resp_unknown",
    }
    assert sent[3]["previous_response_id"] == first.id
    assert "previous_response_id" not in sent[4]  # the failure evicted `first` on the server
    assert_server_saw(ws_server, retry.id, history)


# -- reconnects ------------------------------------------------------------------------------


class Reconnects:
    """An ``on_reconnecting`` callback that records the SDK's events and runs an action."""

    def __init__(self) -> None:
        self.events: list[Any] = []
        self.action: Any = None

    def __call__(self, event: Any) -> None:
        self.events.append(event)
        if self.action is not None:
            self.action()


def test_after_a_reconnect_the_lost_turn_goes_out_in_full(
    client: openai.OpenAI, ws_server: ResponsesServer, ws_hooks: Hooks, frames: Frames
) -> None:
    reconnects = Reconnects()
    before = sorted(c["id"] for c in ws_hooks.connections())
    with client.responses.connect(on_reconnecting=reconnects, initial_delay=0.01) as conn:
        first = _turn(conn, [user("one")], store=False)
        history = [user("one"), *output_items(first), user("two")]
        ws_hooks.drop(the_only_connection(ws_hooks, known=before), when="after_created")
        # The caller resends the lost turn, whole, from the callback: anchortrack sends it in full.
        reconnects.action = lambda: conn.response.create(model="scripted", input=history, store=False)
        conn.response.create(model="scripted", input=history, store=False)
        turn = collect(conn)
        assert "error" not in turn.types
        second = turn.response
        assert_server_saw(ws_server, second.id, history)
        reconnects.action = None
        history += [*output_items(second), user("three")]
        third = _turn(conn, history, store=False)
    assert_server_saw(ws_server, third.id, history)
    assert [e.close_code for e in reconnects.events] == [1012]
    sent = frames.events()
    assert [e.get("previous_response_id") for e in sent] == [None, first.id, None, second.id]
    assert [len(e["input"]) for e in sent] == [1, 1, 3, 1]
    assert anchortrack.tracker(client).stats.not_recorded["websocket_reconnect_dropped"] == 1


async def test_async_after_a_reconnect_the_lost_turn_goes_out_in_full(
    aclient: openai.AsyncOpenAI, ws_server: ResponsesServer, ws_hooks: Hooks, frames: Frames
) -> None:
    reconnects = Reconnects()
    pending: list[asyncio.Task[None]] = []
    before = sorted(c["id"] for c in ws_hooks.connections())
    async with aclient.responses.connect(on_reconnecting=reconnects, initial_delay=0.01) as conn:
        first = await _aturn(conn, [user("one")], store=False)
        history = [user("one"), *output_items(first), user("two")]
        ws_hooks.drop(the_only_connection(ws_hooks, known=before), when="after_created")

        def resend() -> None:
            coro = conn.response.create(model="scripted", input=history, store=False)
            pending.append(asyncio.get_running_loop().create_task(coro))

        reconnects.action = resend
        await conn.response.create(model="scripted", input=history, store=False)
        second = (await acollect(conn)).response
        await asyncio.gather(*pending)
    assert_server_saw(ws_server, second.id, history)
    assert [e.get("previous_response_id") for e in frames.events()] == [None, first.id, None]


def _planned_on_this_socket(conn: Any) -> tuple[list[Any], Any]:
    """A second turn's history, and its create planned (not sent) against *conn*'s socket, chained to the
    first turn's connection-local anchor (``store: false``)."""
    first = _turn(conn, [user("one")], store=False)
    history = [user("one"), *output_items(first), user("two")]
    socket = conn._anchortrack
    fields = {"type": "response.create", "model": "scripted", "input": history, "store": False}
    text = socket.run(socket.framing(fields))
    assert text.pending.plan.local
    return history, text


def test_a_queued_create_chained_to_the_old_socket_goes_out_in_full(
    client: openai.OpenAI, ws_server: ResponsesServer, ws_hooks: Hooks, frames: Frames
) -> None:
    """A create planned against the old socket but sent after the reconnect is not chained to it."""
    reconnects = Reconnects()
    before = sorted(c["id"] for c in ws_hooks.connections())
    with client.responses.connect(on_reconnecting=reconnects, initial_delay=0.01) as conn:
        # Planned now, against the socket about to drop; sent only after the reconnect.
        history, text = _planned_on_this_socket(conn)
        reconnects.action = lambda: conn.send_raw(text)  # queued by the SDK, flushed on the new socket
        ws_hooks.drop(the_only_connection(ws_hooks, known=before), when="after_created")
        conn.response.create(model="scripted", input=[*history[:-1], user("lost")], store=False)
        turn = collect(conn)
    assert "error" not in turn.types
    assert_server_saw(ws_server, turn.response.id, history)
    assert "previous_response_id" not in frames.events()[-1]
    stats = anchortrack.tracker(client).stats
    assert stats.count("resent", "websocket_reconnect_dropped", transport="websocket") == 1


@needs_resend_of_failed_sends
def test_a_planned_create_sent_again_after_its_send_failed_goes_out_in_full(
    client: openai.OpenAI, ws_server: ResponsesServer, ws_hooks: Hooks, frames: Frames
) -> None:
    """openai 2.x queues a send that failed on a closed socket and sends the very string again after
    reconnecting: chained to the old socket's anchor, it goes out in full (it used to go out refused).
    The SDK's own path: its send raises and queues the create, and iterating reconnects and flushes it."""
    reconnects = Reconnects()
    before = sorted(c["id"] for c in ws_hooks.connections())
    with client.responses.connect(on_reconnecting=reconnects, initial_delay=0.01) as conn:
        first = _turn(conn, [user("one")], store=False)
        history = [user("one"), *output_items(first), user("two")]
        old = the_only_connection(ws_hooks, known=before)
        ws_hooks.drop(old, code=1012)
        wait_until(
            lambda: old not in {c["id"] for c in ws_hooks.connections()}, "the client answered the close"
        )
        with pytest.raises(websockets.exceptions.ConnectionClosed):
            conn.response.create(model="scripted", input=history, store=False)
        turn = collect(conn)
    assert "error" not in turn.types
    assert_server_saw(ws_server, turn.response.id, history)
    assert [(e.get("previous_response_id"), len(e["input"])) for e in frames.events()] == [
        (None, 1),
        (None, 3),
    ]
    assert [e.close_code for e in reconnects.events] == [1012]
    stats = anchortrack.tracker(client).stats  # the create counts once, as what went out: in full
    assert 1 == stats.count("resent", "websocket_reconnect_dropped", transport="websocket")
    assert 0 == stats.count("chained", transport="websocket")


def test_a_planned_frame_is_known_once_and_only_as_the_very_string(client: openai.OpenAI) -> None:
    tracker = anchortrack.tracker(client)
    socket = _Socket(tracker._calls, lambda: tracker.scope_for(client))
    text = socket.run(socket.framing({"type": "response.create", "model": "scripted", "input": [user("x")]}))
    pending = text.pending
    assert socket.run(socket.outgoing("".join([text[:5], text[5:]])))[1] is not pending  # equal, not it
    assert socket.run(socket.outgoing(text)) == (text, pending)
    assert socket.run(socket.outgoing(text))[1] is not pending  # once: planned anew


# -- edits, transports and modes ---------------------------------------------------------------


def test_a_redacted_early_item_sends_the_whole_history(
    client: openai.OpenAI, ws_server: ResponsesServer, frames: Frames
) -> None:
    history = [user("my card is 4111")]
    with client.responses.connect() as conn:
        first = _turn(conn, history, store=False)
        history += [*output_items(first), user("two")]
        second = _turn(conn, history, store=False)
        history = [user("my card is [redacted]"), *history[1:], *output_items(second), user("three")]
        third = _turn(conn, history, store=False)
    assert_server_saw(ws_server, third.id, history)
    sent = frames.events()
    assert "previous_response_id" not in sent[2]
    assert len(sent[2]["input"]) == len(history)


def test_a_conversation_moves_from_http_to_a_socket_and_back(
    client: openai.OpenAI, ws_server: ResponsesServer, frames: Frames
) -> None:
    history: list[Any] = [user("over http")]
    first = client.responses.create(model="scripted", input=history)
    history += [*output_items(first), user("over a socket")]
    with client.responses.connect() as conn:
        second = _turn(conn, history)
    assert_server_saw(ws_server, second.id, history)
    history += [*output_items(second), user("over http again")]
    third = client.responses.create(model="scripted", input=history)
    assert third.previous_response_id == second.id
    assert_server_saw(ws_server, third.id, history)
    assert frames.events()[0]["previous_response_id"] == first.id
    assert frames.events()[0]["input"] == [user("over a socket")]
    stats = anchortrack.tracker(client).stats
    assert stats.count("chained", transport="websocket") == 1
    assert stats.count("chained", transport="http") == 1


def test_a_create_queued_before_connecting_is_planned_when_it_goes_out(
    client: openai.OpenAI, ws_server: ResponsesServer, frames: Frames
) -> None:
    history: list[Any] = [user("over http")]
    first = client.responses.create(model="scripted", input=history)
    history += [*output_items(first), user("queued before connecting")]
    manager = client.responses.connect()
    manager.send({"type": "response.create", "model": "scripted", "input": history})
    with manager as conn:
        second = collect(conn).response
    assert_server_saw(ws_server, second.id, history)
    assert frames.events() == [
        {
            "type": "response.create",
            "model": "scripted",
            "input": [user("queued before connecting")],
            "previous_response_id": first.id,
        }
    ]


def test_shadow_mode_plans_and_records_but_sends_as_given(
    ws_client: openai.OpenAI, ws_server: ResponsesServer, frames: Frames
) -> None:
    client = anchortrack.wrap(ws_client, mode="shadow")
    history = [user("one")]
    with client.responses.connect() as conn:
        first = _turn(conn, history, store=False)
        history += [*output_items(first), user("two")]
        _turn(conn, history, store=False)
    assert [len(e["input"]) for e in frames.events()] == [1, 3]
    assert anchortrack.tracker(client).stats.count("chained", mode="shadow", transport="websocket") == 1


def test_per_call_off_and_caller_managed_go_out_exactly_as_given(
    client: openai.OpenAI, frames: Frames
) -> None:
    history = [user("one")]
    with client.responses.connect() as conn:
        first = _turn(conn, history, store=False)
        history += [*output_items(first), user("two")]
        with anchortrack.using("off"):
            second = _turn(conn, history, store=False)
        _turn(conn, [user("three")], previous_response_id=second.id, store=False)
    sent = frames.events()
    assert [len(e["input"]) for e in sent] == [1, 3, 1]
    assert sent[2]["previous_response_id"] == second.id
    stats = anchortrack.tracker(client).stats
    assert stats.count("passthrough", "mode_off", transport="websocket") == 1
    assert stats.count("passthrough", "caller_managed", transport="websocket") == 1


def test_events_stats_and_metrics_say_websocket(client: openai.OpenAI) -> None:
    history = [user("my card is 4111 1111 1111 1111")]
    with client.responses.connect() as conn, capture_logs() as logs:
        first = _turn(conn, history, store=False)
        history += [*output_items(first), user("two")]
        _turn(conn, history, store=False)
    chained = [e for e in logs if e["event"] == "anchortrack.request_chained"]
    recorded = [e for e in logs if e["event"] == "anchortrack.response_recorded"]
    assert [e["transport"] for e in chained] == ["websocket"]
    assert [e["anchor_id"] for e in chained] == [first.id]
    assert all(e["transport"] == "websocket" and e["connection_local"] for e in recorded)
    assert not [e for e in logs if "4111" in repr(e)]
    rows = anchortrack.tracker(client).stats.snapshot()["requests"]
    assert {r["transport"] for r in rows} == {"websocket"}
    registry = CollectorRegistry()
    registry.register(AnchortrackCollector(client))
    lines = generate_latest(registry).decode().splitlines()
    labels = 'decision="chained",mode="chained",reason="chained",transport="websocket"'
    assert f"anchortrack_requests_total{{{labels}}} 1.0" in lines
    assert "anchortrack_responses_recorded_local_total 2.0" in lines
    assert "anchortrack_responses_recorded_total 0.0" in lines


@pytest.fixture(name="zdr_client")
def _zdr_client(ws_own_server: ResponsesServer) -> Iterator[openai.OpenAI]:
    ws_own_server.state.zdr = True
    raw = openai.OpenAI(base_url=ws_own_server.base_url, api_key="test", max_retries=0)
    yield anchortrack.wrap(raw)
    raw.close()


def test_under_zero_data_retention_chaining_stays_on_the_socket(
    zdr_client: openai.OpenAI, ws_own_server: ResponsesServer
) -> None:
    """Stored anchors are refused (the scope stops using them); the socket's latest still chains."""
    frames = Frames(ws_own_server)
    history = [user("one")]
    with zdr_client.responses.connect() as conn:
        first = _turn(conn, history)
        history += [*output_items(first), user("two")]
        second = _turn(conn, history)
        history += [*output_items(second), user("three")]
        with zdr_client.responses.connect() as other:
            third = _turn(other, history)  # chained to a stored anchor: refused, resent in full
            history += [*output_items(third), user("four")]
            fourth = _turn(other, history)
    assert_server_saw(ws_own_server, fourth.id, history)
    sent = frames.events()
    assert [e.get("previous_response_id") for e in sent] == [None, first.id, second.id, None, third.id]
    tracker = anchortrack.tracker(zdr_client)
    assert tracker.stats.resends == {"stale_anchor": 1}
