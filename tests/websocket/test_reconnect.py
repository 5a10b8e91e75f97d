"""Server-side drops and the SDK's reconnection (``on_reconnecting``): sync, async, with a session."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import openai
import pytest
import websockets

from anchortrack.server import ResponsesServer

from .helpers import (
    NO_SESSIONS,
    SESSIONS,
    Hooks,
    acollect,
    assert_server_saw,
    collect,
    needs_reconnect_after_going_away,
    not_found_frame,
    output_items,
    the_only_connection,
    user,
    wait_until,
)


class Reconnects:
    """An ``on_reconnecting`` handler that records the SDK's events and runs an action for each."""

    def __init__(self) -> None:
        self.events: list[Any] = []
        self.action: Any = None

    def __call__(self, event: Any) -> None:
        self.events.append(event)
        if self.action is not None:
            self.action()


def _open_ids(hooks: Hooks) -> set[str]:
    return {conn["id"] for conn in hooks.connections()}


def _client_saw_close(conn: Any) -> bool:
    """Whether the SDK's websockets connection under *conn* has left the OPEN state."""
    protocol = conn._connection.protocol
    return protocol.state is not websockets.protocol.State.OPEN


@pytest.mark.parametrize("code", [pytest.param(1001, marks=needs_reconnect_after_going_away), 1011, 1012])
def test_a_drop_mid_response_reconnects_and_a_full_resend_recovers(
    ws_client: openai.OpenAI, ws_server: ResponsesServer, ws_hooks: Hooks, code: int
) -> None:
    reconnects = Reconnects()
    before = _open_ids(ws_hooks)
    with ws_client.responses.connect(on_reconnecting=reconnects, initial_delay=0.01) as conn:
        conn.response.create(model="scripted", input=[user("one")], store=False)
        first = collect(conn).response
        history = [user("one"), *output_items(first), user("two")]
        old = the_only_connection(ws_hooks, known=sorted(before))
        ws_hooks.drop(old, code=code, when="after_created")

        # The SDK queues what is sent while it reconnects and flushes it on the new socket:
        # the lost turn goes out again, in full (the new socket has no cache).
        def resend() -> None:
            conn.response.create(model="scripted", input=history, store=False)

        reconnects.action = resend
        conn.response.create(
            model="scripted", input=[user("two")], previous_response_id=first.id, store=False
        )
        turn = collect(conn)
        assert turn.types.count("response.created") == 2  # the lost response's, then the resend's
        second = turn.response
        assert second.previous_response_id is None
        assert_server_saw(ws_server, second.id, history)
        assert [(e.attempt, e.close_code) for e in reconnects.events] == [(1, code)]
        new = the_only_connection(ws_hooks, known=sorted(before))
        assert new != old
        # The old socket's store:false anchor is gone; the new socket's latest works.
        reconnects.action = None
        conn.response.create(model="scripted", input=[user("x")], previous_response_id=first.id, store=False)
        assert collect(conn).error == not_found_frame(first.id)
        conn.response.create(
            model="scripted", input=[user("three")], previous_response_id=second.id, store=False
        )
        third = collect(conn).response
    assert_server_saw(ws_server, third.id, [*history, *output_items(second), user("three")])


async def test_async_drop_mid_response_reconnects_and_a_full_resend_recovers(
    ws_aclient: openai.AsyncOpenAI, ws_server: ResponsesServer, ws_hooks: Hooks
) -> None:
    reconnects = Reconnects()
    pending: list[asyncio.Task[None]] = []
    before = _open_ids(ws_hooks)
    async with ws_aclient.responses.connect(on_reconnecting=reconnects, initial_delay=0.01) as conn:
        await conn.response.create(model="scripted", input=[user("one")], store=False)
        first = (await acollect(conn)).response
        history = [user("one"), *output_items(first), user("two")]
        ws_hooks.drop(the_only_connection(ws_hooks, known=sorted(before)), when="after_created")

        # The handler is synchronous: it schedules the resend, which runs while the SDK waits to
        # reconnect, is queued, and is flushed on the new socket.
        def resend() -> None:
            task = asyncio.get_running_loop().create_task(
                conn.response.create(model="scripted", input=history, store=False)
            )
            pending.append(task)

        reconnects.action = resend
        await conn.response.create(
            model="scripted", input=[user("two")], previous_response_id=first.id, store=False
        )
        second = (await acollect(conn)).response
        await asyncio.gather(*pending)
    assert_server_saw(ws_server, second.id, history)
    assert [e.close_code for e in reconnects.events] == [1012]


@needs_reconnect_after_going_away
def test_an_idle_drop_surfaces_at_the_next_send_and_iterating_reconnects(
    ws_client: openai.OpenAI, ws_server: ResponsesServer, ws_hooks: Hooks
) -> None:
    reconnects = Reconnects()
    before = _open_ids(ws_hooks)
    with ws_client.responses.connect(on_reconnecting=reconnects, initial_delay=0.01) as conn:
        conn.response.create(model="scripted", input=[user("one")], store=False)
        first = collect(conn).response
        old = the_only_connection(ws_hooks, known=sorted(before))
        ws_hooks.drop(old, code=1001)
        wait_until(lambda: old not in _open_ids(ws_hooks), "the client answered the close")
        # The server can let go of the socket before the client's reader thread has read the close.
        wait_until(lambda: _client_saw_close(conn), "the client's reader saw the close")
        # send() never reconnects: the closed socket raises websockets' own exception.
        with pytest.raises(websockets.exceptions.ConnectionClosed):
            conn.response.create(model="scripted", input=[user("two")], previous_response_id=first.id)
        assert reconnects.events == []
        # Iterating does reconnect; what is sent meanwhile goes out on the new socket.
        history = [user("one"), *output_items(first), user("two")]
        reconnects.action = lambda: conn.response.create(model="scripted", input=history, store=False)
        second = collect(conn).response
    assert [e.close_code for e in reconnects.events] == [1001]
    assert_server_saw(ws_server, second.id, history)


def test_a_non_recoverable_close_ends_iteration_without_reconnecting(
    ws_client: openai.OpenAI, ws_hooks: Hooks
) -> None:
    reconnects = Reconnects()
    before = _open_ids(ws_hooks)
    with ws_client.responses.connect(on_reconnecting=reconnects, initial_delay=0.01) as conn:
        conn.response.create(model="scripted", input="one", store=False)
        collect(conn)
        ws_hooks.drop(the_only_connection(ws_hooks, known=sorted(before)), code=1008, when="after_created")
        conn.response.create(model="scripted", input="two", store=False)
        with pytest.raises(websockets.exceptions.ConnectionClosedError) as caught:
            collect(conn)
    assert caught.value.rcvd is not None
    assert caught.value.rcvd.code == 1008
    assert reconnects.events == []


def test_without_on_reconnecting_a_drop_ends_the_connection(
    ws_client: openai.OpenAI, ws_hooks: Hooks
) -> None:
    before = _open_ids(ws_hooks)
    with ws_client.responses.connect() as conn:
        conn.response.create(model="scripted", input="one", store=False)
        collect(conn)
        ws_hooks.drop(the_only_connection(ws_hooks, known=sorted(before)), code=1012, when="after_created")
        conn.response.create(model="scripted", input="two", store=False)
        with pytest.raises(websockets.exceptions.ConnectionClosedError):
            collect(conn)


def _send_when_recovered(lane: Any, event: dict[str, Any]) -> None:
    """Lane sends refuse while the socket reconnects; retry until the new socket is in place."""
    deadline = time.monotonic() + 30
    while True:
        try:
            lane.send(event)
            return
        except RuntimeError as error:
            if "reconnect" not in str(error) and "changed" not in str(error):
                raise
            if time.monotonic() > deadline:
                raise
            time.sleep(0.005)


def test_a_session_reconnects_and_a_fresh_lane_resends_in_full(
    ws_client: openai.OpenAI, ws_server: ResponsesServer, ws_hooks: Hooks
) -> None:
    sessions = pytest.importorskip(SESSIONS, reason=NO_SESSIONS)
    limits = sessions.ResponsesWebSocketLimits(
        max_lanes=8, max_events_per_lane=512, max_events=2048, max_bytes_per_lane=1 << 24, max_bytes=1 << 25
    )
    reconnects = Reconnects()
    before = _open_ids(ws_hooks)
    with (
        ws_client.responses.connect(on_reconnecting=reconnects, initial_delay=0.01) as conn,
        sessions.ResponsesWebSocketSession(conn, limits=limits) as session,
    ):
        lane = session.lane("work")
        lane.send({"type": "response.create", "model": "scripted", "input": [user("one")], "store": False})
        first = lane.get_final_response(timeout=30)
        old = the_only_connection(ws_hooks, known=sorted(before))
        ws_hooks.drop(old, when="after_created")
        lane.send(
            {
                "type": "response.create",
                "model": "scripted",
                "input": [user("two")],
                "previous_response_id": first.id,
                "store": False,
            }
        )
        assert lane.recv(timeout=30).type == "response.created"
        wait_until(lambda: bool(reconnects.events), "the session's reader started reconnecting")
        # The lost response's lane is still in flight; recovery goes through a fresh lane, in full.
        history = [user("one"), *output_items(first), user("two")]
        fresh = session.lane("work-2")
        _send_when_recovered(
            fresh, {"type": "response.create", "model": "scripted", "input": history, "store": False}
        )
        second = fresh.get_final_response(timeout=30)
        wait_until(lambda: old not in _open_ids(ws_hooks), "the server closed the old socket")
    assert_server_saw(ws_server, second.id, history)
    assert [e.close_code for e in reconnects.events] == [1012]
