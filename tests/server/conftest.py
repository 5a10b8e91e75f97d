"""
Fixtures for the local Responses server's own tests.

The names say what they are, so they never shadow the suite's wrapped ``client`` or its session
``server``: ``fake_server`` (the shared memory-store server, reset), ``plain_client`` and
``plain_aclient`` (unwrapped openai clients for it), ``any_server``/``any_client`` (each store
backend in turn), ``response_store`` (a fresh server-side store of each backend).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import openai
import pytest

from anchortrack.server import ResponsesServer
from anchortrack.server._records import MemoryResponseStore, ResponseStore, SQLiteResponseStore

from ..helpers import FakeClock
from .helpers import make_client


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


@pytest.fixture(name="fake_server")
def _fake_server(memory_server: ResponsesServer) -> Iterator[ResponsesServer]:
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


@pytest.fixture(name="plain_client")
def _plain_client(fake_server: ResponsesServer) -> Iterator[openai.OpenAI]:
    """A plain (unwrapped) sync client for ``fake_server``."""
    client = make_client(fake_server)
    yield client
    client.close()


@pytest.fixture(name="any_client")
def _any_client(any_server: ResponsesServer) -> Iterator[openai.OpenAI]:
    """A plain (unwrapped) sync client for ``any_server``."""
    client = make_client(any_server)
    yield client
    client.close()


@pytest.fixture(name="plain_aclient")
async def _plain_aclient(fake_server: ResponsesServer) -> AsyncIterator[openai.AsyncOpenAI]:
    """A plain (unwrapped) async client for ``fake_server``."""
    client = openai.AsyncOpenAI(base_url=fake_server.base_url, api_key="test", max_retries=0)
    yield client
    await client.close()


@pytest.fixture(name="clock")
def _clock() -> FakeClock:
    return FakeClock(1_000_000.0)


@pytest.fixture(name="response_store", params=["memory", "sqlite"])
def _response_store(
    request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock
) -> Iterator[ResponseStore]:
    """A fresh server-side store of each backend, on the fake clock, keeping records 100 seconds."""
    store: ResponseStore
    if request.param == "memory":
        store = MemoryResponseStore(retention=100, clock=clock)
    else:
        store = SQLiteResponseStore(tmp_path / "store.db", retention=100, clock=clock)
    yield store
    store.close()
