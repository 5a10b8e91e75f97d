"""
Helpers shared by the whole test suite (the one home for them; conftest files hold fixtures only).

* time: `FakeClock`;
* items and histories: `user`, `user_message`, `system`, `assistant`, `call`, `output`, `canon`,
  `dumped`;
* the wire and the local server: `sent` (one body a `WireTap` saw), `assert_server_saw` (I1);
* wrapped clients: `ask`, `conversation`, `scope_of`, `BreakableStore`;
* pure unit tests: `response`, `turn`, `DictStore`.

Folder-only helpers live in that folder's ``helpers.py``.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import openai

import anchortrack
from anchortrack import Anchor, Scope, record_response
from anchortrack._canonical import canonical_item
from anchortrack.server import ResponsesServer, WireTap
from anchortrack.stores import MemoryStore


SCOPE = Scope("http://127.0.0.1:1/v1")
_ids = itertools.count(1)


class FakeClock:
    """
    A clock that moves only when told to.

    Args:
        now: The start time; the real time when not given (Redis expiries are absolute).
    """

    def __init__(self, now: float | None = None) -> None:
        self.now = time.time() if now is None else now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def user(text: str) -> dict[str, Any]:
    """A user message in the shorthand form."""
    return {"role": "user", "content": text}


def function_tools(*names: str) -> list[dict[str, Any]]:
    """Function tool definitions, rebuilt on every call as frameworks do."""
    return [
        {
            "type": "function",
            "name": name,
            "parameters": {"type": "object", "properties": {}},
            "strict": False,
        }
        for name in names
    ]


def user_message(text: str) -> dict[str, Any]:
    """A user message item in the explicit form a string input stands for (as the server stores it)."""
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


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


def canon(items: Sequence[Any] | str) -> list[dict[str, Any]]:
    """The canonical forms of a history (a string is one user message)."""
    if isinstance(items, str):
        items = [items]
    return [canonical_item(i) for i in items]


def dumped(history: Sequence[Any]) -> list[Any]:
    """The history as JSON data (SDK output models dumped)."""
    return [i if isinstance(i, dict) else i.to_dict(mode="json") for i in history]


def sent(wire: WireTap, index: int = -1) -> dict[str, Any]:
    """The JSON of one body the client sent."""
    body: dict[str, Any] = json.loads(wire.bodies[index])
    return body


def assert_server_saw(server: ResponsesServer, response_id: str, history: Sequence[Any] | str) -> None:
    """I1: the context the server resolved for *response_id* is item-for-item *history*."""
    assert canon(history) == canon(server.state.resolved_context(response_id))


def scope_of(client: openai.OpenAI) -> Scope:
    """The scope a wrapped client records its anchors under."""
    return anchortrack.tracker(client).scope_for(client)


def ask(client: openai.OpenAI, history: Sequence[Any], text: str, **params: Any) -> tuple[list[Any], Any]:
    """Append a user message, call the model, append its output; return (history, response)."""
    before = [*history, user(text)]
    resp = client.responses.create(model="scripted", input=before, **params)
    return [*before, *resp.output], resp


def conversation(client: openai.OpenAI) -> tuple[list[Any], list[str]]:
    """
    Two turns with a tool call through *client*, as JSON data, and the three response ids.

    The history is [system, user, call, output, assistant, user, assistant].
    """
    history: list[Any] = [{"role": "system", "content": "be brief"}]
    history, first = ask(client, history, 'weather?\n!call get_weather {"city": "Oslo"}')
    history = [
        *history,
        {"type": "function_call_output", "call_id": first.output[0].call_id, "output": "-3C"},
    ]
    resp = client.responses.create(model="scripted", input=history)
    history = [*history, *resp.output]
    history, last = ask(client, history, "thanks")
    return dumped(history), [first.id, resp.id, last.id]


class BreakableStore(MemoryStore):
    """A memory store whose every operation raises while ``broken`` is set."""

    never_blocks = True  # its overrides never block either: the tracker runs it inline like MemoryStore
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


# -- what the installed openai SDK offers (the declared floor lacks some of it) ---------------------


def _websocket_untracked() -> str | None:
    from anchortrack._seams import missing_websocket

    if not hasattr(openai.resources.responses.Responses, "connect"):
        return "the SDK has no responses.connect() (WebSocket mode, openai >= 2.22)"
    missing = missing_websocket()
    return None if missing is None else f"the SDK lacks {missing}, which WebSocket tracking needs"


#: Why ``responses.connect()`` of a wrapped client is not tracked with the installed SDK (None: it is).
WEBSOCKET_UNTRACKED = _websocket_untracked()
