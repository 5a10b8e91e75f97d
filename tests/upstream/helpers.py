"""Helpers for the bridge's tests: one call through the real openai client in each mode."""

from __future__ import annotations

import asyncio
import functools
import importlib
from typing import Any

import openai

from anchortrack.server import http_client_classes


#: The API key the bridge sends the fake provider.
API_KEY = "sk-upstream-secret-0123456789"

#: How a test reaches the bridge: create, create(stream=True), responses.stream(), async stream.
MODES = ("create", "stream", "helper", "async")

_TERMINAL = {
    "completed": "response.completed",
    "incomplete": "response.incomplete",
    "failed": "response.failed",
}


_SDK_ONLY = frozenset({"parsed", "parsed_arguments"})


def plain(value: Any) -> Any:
    """JSON data without the fields the SDK's parse helpers add."""
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items() if key not in _SDK_ONLY}
    if isinstance(value, list):
        return [plain(item) for item in value]
    return value


def check_events(events: list[Any]) -> dict[str, Any]:
    """Assert the shape of a Responses event stream; return the final response as JSON."""
    types = [event.type for event in events]
    assert types[:2] == ["response.created", "response.in_progress"], types
    assert [event.sequence_number for event in events] == list(range(len(events)))
    final: dict[str, Any] = plain(events[-1].response.to_dict())
    assert types[-1] == _TERMINAL[final["status"]], types
    assert events[0].response.id == final["id"]
    added = [event.output_index for event in events if event.type == "response.output_item.added"]
    done = {
        event.output_index: plain(event.item.to_dict())
        for event in events
        if event.type == "response.output_item.done"
    }
    assert sorted(added) == list(range(len(final["output"]))) == sorted(done)
    assert [done[index] for index in range(len(done))] == final["output"]
    return final


@functools.cache
def _ssl_context() -> Any:
    module = "httpx2" if int(openai.__version__.split(".")[0]) >= 3 else "httpx"
    return importlib.import_module(module).create_ssl_context()


async def _async_stream(base_url: str, params: dict[str, Any]) -> dict[str, Any]:
    _, async_class = http_client_classes()
    http = async_class(verify=_ssl_context())  # a fresh loop each call: a fresh client, cheaply
    async with openai.AsyncOpenAI(
        base_url=base_url, api_key="client-key", max_retries=0, http_client=http
    ) as client:
        stream = await client.responses.create(stream=True, **params)
        events = [event async for event in stream]
    return check_events(events)


def call(mode: str, client: openai.OpenAI, base_url: str, **params: Any) -> dict[str, Any]:
    """One ``responses`` call in *mode*; the final response as JSON."""
    if mode == "create":
        return client.responses.create(**params).to_dict()
    if mode == "stream":
        return check_events(list(client.responses.create(stream=True, **params)))
    if mode == "helper":
        with client.responses.stream(**params) as stream:
            events = list(stream)
        return check_events(events)
    return asyncio.run(_async_stream(base_url, params))


_VOLATILE = frozenset({"id", "created_at", "completed_at"})


def normalized(value: Any) -> Any:
    """*value* without the fields that differ between two identical answers (ids, times)."""
    if isinstance(value, dict):
        return {key: normalized(item) for key, item in value.items() if key not in _VOLATILE}
    if isinstance(value, list):
        return [normalized(item) for item in value]
    return value
