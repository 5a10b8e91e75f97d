"""
The SDK's sessions with routed lanes (``openai.lib.responses_websocket``, openai 3) against the local server.
"""

from __future__ import annotations

import asyncio
from typing import Any

import openai
import pytest

from anchortrack.server import ResponsesServer

from .helpers import NO_SESSIONS, SESSIONS, assert_server_saw, not_found_frame, output_items, user


sessions = pytest.importorskip(SESSIONS, reason=NO_SESSIONS)


LIMITS = sessions.ResponsesWebSocketLimits(
    max_lanes=8, max_events_per_lane=512, max_events=2048, max_bytes_per_lane=1 << 24, max_bytes=1 << 25
)


def _create(text: str, previous: str | None) -> dict[str, Any]:
    event: dict[str, Any] = {
        "type": "response.create",
        "model": "scripted",
        "input": [user(text)],
        "store": False,
    }
    if previous is not None:
        event["previous_response_id"] = previous
    return event


def test_two_lanes_chain_store_false_conversations_side_by_side(
    ws_client: openai.OpenAI, ws_server: ResponsesServer
) -> None:
    histories: dict[str, list[Any]] = {"left": [], "right": []}
    previous: dict[str, str | None] = {"left": None, "right": None}
    with (
        ws_client.responses.connect() as conn,
        sessions.ResponsesWebSocketSession(conn, limits=LIMITS) as session,
    ):
        lanes = {name: session.lane(name) for name in histories}
        for step in range(3):
            for name, lane in lanes.items():
                text = f"{name} {step}"
                histories[name].append(user(text))
                lane.send(_create(text, previous[name]))
            for name, lane in lanes.items():
                response = lane.get_final_response(timeout=30)
                assert_server_saw(ws_server, response.id, histories[name])
                histories[name].extend(output_items(response))
                previous[name] = response.id


def test_a_stale_anchor_on_a_lane_raises_with_the_error_frame(ws_client: openai.OpenAI) -> None:
    with (
        ws_client.responses.connect() as conn,
        sessions.ResponsesWebSocketSession(conn, limits=LIMITS) as session,
    ):
        lane = session.lane("work")
        lane.send(_create("first", None))
        first = lane.get_final_response(timeout=30)
        lane.send(_create("second", first.id))
        lane.get_final_response(timeout=30)
        lane.send(_create("regenerate", first.id))
        with pytest.raises(sessions.ResponsesWebSocketError) as caught:
            lane.get_final_response(timeout=30)
    assert caught.value.event.to_dict() == not_found_frame(first.id, stream_id="work")


def test_the_default_lane_chains_and_warms_up(ws_client: openai.OpenAI, ws_server: ResponsesServer) -> None:
    system = {"type": "message", "role": "developer", "content": "terse"}
    with (
        ws_client.responses.connect() as conn,
        sessions.ResponsesWebSocketSession(conn, limits=LIMITS) as session,
    ):
        lane = session.default
        lane.send({"type": "response.create", "model": "scripted", "input": [system], "generate": False})
        warm = lane.get_final_response(timeout=30)
        assert warm.output == []
        lane.send(_create("go", warm.id))
        response = lane.get_final_response(timeout=30)
    assert_server_saw(ws_server, response.id, [system, user("go")])


async def test_async_lanes_run_concurrent_conversations(
    ws_aclient: openai.AsyncOpenAI, ws_server: ResponsesServer
) -> None:
    async with (
        ws_aclient.responses.connect() as conn,
        sessions.AsyncResponsesWebSocketSession(conn, limits=LIMITS) as session,
    ):

        async def converse(name: str, turns: int) -> list[Any]:
            lane = session.lane(name)
            history: list[Any] = []
            previous: str | None = None
            for step in range(turns):
                text = f"{name} {step}" + ("\n!sleep 20" if name == "slow" else "")
                history.append(user(text))
                await lane.send(_create(text, previous))
                response = await lane.get_final_response()
                assert_server_saw(ws_server, response.id, history)
                history.extend(output_items(response))
                previous = response.id
            return history

        slow, fast = await asyncio.gather(converse("slow", 3), converse("fast", 5))
    assert len(slow) == 6
    assert len(fast) == 10


async def test_async_lane_fork_from_another_lanes_latest(
    ws_aclient: openai.AsyncOpenAI, ws_server: ResponsesServer
) -> None:
    async with (
        ws_aclient.responses.connect() as conn,
        sessions.AsyncResponsesWebSocketSession(conn, limits=LIMITS) as session,
    ):
        source, fork = session.lane("source"), session.lane("fork")
        await source.send(_create("base", None))
        base = await source.get_final_response()
        await fork.send(_create("forked", base.id))
        forked = await fork.get_final_response()
        await source.send(_create("continued", base.id))
        continued = await source.get_final_response()
    assert_server_saw(ws_server, forked.id, [user("base"), *output_items(base), user("forked")])
    assert_server_saw(ws_server, continued.id, [user("base"), *output_items(base), user("continued")])
