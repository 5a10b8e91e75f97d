"""Validate request bodies against OpenAI's ``CreateResponse`` schema (extracted into tests/data)."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import jsonschema


_SCHEMA_FILE = Path(__file__).resolve().parent.parent / "data" / "create_response.schema.json"


@functools.cache
def _validator() -> jsonschema.protocols.Validator:
    doc = json.loads(_SCHEMA_FILE.read_text())
    schema = {"components": doc["components"], "$ref": "#/components/schemas/CreateResponse"}
    cls = jsonschema.validators.Draft202012Validator
    return cls(schema)  # type: ignore[no-any-return]


def validate_create_response(body: dict[str, Any]) -> None:
    """
    Raise if *body* is not a valid ``CreateResponse``.

    ``stream`` is checked by the schema too; nothing is stripped.
    """
    errors = sorted(_validator().iter_errors(body), key=lambda e: list(e.path))
    if errors:
        best = jsonschema.exceptions.best_match(errors)
        raise AssertionError(
            f"request body does not validate against CreateResponse: {best.message} at {list(best.path)}"
        )
