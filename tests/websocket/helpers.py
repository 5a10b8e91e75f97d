"""Helpers for the WebSocket-mode tests: collecting turns, item builders, the server's test hooks."""

from __future__ import annotations

import importlib.util
import inspect
import json
import time
from collections.abc import AsyncIterable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from openai.resources.responses.responses import ResponsesResponseResource

from anchortrack._canonical import canonical_item
from anchortrack.server import ResponsesServer, http_client_classes


# -- what the installed SDK's WebSocket mode offers (openai 2.x has ``connect()`` without these) --------

_CREATE_PARAMS = inspect.signature(ResponsesResponseResource.create).parameters

#: The SDK's sessions with routed lanes, for ``pytest.importorskip(SESSIONS, reason=NO_SESSIONS)``.
SESSIONS = "openai.lib.responses_websocket"
NO_SESSIONS = f"the SDK has no WebSocket sessions ({SESSIONS})"

needs_lanes = pytest.mark.skipif(
    "stream_id" not in _CREATE_PARAMS,
    reason="the SDK's conn.response.create() has no stream_id (named lanes)",
)
needs_warm_up = pytest.mark.skipif(
    "generate" not in _CREATE_PARAMS,
    reason="the SDK's conn.response.create() has no generate (warm-up)",
)
#: openai 3's shared WebSocket connection layer connects to an http(s) ``websocket_base_url`` as ws(s) and
#: reconnects after a 1001 (going away) close; openai 2.x, without it, hands the URL to ``websockets`` as
#: given (which wants ws(s)) and ends iteration at a 1000 or 1001 close. (2.x also queues a send that failed
#: on a closed socket and sends it again after reconnecting; 3.x raises and drops it.)
_CONNECTION_LAYER = importlib.util.find_spec("openai._websocket_connection") is not None
needs_http_websocket_base_url = pytest.mark.skipif(
    not _CONNECTION_LAYER,
    reason="the SDK does not map an http(s) websocket_base_url to ws(s) when connecting",
)
needs_resend_of_failed_sends = pytest.mark.skipif(
    _CONNECTION_LAYER,
    reason="the SDK raises a send that failed on a closed socket and drops it (it never sends it again)",
)
needs_reconnect_after_going_away = pytest.mark.skipif(
    not _CONNECTION_LAYER,
    reason="the SDK ends iteration at a 1001 (going away) close instead of reconnecting",
)


TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})


@dataclass
class Turn:
    """The events of one response (or one error frame) received on a socket."""

    events: list[Any] = field(default_factory=list)

    @property
    def last(self) -> Any:
        return self.events[-1]

    @property
    def error(self) -> dict[str, Any] | None:
        """The error frame as a dict, when the turn ended with one."""
        last = self.last
        return last.to_dict() if last.type == "error" else None

    @property
    def response(self) -> Any:
        """The terminal event's response (fails for an error frame)."""
        assert self.last.type in TERMINAL, self.error
        return self.last.response

    @property
    def types(self) -> list[str]:
        return [event.type for event in self.events]


def _ends_turn(event: Any) -> bool:
    return bool(event.type in TERMINAL or event.type == "error")


def collect(events: Iterable[Any]) -> Turn:
    """Read events until a terminal event or an error frame."""
    turn = Turn()
    for event in events:
        turn.events.append(event)
        if _ends_turn(event):
            return turn
    raise AssertionError(f"the socket closed mid-turn after {turn.types}")


async def acollect(events: AsyncIterable[Any]) -> Turn:
    """Async twin of :func:`collect`."""
    turn = Turn()
    async for event in events:
        turn.events.append(event)
        if _ends_turn(event):
            return turn
    raise AssertionError(f"the socket closed mid-turn after {turn.types}")


def user(text: str) -> dict[str, Any]:
    """A user message item."""
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def output_items(response: Any) -> list[dict[str, Any]]:
    """A response's output as input items (what a caller appends to its history)."""
    return [item.to_dict(exclude_none=True) for item in response.output]


def function_calls(response: Any) -> list[Any]:
    return [item for item in response.output if item.type == "function_call"]


def canon(items: Sequence[Any]) -> list[dict[str, Any]]:
    return [canonical_item(item) for item in items]


def assert_server_saw(server: ResponsesServer, response_id: str, history: Sequence[Any]) -> None:
    """The context the server resolved for *response_id* is item-for-item *history*."""
    assert canon(history) == canon(server.state.resolved_context(response_id))


def not_found_frame(response_id: str, stream_id: str | None = None) -> dict[str, Any]:
    """The exact error frame of a stale ``previous_response_id`` (as the SDK parses it)."""
    frame: dict[str, Any] = {
        "type": "error",
        "status": 400,
        "error": {
            "type": "invalid_request_error",
            "code": "previous_response_not_found",
            "message": f"Previous response with id '{response_id}' not found.",
            "param": "previous_response_id",
        },
    }
    if stream_id is not None:
        frame["stream_id"] = stream_id
    return frame


class Hooks:
    """The server's ``/_test`` hooks over real HTTP (with the openai client's own HTTP stack)."""

    def __init__(self, server: ResponsesServer) -> None:
        sync, _ = http_client_classes()
        self._http: Any = sync(base_url=server.url, timeout=30)

    def close(self) -> None:
        self._http.close()

    def connections(self) -> list[dict[str, Any]]:
        reply = self._http.get("/_test/websockets")
        assert reply.status_code == 200
        data: list[dict[str, Any]] = reply.json()["data"]
        return data

    def drop(self, connection_id: str, *, code: int = 1012, when: str = "now") -> dict[str, Any]:
        reply = self._http.post(f"/_test/websockets/{connection_id}/drop", json={"code": code, "when": when})
        assert reply.status_code == 200, reply.text
        result: dict[str, Any] = reply.json()
        return result

    def forget(self, response_id: str) -> int:
        return int(self._http.delete(f"/_test/websockets/responses/{response_id}").status_code)

    def context(self, response_id: str) -> list[dict[str, Any]]:
        reply = self._http.get(f"/_test/responses/{response_id}/context")
        assert reply.status_code == 200, reply.text
        data: list[dict[str, Any]] = reply.json()["data"]
        return data

    def received(self) -> list[dict[str, Any]]:
        data: list[dict[str, Any]] = self._http.get("/_test/websockets/requests").json()["data"]
        return data


def the_only_connection(hooks: Hooks, known: Sequence[str] = ()) -> str:
    """The id of the one open connection not in *known*."""
    fresh = [conn["id"] for conn in hooks.connections() if conn["id"] not in known]
    assert len(fresh) == 1, fresh
    return str(fresh[0])


def wait_until(predicate: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    """Poll *predicate* until it holds (the server notices a closed socket asynchronously)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        time.sleep(0.005)


def dumps(event: dict[str, Any]) -> str:
    return json.dumps(event, separators=(",", ":"))


class Frames:
    """The client frames the server receives from now on (in process, in arrival order)."""

    def __init__(self, server: ResponsesServer) -> None:
        self._hub = server.app.state.websockets
        self._start = len(self._hub.received)

    def all(self) -> list[Any]:
        return [f for f in self._hub.received[self._start :] if isinstance(f.event, dict)]

    def events(self) -> list[dict[str, Any]]:
        return [f.event for f in self.all()]
