"""Fixtures of the WebSocket-mode tests: a local server with test hooks and plain openai clients."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import openai
import pytest

from anchortrack.server import ResponsesServer

from .helpers import Frames, Hooks


@pytest.fixture(scope="session", name="ws_server")
def _ws_server() -> Iterator[ResponsesServer]:
    """One local server (memory store, test hooks) shared by the WebSocket tests that leave it as found."""
    with ResponsesServer(store="memory", test_hooks=True) as srv:
        yield srv


@pytest.fixture(name="ws_own_server")
def _ws_own_server() -> Iterator[ResponsesServer]:
    """A server of the test's own, for tests that change server-wide settings (ZDR, limits)."""
    with ResponsesServer(store="memory", test_hooks=True) as srv:
        yield srv


@pytest.fixture(name="ws_hooks")
def _ws_hooks(ws_server: ResponsesServer) -> Iterator[Hooks]:
    hooks = Hooks(ws_server)
    yield hooks
    hooks.close()


@pytest.fixture(name="ws_client")
def _ws_client(ws_server: ResponsesServer) -> Iterator[openai.OpenAI]:
    """A plain, unwrapped sync client: ``base_url`` only, no WebSocket settings."""
    client = openai.OpenAI(base_url=ws_server.base_url, api_key="test", max_retries=0)
    yield client
    client.close()


@pytest.fixture(name="ws_aclient")
async def _ws_aclient(ws_server: ResponsesServer) -> AsyncIterator[openai.AsyncOpenAI]:
    """A plain, unwrapped async client."""
    client = openai.AsyncOpenAI(base_url=ws_server.base_url, api_key="test", max_retries=0)
    yield client
    await client.close()


@pytest.fixture(name="frames")
def _frames(ws_server: ResponsesServer) -> Frames:
    """The client frames the shared server receives during the test."""
    return Frames(ws_server)
