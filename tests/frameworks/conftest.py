"""Fixtures for the framework tests: one local server with deterministic ids, and a `Lab` on it."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any

import openai
import pytest

import anchortrack
from anchortrack.server import ResponsesServer

from .helpers import AnsweringState, Ids, Lab, spy


@pytest.fixture(scope="session", name="ids")
def _ids() -> Ids:
    return Ids()


@pytest.fixture(scope="session", name="framework_server")
def _framework_server(ids: Ids) -> Iterator[ResponsesServer]:
    """One local server whose scripted model draws deterministic ids."""
    with ResponsesServer(state=AnsweringState(ids)) as srv:
        yield srv


@pytest.fixture(name="lab")
async def _lab(
    framework_server: ResponsesServer, ids: Ids, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Lab]:
    """A `Lab`, with the spy installed on the tracked ``responses`` classes."""
    spied: list[dict[str, Any]] = []
    probe = openai.OpenAI(base_url=framework_server.base_url, api_key="test")
    aprobe = openai.AsyncOpenAI(base_url=framework_server.base_url, api_key="test")
    for client, is_async in ((probe, False), (aprobe, True)):
        resource_class = type(anchortrack.wrap(client).responses)
        for method in ("create", "parse"):
            original = getattr(resource_class, method)
            monkeypatch.setattr(resource_class, method, spy(spied, original, is_async=is_async))
    lab = Lab(framework_server, ids, spied)
    yield lab
    for run in lab.runs:
        run.client.close()
        await run.aclient.close()
    probe.close()
    await aprobe.close()


# pydantic-ai-slim 2.68 needs Python >= 3.11 (the `frameworks` extra installs it only there).
collect_ignore = ["test_pydantic_ai.py"] if sys.version_info < (3, 11) else []
