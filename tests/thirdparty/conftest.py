"""
Fixtures for the third-party suite (see `tests.thirdparty.helpers`).

In CI (``CI=true``) a missing agentic-api binary fails the suite; elsewhere it is skipped.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator

import openai
import pytest

import anchortrack
from anchortrack.server import WireTap, http_client_classes
from anchortrack.stores import MemoryStore

from ._upstream import FakeModel
from .helpers import AgenticAPI, agentic_binary


@pytest.fixture(scope="session", name="agentic_binary")
def _agentic_binary_fixture() -> str:
    binary = agentic_binary()
    if binary is None:
        message = "agentic-api is not installed: pip install -e . --group thirdparty"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{message} (CI must run the third-party suite)", pytrace=False)
        pytest.skip(message)
    return binary


@pytest.fixture(scope="module", name="upstream")
def _upstream() -> Iterator[FakeModel]:
    model = FakeModel().start()
    yield model
    model.stop()


@pytest.fixture(scope="module", name="gateway")
def _gateway(
    agentic_binary: str, upstream: FakeModel, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[AgenticAPI]:
    gateway = AgenticAPI(agentic_binary, upstream, tmp_path_factory.mktemp("agentic"))
    gateway.start()
    yield gateway
    gateway.stop()


@pytest.fixture(name="raw_client")
def _raw_client(gateway: AgenticAPI, wire: WireTap) -> Iterator[openai.OpenAI]:
    sync, _ = http_client_classes()
    client = openai.OpenAI(
        base_url=gateway.base_url,
        api_key="test",
        max_retries=0,
        http_client=sync(event_hooks={"request": [wire.hook]}),
    )
    yield client
    client.close()


@pytest.fixture(name="raw_aclient")
async def _raw_aclient(gateway: AgenticAPI, wire: WireTap) -> AsyncIterator[openai.AsyncOpenAI]:
    _, asyn = http_client_classes()
    client = openai.AsyncOpenAI(
        base_url=gateway.base_url,
        api_key="test",
        max_retries=0,
        http_client=asyn(event_hooks={"request": [wire.ahook]}),
    )
    yield client
    await client.close()


@pytest.fixture(name="client")
def _client(raw_client: openai.OpenAI) -> openai.OpenAI:
    return anchortrack.wrap(raw_client, store=MemoryStore())


@pytest.fixture(name="aclient")
def _aclient(raw_aclient: openai.AsyncOpenAI) -> openai.AsyncOpenAI:
    return anchortrack.wrap(raw_aclient, store=MemoryStore())
