"""Load: hundreds of concurrent chained requests (async tasks and threads), nothing lost or mixed up."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import openai
import pytest

from anchortrack.server import ResponsesServer

from ..helpers import user_message
from .helpers import as_items, digest, make_client


ASYNC_CONVERSATIONS = 24
THREAD_CONVERSATIONS = 6
TURNS = 10

Seen = list[tuple[str, list[Any], str]]  # (response id, expected context, reply text)


def next_input(name: str, turn: int, last_output: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The new items of a turn: outputs for pending calls, or a user message."""
    calls = [item for item in last_output if item["type"] == "function_call"]
    if calls:
        return [
            {"type": "function_call_output", "call_id": call["call_id"], "output": f"{name}:{call['name']}"}
            for call in calls
        ]
    text = f"{name} turn {turn}"
    if turn in (3, 7):
        text += f'\n!call probe {{"conversation": "{name}"}}\n!call other {{}}'
    if turn % 3 == 0:
        text += "\n!sleep 2"
    return [user_message(text)]


async def async_conversation(client: openai.AsyncOpenAI, name: str, seen: Seen) -> None:
    history: list[Any] = []
    previous: str | None = None
    last_output: list[dict[str, Any]] = []
    for turn in range(TURNS):
        new = next_input(name, turn, last_output)
        extra: dict[str, Any] = {"previous_response_id": previous} if previous else {}
        if turn % 4 == 1:
            stream = await client.responses.create(model="scripted", input=new, stream=True, **extra)
            events = [event async for event in stream]
            assert events[-1].type == "response.completed"
            response = events[-1].response
        else:
            response = await client.responses.create(model="scripted", input=new, **extra)
        history += new
        seen.append((response.id, list(history), response.output_text))
        last_output = as_items(response.output)
        history += last_output
        previous = response.id


def thread_conversation(server: ResponsesServer, name: str, seen: Seen, errors: list[BaseException]) -> None:
    client = make_client(server)
    try:
        history: list[Any] = []
        previous: str | None = None
        last_output: list[dict[str, Any]] = []
        for turn in range(TURNS):
            new = next_input(name, turn, last_output)
            extra: dict[str, Any] = {"previous_response_id": previous} if previous else {}
            if turn % 4 == 2:
                with client.responses.stream(model="scripted", input=new, **extra) as stream:
                    response = stream.get_final_response()
            else:
                response = client.responses.create(model="scripted", input=new, **extra)
            history += new
            seen.append((response.id, list(history), response.output_text))
            last_output = as_items(response.output)
            history += last_output
            previous = response.id
    except BaseException as exc:  # pragma: no cover - reported by the test
        errors.append(exc)
    finally:
        client.close()


@pytest.mark.slow
async def test_concurrent_chained_conversations_lose_nothing(any_server: ResponsesServer) -> None:
    """300 chained requests over 30 concurrent conversations: every context is exactly its own."""
    stored_before = any_server.state.store.count()
    seen: Seen = []
    errors: list[BaseException] = []
    threads = [
        threading.Thread(target=thread_conversation, args=(any_server, f"thread-{n}", seen, errors))
        for n in range(THREAD_CONVERSATIONS)
    ]
    client = openai.AsyncOpenAI(base_url=any_server.base_url, api_key="test", max_retries=0)
    try:
        for thread in threads:
            thread.start()
        await asyncio.gather(
            *(async_conversation(client, f"task-{n}", seen) for n in range(ASYNC_CONVERSATIONS))
        )
    finally:
        await client.close()
        for thread in threads:
            await asyncio.to_thread(thread.join)

    total = (ASYNC_CONVERSATIONS + THREAD_CONVERSATIONS) * TURNS
    assert errors == []
    assert total == len(seen) == len({response_id for response_id, _, _ in seen})
    assert total == len(any_server.state.requests)
    assert stored_before + total == any_server.state.store.count()
    for response_id, expected, reply in seen:
        assert expected == any_server.state.resolved_context(response_id)
        if reply:
            assert f"[ctx:{digest(expected)}] [items:{len(expected)}]" in reply
    tool_results = [reply for _, _, reply in seen if reply.startswith("tool results:")]
    assert len(tool_results) == 2 * (ASYNC_CONVERSATIONS + THREAD_CONVERSATIONS)
    for reply in tool_results:
        owner = reply.split(":")[1].strip()
        assert reply.startswith(f"tool results: {owner}:probe | {owner}:other [ctx:")
