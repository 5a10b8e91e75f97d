"""
Over a WebSocket too, a response that announces per-request properties becomes an anchor any request
may chain from: a turn whose tools changed still chains. A server that does not announce it gets the
strict default: that turn goes out in full.
"""

from __future__ import annotations

from typing import Any

import openai
import pytest

import anchortrack
from anchortrack.server import ResponsesServer
from anchortrack.stores import MemoryStore

from .helpers import Frames, assert_server_saw, collect, output_items, user


def _tools(*names: str) -> list[dict[str, Any]]:
    return [
        {"type": "function", "name": n, "parameters": {"type": "object", "properties": {}}} for n in names
    ]


@pytest.mark.parametrize("announced", [True, False])
def test_changed_tools_on_one_socket(ws_own_server: ResponsesServer, announced: bool) -> None:
    ws_own_server.state.announce_per_request = announced
    frames = Frames(ws_own_server)
    raw = openai.OpenAI(base_url=ws_own_server.base_url, api_key="test", max_retries=0)
    client = anchortrack.wrap(raw, store=MemoryStore())
    history: list[Any] = []
    turns = [("a",), ("a", "b"), ("c",)]
    with client.responses.connect() as conn:
        for n, names in enumerate(turns):
            history.append(user(f"turn {n}"))
            conn.send(
                {"type": "response.create", "model": "scripted", "input": history, "tools": _tools(*names)}
            )
            response = collect(conn).response
            assert_server_saw(ws_own_server, response.id, history)
            history.extend(output_items(response))
    raw.close()

    chained = ["previous_response_id" in f.event for f in frames.all()]
    assert [False, announced, announced] == chained
    stats = anchortrack.tracker(client).stats
    assert (0 if announced else 2) == stats.count(reason="properties_changed", transport="websocket")
