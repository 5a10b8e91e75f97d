"""Fixtures for the local Responses server's own tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import openai
import pytest

from anchortrack.server import (
    MemoryResponseStore,
    ResponsesServer,
    ResponseStore,
    SQLiteResponseStore,
)

from .support import FakeClock, make_client


def _reset(server: ResponsesServer) -> None:
    server.state.zdr = False
    server.state.reset_requests()


@pytest.fixture(scope="session", name="memory_server")
def _memory_server() -> Iterator[ResponsesServer]:
    with ResponsesServer(store="memory") as srv:
        yield srv


@pytest.fixture(scope="session", name="sqlite_server")
def _sqlite_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ResponsesServer]:
    path = tmp_path_factory.mktemp("sqlite-server") / "responses.db"
    with ResponsesServer(store=f"sqlite:{path}") as srv:
        yield srv


@pytest.fixture(name="server")
def _server(memory_server: ResponsesServer) -> Iterator[ResponsesServer]:
    """The shared memory-store server, with ZDR off and an empty request log."""
    _reset(memory_server)
    yield memory_server
    _reset(memory_server)


@pytest.fixture(name="any_server", params=["memory", "sqlite"])
def _any_server(request: pytest.FixtureRequest) -> Iterator[ResponsesServer]:
    """The shared server of each store backend in turn."""
    srv: ResponsesServer = request.getfixturevalue(f"{request.param}_server")
    _reset(srv)
    yield srv
    _reset(srv)


@pytest.fixture(name="client")
def _client(server: ResponsesServer) -> Iterator[openai.OpenAI]:
    client = make_client(server)
    yield client
    client.close()


@pytest.fixture(name="any_client")
def _any_client(any_server: ResponsesServer) -> Iterator[openai.OpenAI]:
    client = make_client(any_server)
    yield client
    client.close()


@pytest.fixture(name="aclient")
async def _aclient(server: ResponsesServer) -> AsyncIterator[openai.AsyncOpenAI]:
    client = openai.AsyncOpenAI(base_url=server.base_url, api_key="test", max_retries=0)
    yield client
    await client.close()


@pytest.fixture(name="clock")
def _clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(name="store", params=["memory", "sqlite"])
def _store(request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock) -> Iterator[ResponseStore]:
    """A fresh store of each backend, on the fake clock, keeping records 100 seconds."""
    store: ResponseStore
    if request.param == "memory":
        store = MemoryResponseStore(retention=100, clock=clock)
    else:
        store = SQLiteResponseStore(tmp_path / "store.db", retention=100, clock=clock)
    yield store
    store.close()
