"""
Fixtures shared by the whole suite: the local Responses server and real openai clients.

Fixture names mean one thing everywhere: ``client``/``aclient`` are wrapped clients, and
``raw_client``/``raw_aclient`` the plain clients under them; ``server`` is the session's local
server; ``wire`` is the `WireTap` that saw every request body the raw clients sent.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator

import openai
import pytest
import structlog

import anchortrack
from anchortrack.server import ResponsesServer, WireTap
from anchortrack.stores import MemoryStore


# A shell may hold anchortrack's own variables (ANCHORTRACK_MODE=shadow while trying a rollout): the suite,
# and every process it starts, runs without them; a test that needs one sets it. Its own knobs stay.
for _name in [name for name in os.environ if name.startswith("ANCHORTRACK_")]:
    if not _name.startswith("ANCHORTRACK_TEST_"):
        del os.environ[_name]


@pytest.fixture(autouse=True)
def _structlog_defaults() -> Iterator[None]:
    """capture_logs() leaves structlog "configured"; start and end every test with the defaults."""
    structlog.reset_defaults()
    yield
    structlog.reset_defaults()


@pytest.fixture(autouse=True)
def _fresh_default_store(monkeypatch: pytest.MonkeyPatch) -> None:
    """Clients wrapped without store= share one process-wide store; each test starts with an empty one."""
    monkeypatch.setattr("anchortrack.stores._open._default", None)


@pytest.fixture(scope="session", name="server")
def _server() -> Iterator[ResponsesServer]:
    """One local Responses server (memory store) on a free loopback port."""
    with ResponsesServer(store="memory") as srv:
        yield srv


@pytest.fixture(name="wire")
def _wire() -> WireTap:
    """The request bodies the test's raw clients put on the wire, in order."""
    return WireTap()


@pytest.fixture(name="raw_client")
def _raw_client(server: ResponsesServer, wire: WireTap) -> Iterator[openai.OpenAI]:
    """A plain (unwrapped) sync client talking to the local server, with its bytes captured."""
    client = openai.OpenAI(
        base_url=server.base_url, api_key="test", http_client=wire.http_client(), max_retries=0
    )
    yield client
    client.close()


@pytest.fixture(name="raw_aclient")
async def _raw_aclient(server: ResponsesServer, wire: WireTap) -> AsyncIterator[openai.AsyncOpenAI]:
    """A plain (unwrapped) async client talking to the local server, with its bytes captured."""
    client = openai.AsyncOpenAI(
        base_url=server.base_url, api_key="test", http_client=wire.async_http_client(), max_retries=0
    )
    yield client
    await client.close()


@pytest.fixture(name="store")
def _store() -> MemoryStore:
    """The anchor store of ``client`` and ``aclient``."""
    return MemoryStore()


@pytest.fixture(name="client")
def _client(raw_client: openai.OpenAI, store: MemoryStore) -> openai.OpenAI:
    """A wrapped sync client with its own memory store."""
    return anchortrack.wrap(raw_client, store=store)


@pytest.fixture(name="aclient")
def _aclient(raw_aclient: openai.AsyncOpenAI, store: MemoryStore) -> openai.AsyncOpenAI:
    """A wrapped async client with its own memory store."""
    return anchortrack.wrap(raw_aclient, store=store)
