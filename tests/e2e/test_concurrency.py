"""End to end: many conversations at once on one wrapped client, threads and tasks."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import openai

import anchortrack
from anchortrack.server import ResponsesServer

from ..helpers import assert_server_saw


def _conversation(client: openai.OpenAI, server: ResponsesServer, name: str, turns: int) -> list[str]:
    history: list[Any] = [
        {"role": "system", "content": "shared system prompt"},
        {"role": "user", "content": f"{name} 0"},
    ]
    ids = []
    for turn in range(1, turns + 1):
        resp = client.responses.create(model="scripted", input=history)
        assert_server_saw(server, resp.id, history)
        ids.append(resp.id)
        history = [*history, *resp.output, {"role": "user", "content": f"{name} {turn}"}]
    return ids


def test_threads_share_one_client(server: ResponsesServer, client: openai.OpenAI) -> None:
    """Eight threads, eight conversations, one client: every context is exactly its own history."""
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda n: _conversation(client, server, f"thread-{n}", 5), range(8)))

    assert 40 == len({rid for ids in results for rid in ids})
    stats = anchortrack.tracker(client).stats
    assert 32 == stats.count("chained")
    assert 8 == stats.count("stateless", "no_history")


async def test_tasks_share_one_client(server: ResponsesServer, aclient: openai.AsyncOpenAI) -> None:
    """Interleaved asyncio tasks on one client each chain from their own responses."""

    async def conversation(name: str) -> None:
        history: list[Any] = [{"role": "user", "content": f"{name} 0\n!sleep 5"}]
        for turn in range(1, 5):
            resp = await aclient.responses.create(model="scripted", input=history)
            assert_server_saw(server, resp.id, history)
            history = [*history, *resp.output, {"role": "user", "content": f"{name} {turn}"}]

    await asyncio.gather(*(conversation(f"task-{n}") for n in range(10)))

    assert 30 == anchortrack.tracker(aclient).stats.count("chained")
