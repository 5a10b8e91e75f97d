"""
Extract OpenAI's ``CreateResponse`` request schema (and what it references)
from the OpenAPI spec into ``tests/data/create_response.schema.json``.

Usage: python scripts/extract_schema.py PATH/TO/openai-openapi.yaml
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml


def _refs(node: Any, out: set[str]) -> None:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/components/schemas/"):
            out.add(ref.rsplit("/", 1)[1])
        for value in node.values():
            _refs(value, out)
    elif isinstance(node, list):
        for value in node:
            _refs(value, out)


def main(spec_path: str) -> None:
    spec = yaml.safe_load(Path(spec_path).read_text())
    schemas = spec["components"]["schemas"]
    todo, seen = ["CreateResponse"], set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        found: set[str] = set()
        _refs(schemas[name], found)
        todo.extend(found - seen)
    out = {
        "$comment": "Extracted from OpenAI's OpenAPI spec (openai/openai-openapi) by scripts/extract_schema.py.",
        "openapi_version": spec["info"]["version"],
        "root": "CreateResponse",
        "components": {"schemas": {name: schemas[name] for name in sorted(seen)}},
    }
    target = Path(__file__).resolve().parent.parent / "tests" / "data" / "create_response.schema.json"
    target.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    print(f"{len(seen)} schemas -> {target} ({target.stat().st_size} bytes)")


if __name__ == "__main__":
    main(sys.argv[1])
