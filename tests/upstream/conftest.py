"""Fixtures for the upstream bridge: a fake Chat Completions provider and a server in front of it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import openai
import pytest

from anchortrack.server import ResponsesServer, Upstream

from .helpers import API_KEY
from .provider import FakeProvider


@pytest.fixture(scope="session", name="provider_session")
def _provider_session() -> Iterator[FakeProvider]:
    provider = FakeProvider().start()
    yield provider
    provider.stop()


@pytest.fixture(name="provider")
def _provider(provider_session: FakeProvider) -> Iterator[FakeProvider]:
    """The fake provider, with no queued replies and no recorded requests."""
    provider_session.reset()
    yield provider_session
    provider_session.reset()


@pytest.fixture(scope="session", name="bridge_session")
def _bridge_session(provider_session: FakeProvider) -> Iterator[ResponsesServer]:
    upstream = Upstream(provider_session.base_url, api_key=API_KEY, timeout=10)
    with ResponsesServer(store="memory", upstream=upstream) as srv:
        yield srv


@pytest.fixture(name="bridge")
def _bridge(bridge_session: ResponsesServer, provider: FakeProvider) -> ResponsesServer:
    """A Responses server answering through the fake provider (memory store)."""
    backend = bridge_session.state.backend
    assert isinstance(backend, Upstream)
    backend._degrade = False  # json_schema degradation is remembered per upstream
    return bridge_session


@pytest.fixture(scope="session", name="bridge_client_session")
def _bridge_client_session(bridge_session: ResponsesServer) -> Iterator[openai.OpenAI]:
    client = openai.OpenAI(base_url=bridge_session.base_url, api_key="client-key", max_retries=0)
    yield client
    client.close()


@pytest.fixture(name="bridge_client")
def _bridge_client(bridge: ResponsesServer, bridge_client_session: openai.OpenAI) -> openai.OpenAI:
    """A plain sync openai client for the bridge (never retries)."""
    return bridge_client_session


@pytest.fixture(name="bridge_aclient")
async def _bridge_aclient(bridge: ResponsesServer) -> AsyncIterator[openai.AsyncOpenAI]:
    client = openai.AsyncOpenAI(base_url=bridge.base_url, api_key="client-key", max_retries=0)
    yield client
    await client.close()
