"""Builders shared by the test suite (items, fake responses, a dict store for pure unit tests)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

from anchortrack import Anchor, Scope, record_response


SCOPE = Scope("http://127.0.0.1:1/v1")
_ids = itertools.count(1)


def user(text: str) -> dict[str, Any]:
    """A user message in the shorthand form."""
    return {"role": "user", "content": text}


def system(text: str) -> dict[str, Any]:
    """A system message in the shorthand form."""
    return {"role": "system", "content": text}


def assistant(text: str) -> dict[str, Any]:
    """An assistant message as the server returns it."""
    return {
        "id": f"msg_{next(_ids)}",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def call(name: str, call_id: str, arguments: str = "{}") -> dict[str, Any]:
    """A function call as the server returns it."""
    return {
        "id": f"fc_{next(_ids)}",
        "type": "function_call",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": "completed",
    }


def output(call_id: str, text: str) -> dict[str, Any]:
    """A function call output as a caller appends it."""
    return {"type": "function_call_output", "call_id": call_id, "output": text}


def response(outputs: Sequence[Any], status: str = "completed", rid: str | None = None) -> Any:
    """A stand-in for an SDK Response with the fields anchortrack reads."""
    return SimpleNamespace(id=rid or f"resp_{next(_ids)}", status=status, output=list(outputs))


def turn(store: Any, history: Sequence[Any], outputs: Sequence[Any], *, scope: Scope = SCOPE) -> str:
    """Record a completed response to *history* producing *outputs*; return its id."""
    resp = response(outputs)
    anchor = record_response(history, resp, scope=scope, store=store)
    assert anchor is not None
    return str(resp.id)


class DictStore:
    """A minimal in-memory AnchorStore for pure unit tests (never the only proof)."""

    def __init__(self, ttl: float = 3600.0, secret_key: bytes | None = None) -> None:
        self.ttl = ttl
        self.secret_key = secret_key
        self.views: dict[tuple[str, bytes], Anchor] = {}
        self.ids: dict[tuple[str, str], Anchor] = {}
        self.calls: list[str] = []

    def find(self, scope: str, views: Sequence[bytes]) -> dict[bytes, Anchor]:
        self.calls.append("find")
        return {v: self.views[scope, v] for v in views if (scope, v) in self.views}

    def get(self, scope: str, response_id: str) -> Anchor | None:
        self.calls.append("get")
        return self.ids.get((scope, response_id))

    def put(self, scope: str, anchor: Anchor) -> None:
        self.calls.append("put")
        self.views[scope, anchor.view] = anchor
        self.ids[scope, anchor.response_id] = anchor

    def evict(self, scope: str, response_id: str) -> None:
        self.calls.append("evict")
        anchor = self.ids.pop((scope, response_id), None)
        if anchor is not None and self.views.get((scope, anchor.view)) == anchor:
            del self.views[scope, anchor.view]

    async def afind(self, scope: str, views: Sequence[bytes]) -> dict[bytes, Anchor]:
        return self.find(scope, views)

    async def aget(self, scope: str, response_id: str) -> Anchor | None:
        return self.get(scope, response_id)

    async def aput(self, scope: str, anchor: Anchor) -> None:
        self.put(scope, anchor)

    async def aevict(self, scope: str, response_id: str) -> None:
        self.evict(scope, response_id)
