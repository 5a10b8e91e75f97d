"""
Where the demo keeps its anchors: the cache directory and ``demo.json``.

``anchortrack demo`` records its anchors in a SQLite file in the per-user
cache directory and writes ``demo.json`` beside it: the store, the scope the
anchors were recorded under (the demo's local server gets a new port each run)
and the request its agent would send next.
``anchortrack explain`` reads that record, so ``demo`` then ``explain`` needs
no flags.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import attrs

from .._hashing import Scope


#: The namespace the demo wraps its client with (part of the anchors' scope).
DEMO_NAMESPACE = "anchortrack-demo"
#: OpenAI's API base URL, the openai client's default.
OPENAI_BASE_URL = "https://api.openai.com/v1"


def cache_dir() -> Path:
    """``$XDG_CACHE_HOME/anchortrack``, or ``~/.cache/anchortrack``."""
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(root) / "anchortrack"


def default_store_spec() -> str:
    """The demo's default store: ``sqlite:<cache dir>/demo.db``."""
    return f"sqlite:{cache_dir() / 'demo.db'}"


@attrs.frozen
class DemoRecord:
    """
    What the last ``anchortrack demo`` run left behind (``demo.json``).

    Attributes:
        store: The store spec the anchors are in.
        scope: The scope they were recorded under.
        model: The model the demo used.
        request_file: A JSON request body: the next call its agent would make.
    """

    store: str
    scope: Scope
    model: str
    request_file: str

    def to_dict(self) -> dict[str, Any]:
        """Return the record as JSON data."""
        return {
            "store": self.store,
            "base_url": self.scope.base_url,
            "organization": self.scope.organization,
            "project": self.scope.project,
            "namespace": self.scope.namespace,
            "api_key_digest": self.scope.api_key_digest,
            "model": self.model,
            "request_file": self.request_file,
        }

    def save(self, path: Path | None = None) -> Path:
        """Write the record (default: ``<cache dir>/demo.json``); return its path."""
        path = path or cache_dir() / "demo.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=2) + "\n", encoding="utf-8")
        return path

    @classmethod
    def load(cls, path: Path | None = None) -> DemoRecord | None:
        """Read the record, or return None when there is none (or it is unreadable)."""
        path = path or cache_dir() / "demo.json"
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            scope = Scope(
                base_url=str(data["base_url"]),
                organization=data.get("organization"),
                project=data.get("project"),
                namespace=data.get("namespace"),
                api_key_digest=data.get("api_key_digest"),
            )
            return cls(str(data["store"]), scope, str(data["model"]), str(data["request_file"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None
