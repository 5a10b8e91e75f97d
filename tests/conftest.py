"""Fixtures shared by the whole suite: the local Responses server and real openai clients."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import openai
import pytest
import structlog

import anchortrack
from anchortrack._wire import http_client_classes
from anchortrack.server import ResponsesServer
from anchortrack.stores import MemoryStore


class Wire:
    """The raw request bodies a client put on the wire, in order."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    def hook(self, request: Any) -> None:
        if request.method == "POST" and request.url.path.endswith("/responses"):
            self.bodies.append(bytes(request.content))

    async def ahook(self, request: Any) -> None:
        self.hook(request)


@pytest.fixture(autouse=True)
def _structlog_defaults() -> Iterator[None]:
    """capture_logs() leaves structlog "configured"; start and end every test with the defaults."""
    structlog.reset_defaults()
    yield
    structlog.reset_defaults()


@pytest.fixture(scope="session", name="server")
def _server() -> Iterator[ResponsesServer]:
    """One local Responses server (memory store) on a free loopback port."""
    with ResponsesServer(store="memory") as srv:
        yield srv


@pytest.fixture(name="wire")
def _wire() -> Wire:
    return Wire()


@pytest.fixture(name="raw_client")
def _raw_client(server: ResponsesServer, wire: Wire) -> Iterator[openai.OpenAI]:
    """A plain (unwrapped) sync client talking to the local server, with its bytes captured."""
    sync, _ = http_client_classes()
    http = sync(event_hooks={"request": [wire.hook]})
    client = openai.OpenAI(base_url=server.base_url, api_key="test", http_client=http, max_retries=0)
    yield client
    client.close()


@pytest.fixture(name="raw_aclient")
async def _raw_aclient(server: ResponsesServer, wire: Wire) -> AsyncIterator[openai.AsyncOpenAI]:
    """A plain (unwrapped) async client talking to the local server, with its bytes captured."""
    _, asyn = http_client_classes()
    http = asyn(event_hooks={"request": [wire.ahook]})
    client = openai.AsyncOpenAI(base_url=server.base_url, api_key="test", http_client=http, max_retries=0)
    yield client
    await client.close()


@pytest.fixture(name="store")
def _store() -> MemoryStore:
    return MemoryStore()


@pytest.fixture(name="client")
def _client(raw_client: openai.OpenAI, store: MemoryStore) -> openai.OpenAI:
    """A wrapped sync client with its own memory store."""
    return anchortrack.wrap(raw_client, store=store)


@pytest.fixture(name="aclient")
def _aclient(raw_aclient: openai.AsyncOpenAI, store: MemoryStore) -> openai.AsyncOpenAI:
    """A wrapped async client with its own memory store."""
    return anchortrack.wrap(raw_aclient, store=store)
