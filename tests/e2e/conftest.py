"""Fixtures for end-to-end tests: every request body on the wire is checked against OpenAI's schema."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from anchortrack.server import WireTap

from .schema import validate_create_response


@pytest.fixture(autouse=True)
def _bodies_validate(wire: WireTap) -> Iterator[None]:
    """Every request body a test put on the wire validates against OpenAI's CreateResponse."""
    yield
    for raw in wire.bodies:
        validate_create_response(json.loads(raw))
