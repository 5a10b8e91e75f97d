"""The Responses API's WebSocket mode at ``/v1/responses`` (``client.responses.connect()``).

Each ``response.create`` event (a ``POST`` body plus ``type``, ``stream_id``, ``generate``) is answered with
an HTTP stream's events; creates of one lane (``stream_id``) run in order, lanes concurrently.  Each lane's
latest chainable response is cached on the connection, so it chains there even unstored or under zero data
retention.  The server guide spells out the semantics."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import re
import secrets
import threading
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.websockets import WebSocket

from anchortrack.server import _errors
from anchortrack.server._chain import CHAINABLE_STATUSES
from anchortrack.server._errors import APIError
from anchortrack.server._events import TERMINAL_EVENTS, Event
from anchortrack.server._records import ChainLink, Item, request_owner
from anchortrack.server._request import decode_json, required
from anchortrack.server._state import PendingResponse, ServerState


logger = logging.getLogger("anchortrack.server")

#: A lane: its ``stream_id``, or ``None`` for the default lane.
Lane = str | None

#: Distinct named lanes one connection accepts (the default lane does not count).
MAX_NAMED_STREAMS = 32
#: Longest a connection stays open, in seconds.
MAX_CONNECTION_AGE = 3600.0
#: Close code of a test-hook drop unless another is asked for ("service restart").
DEFAULT_DROP_CODE = 1012

_ENVELOPE = frozenset({"type", "stream_id", "generate"})
_STREAM_ID = re.compile(r"[A-Za-z0-9_.-]{1,256}")
_DROP_WHEN = ("now", "after_created")


@dataclass(frozen=True)
class CreateEvent:
    """A validated ``response.create`` client event: its lane, warm-up flag and ``POST`` body."""

    stream_id: str | None
    generate: bool
    body: dict[str, Any]


def event_stream_id(event: object) -> str | None:
    """The event's ``stream_id`` when it is a valid one (what error frames echo)."""
    value = event.get("stream_id") if isinstance(event, dict) else None
    return value if isinstance(value, str) and _STREAM_ID.fullmatch(value) else None


def parse_client_event(event: object) -> CreateEvent:
    """Validate a decoded client event (only ``response.create`` is served); APIError 400 otherwise."""
    if not isinstance(event, dict):
        raise _errors.invalid_type("event", "an object", event)
    kind = required(event, "type", "type", str, "a string")
    if kind != "response.create":
        message = f"Invalid value: '{kind}'. This server supports only 'response.create'."
        raise _errors.invalid_value("type", message)
    stream_id = event_stream_id(event)
    if stream_id is None and event.get("stream_id") is not None:
        message = "Invalid 'stream_id': expected 1 to 256 ASCII letters, digits, underscores, hyphens or "
        raise _errors.bad_request("stream_id", "invalid_stream_id", message + "periods.")
    generate = event.get("generate", True)
    if not isinstance(generate, bool):
        raise _errors.invalid_type("generate", "a boolean", generate)
    body = {key: value for key, value in event.items() if key not in _ENVELOPE}
    return CreateEvent(stream_id=stream_id, generate=generate, body=body)


def error_frame(error: APIError, stream_id: str | None, sequence_number: int | None = None) -> Event:
    """The error event for *error*: ``{"type": "error", "status", "error": {…}}`` (+ lane)."""
    frame: Event = {"type": "error", "status": error.status, "error": error.body()["error"]}
    if sequence_number is not None:
        frame["sequence_number"] = sequence_number
    if stream_id is not None:
        frame["stream_id"] = stream_id
    return frame


class ConnectionCache:
    """The latest chainable response of each lane of one connection (not thread-safe), each as one flattened
    `ChainLink` (its input items the whole context the model saw): it resolves without the store."""

    def __init__(self) -> None:
        self._latest: dict[Lane, ChainLink] = {}

    def lookup(self, response_id: str) -> ChainLink | None:
        return next((link for link in self._latest.values() if link.id == response_id), None)

    def remember(
        self, lane: Lane, response_id: str, status: str, context: list[Item], output: list[Item]
    ) -> None:
        self._latest[lane] = ChainLink(response_id, None, status, context, output)

    def evict_referenced(self, lane: Lane, response_id: str) -> bool:
        """After a failed create on *lane* that referenced *response_id*: evict it if it is that lane's."""
        found = lane in self._latest and self._latest[lane].id == response_id
        if found:
            del self._latest[lane]
        return found

    def forget(self, response_id: str) -> bool:
        """Drop *response_id* from every lane; return whether it was cached."""
        lanes = [lane for lane, link in self._latest.items() if link.id == response_id]
        for lane in lanes:
            del self._latest[lane]
        return bool(lanes)

    def snapshot(self) -> dict[Lane, str]:
        return {lane: link.id for lane, link in self._latest.items()}

    def clear(self) -> None:
        self._latest.clear()


class _Connection:
    """One open socket: its cache, lanes, workers and a serialized sender."""

    def __init__(self, websocket: WebSocket, connection_id: str) -> None:
        self.id, self.websocket = connection_id, websocket
        self.owner = request_owner(websocket.headers)
        self.cache = ConnectionCache()
        self.queues: dict[Lane, asyncio.Queue[CreateEvent]] = {}
        self.workers: dict[Lane, asyncio.Task[None]] = {}
        self.named: set[str] = set()
        self.drop_after_created: int | None = None
        self.closed = False
        self._send_lock = asyncio.Lock()

    async def send(self, event: Event) -> bool:
        """Send one event; ``False`` once the socket is closed (nothing is sent then)."""
        text = json.dumps(event, separators=(",", ":"))
        async with self._send_lock:
            if self.closed:
                return False
            try:
                await self.websocket.send_text(text)
            except Exception:  # the peer went away; the receive loop sees it too
                logger.debug("anchortrack.server.websocket_send_failed", exc_info=True)
                self.closed = True
                return False
            return True

    async def close(self, code: int, reason: str = "") -> None:
        """Close the socket from the server side (idempotent)."""
        async with self._send_lock:
            if self.closed:
                return
            self.closed = True
            try:
                await self.websocket.close(code=code, reason=reason)
            except Exception:  # already gone
                logger.debug("anchortrack.server.websocket_close_failed", exc_info=True)


@dataclass(frozen=True)
class ReceivedFrame:
    """One client frame as received: its connection, size and decoded JSON (or ``None``)."""

    connection: str
    bytes: int
    event: Any


class WebSocketHub:
    """The WebSocket endpoint over the `ServerState` the HTTP routes share: open connections and their caches.

    *max_age* (seconds a connection opened afterwards stays open) and *max_named_streams* may be changed."""

    def __init__(self, state: ServerState) -> None:
        self.state = state
        self.max_age, self.max_named_streams = MAX_CONNECTION_AGE, MAX_NAMED_STREAMS
        self._lock = threading.Lock()
        self._connections: dict[str, _Connection] = {}
        self._received: list[ReceivedFrame] = []

    @property
    def received(self) -> list[ReceivedFrame]:
        """Every client frame received on any connection, in arrival order."""
        with self._lock:
            return list(self._received)

    async def serve(self, websocket: WebSocket) -> None:
        await websocket.accept()
        conn = _Connection(websocket, f"ws_{secrets.token_hex(12)}")
        with self._lock:
            self._connections[conn.id] = conn
        ager = asyncio.create_task(self._age_out(conn, self.max_age))
        try:
            while True:
                message = await websocket.receive()
                if message["type"] == "websocket.disconnect":
                    break
                text = message.get("text")
                await self._receive(conn, (message.get("bytes") or b"") if text is None else text)
        except Exception:
            logger.error("anchortrack.server.websocket_failed", exc_info=True)
            await conn.close(1011)
        finally:
            conn.closed = True
            tasks = [ager, *conn.workers.values()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            with self._lock:
                self._connections.pop(conn.id, None)
                conn.cache.clear()

    async def _receive(self, conn: _Connection, raw: str | bytes) -> None:
        data = raw.encode() if isinstance(raw, str) else raw
        try:
            decoded, undecodable = decode_json(data), None
        except APIError as error:
            decoded, undecodable = None, error
        if self.state.record:
            with self._lock:
                self._received.append(ReceivedFrame(conn.id, len(data), decoded))
        try:
            if undecodable is not None:
                raise undecodable
            event = parse_client_event(decoded)
            lane = event.stream_id
            if lane is not None and lane not in conn.named:
                if len(conn.named) >= self.max_named_streams:
                    message = "This WebSocket connection has reached its stream limit."
                    raise _errors.bad_request("stream_id", "websocket_stream_limit_reached", message)
                conn.named.add(lane)
        except APIError as error:
            await conn.send(error_frame(error, event_stream_id(decoded)))
            return
        queue = conn.queues.get(lane)
        if queue is None:
            queue = conn.queues[lane] = asyncio.Queue()
            conn.workers[lane] = asyncio.create_task(self._work(conn, queue))
        queue.put_nowait(event)

    async def _work(self, conn: _Connection, queue: asyncio.Queue[CreateEvent]) -> None:
        """One lane: its creates, FIFO, one at a time."""
        while not conn.closed:
            await self._respond(conn, await queue.get())

    async def _respond(self, conn: _Connection, event: CreateEvent) -> None:
        def link(response_id: str) -> ChainLink | None:  # this socket's cache, then (without ZDR) the store
            with self._lock:
                found = conn.cache.lookup(response_id)
            return found if found is not None or self.state.zdr else self.state.link(response_id, conn.owner)

        lane, parent = event.stream_id, event.body.get("previous_response_id")
        parent = parent if isinstance(parent, str) else None
        with self._lock:
            parent_cached = parent is not None and conn.cache.lookup(parent) is not None
        try:
            if self.state.backend is not None:
                message = "The WebSocket mode is not served in front of an upstream provider; "
                message += "send this request over HTTP (POST /v1/responses)."
                raise _errors.bad_request(None, "unsupported_websocket_upstream", message)
            pending = self.state.prepare(event.body, owner=conn.owner, link=link, generate=event.generate)
        except APIError as error:
            if parent is not None:
                with self._lock:
                    conn.cache.evict_referenced(lane, parent)
            await conn.send(error_frame(error, lane))
            return
        to_save = pending if pending.request.store and not self.state.zdr else None
        if to_save is not None and parent_cached and self.state.link(str(parent), conn.owner) is None:
            # The parent lives only in this socket's cache: store the whole context.
            context = list(pending.context)
            flat = dataclasses.replace(pending.request, previous_response_id=None, input_items=context)
            to_save = dataclasses.replace(pending, request=flat)
        if to_save is not None:
            try:
                self.state.save_in_progress(to_save)
            except Exception:
                logger.error("anchortrack.server.save_failed", exc_info=True)
                await conn.send(error_frame(_errors.save_failed(), lane))
                return
        lane_id = {} if lane is None else {"stream_id": lane}
        async with aclosing(self.state.live_events(pending, to_save)) as events:
            async for item in events:
                if item["type"] == "error":  # the final save failed
                    await conn.send(error_frame(_errors.save_failed(), lane, item["sequence_number"]))
                    return
                if item["type"] in TERMINAL_EVENTS.values():
                    self._update_cache(conn, lane, pending)
                if not await conn.send({**item, **lane_id}):
                    return
                if item["type"] == "response.created" and conn.drop_after_created is not None:
                    code, conn.drop_after_created = conn.drop_after_created, None
                    await conn.close(code, "dropped by the test hook")
                    return

    def _update_cache(self, conn: _Connection, lane: Lane, pending: PendingResponse) -> None:
        response, parent = pending.response, pending.request.previous_response_id
        with self._lock:
            if (status := response["status"]) in CHAINABLE_STATUSES:
                conn.cache.remember(lane, response["id"], status, pending.context, response["output"])
            elif parent is not None:
                conn.cache.evict_referenced(lane, parent)

    async def _age_out(self, conn: _Connection, max_age: float) -> None:
        await asyncio.sleep(max_age)
        message = f"This WebSocket connection has reached its maximum duration of {max_age / 60:g} minutes. "
        message += "Open a new connection to continue."
        error = _errors.bad_request(None, "websocket_connection_limit_reached", message)
        await conn.send(error_frame(error, None))
        await conn.close(1001, "connection limit reached")

    def test_routes(self) -> list[Route]:
        """The WebSocket test hooks under ``/_test/websockets``: list, drop, evict, recorded frames."""

        async def connections(request: Request) -> Response:
            with self._lock:
                caches = {conn.id: conn.cache.snapshot() for conn in self._connections.values()}
            data = [
                {"id": key, "cached": [{"stream_id": k, "response_id": v} for k, v in cached.items()]}
                for key, cached in caches.items()
            ]
            return JSONResponse({"object": "list", "data": data})

        async def drop(request: Request) -> Response:
            connection_id = request.path_params["connection_id"]
            raw = await request.body()
            body = decode_json(raw) if raw.strip() else {}
            if not isinstance(body, dict):
                raise _errors.invalid_type("body", "an object", body)
            code = body.get("code", DEFAULT_DROP_CODE)
            if not isinstance(code, int) or isinstance(code, bool) or not 1000 <= code <= 4999:
                raise _errors.invalid_type("code", "a close code between 1000 and 4999", code)
            when = body.get("when", "now")
            if when not in _DROP_WHEN:
                message = f"Invalid value: {when!r}. Supported: 'now', 'after_created'."
                raise _errors.invalid_value("when", message)
            with self._lock:
                conn = self._connections.get(connection_id)
            if conn is None:
                raise APIError(404, f"WebSocket connection '{connection_id}' not found.")
            if when == "after_created":  # right after the response.created of its next create
                conn.drop_after_created = code
            else:
                await conn.close(code, "dropped by the test hook")
            return JSONResponse({"id": connection_id, "code": code, "when": when})

        async def forget(request: Request) -> Response:  # evict a response from every connection's cache
            response_id = request.path_params["response_id"]
            with self._lock:
                found = [conn.cache.forget(response_id) for conn in self._connections.values()]
            if not any(found):
                raise _errors.response_not_found(response_id)
            return JSONResponse({"id": response_id, "forgotten": True})

        async def requests(request: Request) -> Response:
            with self._lock:
                if request.method == "DELETE":
                    self._received.clear()
                data = [dataclasses.asdict(frame) for frame in self._received]
            return JSONResponse({"object": "list", "data": data})

        return [
            Route("/_test/websockets", connections, methods=["GET"]),
            Route("/_test/websockets/requests", requests, methods=["GET", "DELETE"]),
            Route("/_test/websockets/responses/{response_id}", forget, methods=["DELETE"]),
            Route("/_test/websockets/{connection_id}/drop", drop, methods=["POST"]),
        ]
