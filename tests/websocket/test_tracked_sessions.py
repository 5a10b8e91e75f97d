"""
A wrapped client under the SDK's sessions with routed lanes (``openai.lib.responses_websocket``, openai 3).

Lane sends bypass ``conn.send``; anchortrack plans them on their way out, lane by lane.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import openai
import pytest

import anchortrack
from anchortrack.server import ResponsesServer

from .helpers import (
    NO_SESSIONS,
    SESSIONS,
    Frames,
    Hooks,
    assert_server_saw,
    output_items,
    the_only_connection,
    user,
    wait_until,
)


sessions = pytest.importorskip(SESSIONS, reason=NO_SESSIONS)


LIMITS = sessions.ResponsesWebSocketLimits(
    max_lanes=8, max_events_per_lane=512, max_events=2048, max_bytes_per_lane=1 << 24, max_bytes=1 << 25
)


@pytest.fixture(name="client")
def _client(ws_client: openai.OpenAI) -> openai.OpenAI:
    return anchortrack.wrap(ws_client)


@pytest.fixture(name="aclient")
def _aclient(ws_aclient: openai.AsyncOpenAI) -> openai.AsyncOpenAI:
    return anchortrack.wrap(ws_aclient)


def _create(history: list[Any]) -> dict[str, Any]:
    return {"type": "response.create", "model": "scripted", "input": list(history), "store": False}


def test_lanes_chain_their_own_conversations_with_only_new_items(
    client: openai.OpenAI, ws_server: ResponsesServer, frames: Frames
) -> None:
    histories: dict[str, list[Any]] = {"left": [], "right": []}
    with (
        client.responses.connect() as conn,
        sessions.ResponsesWebSocketSession(conn, limits=LIMITS) as session,
    ):
        lanes = {name: session.lane(name) for name in histories}
        for step in range(3):
            for name, lane in lanes.items():
                histories[name].append(user(f"{name} {step}"))
                lane.send(_create(histories[name]))
            for name, lane in lanes.items():
                response = lane.get_final_response(timeout=30)
                assert_server_saw(ws_server, response.id, histories[name])
                histories[name].extend(output_items(response))
    assert [len(e["input"]) for e in frames.events()] == [1] * 6
    assert [("previous_response_id" in e, e["stream_id"]) for e in frames.events()] == [
        (False, "left"),
        (False, "right"),
        (True, "left"),
        (True, "right"),
        (True, "left"),
        (True, "right"),
    ]
    assert anchortrack.tracker(client).stats.count("chained", transport="websocket") == 4


def test_a_stale_anchor_on_a_lane_is_recovered_unseen(
    client: openai.OpenAI, ws_server: ResponsesServer, ws_hooks: Hooks, frames: Frames
) -> None:
    with (
        client.responses.connect() as conn,
        sessions.ResponsesWebSocketSession(conn, limits=LIMITS) as session,
    ):
        lane = session.lane("work")
        history = [user("first")]
        lane.send(_create(history))
        first = lane.get_final_response(timeout=30)
        history += [*output_items(first), user("second")]
        assert ws_hooks.forget(first.id) == 200
        lane.send(_create(history))
        second = lane.get_final_response(timeout=30)  # no ResponsesWebSocketError
        history += [*output_items(second), user("third")]
        lane.send(_create(history))
        third = lane.get_final_response(timeout=30)
    assert_server_saw(ws_server, second.id, history[:3])
    assert_server_saw(ws_server, third.id, history)
    assert [e.get("previous_response_id") for e in frames.events()] == [None, first.id, None, second.id]
    assert frames.events()[2]["stream_id"] == "work"


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


def test_after_a_session_reconnects_a_fresh_lane_goes_out_in_full(
    client: openai.OpenAI, ws_server: ResponsesServer, ws_hooks: Hooks, frames: Frames
) -> None:
    events: list[Any] = []
    before = sorted(c["id"] for c in ws_hooks.connections())
    with (
        client.responses.connect(on_reconnecting=events.append, initial_delay=0.01) as conn,
        sessions.ResponsesWebSocketSession(conn, limits=LIMITS) as session,
    ):
        lane = session.lane("work")
        history = [user("one")]
        lane.send(_create(history))
        first = lane.get_final_response(timeout=30)
        history += [*output_items(first), user("two")]
        old = the_only_connection(ws_hooks, known=before)
        ws_hooks.drop(old, when="after_created")
        lane.send(_create(history))
        assert lane.recv(timeout=30).type == "response.created"
        wait_until(lambda: bool(events), "the session's reader started reconnecting")
        fresh = session.lane("work-2")
        _send_when_recovered(fresh, _create(history))
        second = fresh.get_final_response(timeout=30)
        history += [*output_items(second), user("three")]
        fresh.send(_create(history))
        third = fresh.get_final_response(timeout=30)
    assert_server_saw(ws_server, third.id, history)
    assert [e.get("previous_response_id") for e in frames.events()] == [None, first.id, None, second.id]
    assert [len(e["input"]) for e in frames.events()] == [1, 1, 3, 1]
    assert anchortrack.tracker(client).stats.not_recorded["websocket_reconnect_dropped"] == 1


async def test_async_lanes_chain_concurrent_conversations(
    aclient: openai.AsyncOpenAI, ws_server: ResponsesServer, frames: Frames
) -> None:
    async with (
        aclient.responses.connect() as conn,
        sessions.AsyncResponsesWebSocketSession(conn, limits=LIMITS) as session,
    ):

        async def converse(name: str, turns: int) -> list[Any]:
            lane = session.lane(name)
            history: list[Any] = []
            for step in range(turns):
                history.append(user(f"{name} {step}" + ("\n!sleep 20" if name == "slow" else "")))
                await lane.send(_create(history))
                response = await lane.get_final_response()
                assert_server_saw(ws_server, response.id, history)
                history.extend(output_items(response))
            return history

        await asyncio.gather(converse("slow", 3), converse("fast", 5))
    assert all(len(e["input"]) == 1 for e in frames.events())
    assert sum("previous_response_id" in e for e in frames.events()) == 2 + 4
