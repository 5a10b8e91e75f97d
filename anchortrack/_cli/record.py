"""What ``anchortrack demo`` leaves for ``anchortrack explain`` (``demo.json`` in the cache directory): the
store, the scope (the local server has a new port each run) and the agent's next request.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import attrs

from .._hashing import Scope


#: The namespace the demo wraps its client with (part of the anchors' scope).
DEMO_NAMESPACE = "anchortrack-demo"
#: OpenAI's API base URL, the openai client's default (``demo --openai``).
OPENAI_BASE_URL = "https://api.openai.com/v1"


def cache_dir() -> Path:
    """``$XDG_CACHE_HOME/anchortrack``, or ``~/.cache/anchortrack``."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "anchortrack"


@attrs.frozen
class DemoRecord:
    """What the last ``anchortrack demo`` run left behind (``demo.json``)."""

    store: str  # the store spec the anchors are in
    scope: Scope  # the scope they were recorded under
    model: str
    request_file: str  # a JSON request body: the next call the demo's agent would make

    def save(self, path: Path | None = None) -> None:
        """Write the record (default: ``<cache dir>/demo.json``)."""
        path = path or cache_dir() / "demo.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        data = {**attrs.asdict(self, recurse=False), **attrs.asdict(self.scope)}
        del data["scope"]
        path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")

    @classmethod
    def load(cls) -> DemoRecord | None:
        """Read ``<cache dir>/demo.json``, or return None when there is none (or it is unreadable)."""
        try:
            data = json.loads((cache_dir() / "demo.json").read_text(encoding="utf-8"))
            parts = ("organization", "project", "namespace", "api_key_digest")
            scope = Scope(str(data["base_url"]), *(data.get(part) for part in parts))
            return cls(str(data["store"]), scope, str(data["model"]), str(data["request_file"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None
