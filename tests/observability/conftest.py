"""Fixtures for the operator-experience tests: wrapped clients, captured events, a breakable store."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import openai

from anchortrack import Anchor, Scope
from anchortrack.stores import MemoryStore


def scope_of(client: openai.OpenAI, namespace: str | None = None) -> Scope:
    """The scope a wrapped client records its anchors under."""
    return Scope(base_url=str(client.base_url), namespace=namespace)


def user(text: str) -> Any:
    """A user message in the shorthand form (typed Any: the SDK's input union is narrow)."""
    return {"role": "user", "content": text}


def ask(client: openai.OpenAI, history: Sequence[Any], text: str, **params: Any) -> tuple[list[Any], Any]:
    """Append a user message, call the model, append its output; return (history, response)."""
    sent = [*history, user(text)]
    resp = client.responses.create(model="scripted", input=sent, **params)
    return [*sent, *resp.output], resp


class BreakableStore(MemoryStore):
    """A memory store whose every operation raises while ``broken`` is set."""

    broken = False

    def _check(self) -> None:
        if self.broken:
            raise ConnectionError("store down")

    def find(self, scope: str, views: Sequence[bytes]) -> dict[bytes, Anchor]:
        self._check()
        return super().find(scope, views)

    def put(self, scope: str, anchor: Anchor) -> None:
        self._check()
        super().put(scope, anchor)
