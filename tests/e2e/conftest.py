"""Fixtures for end-to-end tests: wrapped clients on the local server, equivalence checks."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest

from anchortrack._canonical import canonical_item
from anchortrack.server import ResponsesServer

from ..conftest import Wire
from .schema import validate_create_response


@pytest.fixture(autouse=True)
def _bodies_validate(wire: Wire) -> Any:
    """Every request body a test put on the wire validates against OpenAI's CreateResponse."""
    yield
    for raw in wire.bodies:
        validate_create_response(json.loads(raw))


def canon(items: Sequence[Any] | str) -> list[dict[str, Any]]:
    """The canonical forms of a history (a string is one user message)."""
    if isinstance(items, str):
        items = [items]
    return [canonical_item(i) for i in items]


def assert_server_saw(server: ResponsesServer, response_id: str, history: Sequence[Any] | str) -> None:
    """I1: the context the server resolved for *response_id* is item-for-item *history*."""
    assert canon(history) == canon(server.state.resolved_context(response_id))


def sent(wire: Wire, index: int = -1) -> dict[str, Any]:
    """The JSON of one body the client sent."""
    body: dict[str, Any] = json.loads(wire.bodies[index])
    return body
