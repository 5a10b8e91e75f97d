"""
Tracking ``client.responses.connect()``, the Responses API's WebSocket mode (the I/O).

A wrapped client's ``responses.connect()`` returns the SDK's own connection
manager and connection, retagged to subclasses (unwrapped clients are untouched):

* ``conn.send`` plans a ``response.create`` before the SDK serializes it, so
  a chained create only serializes its delta, and registers the planned text.
* Every socket the manager opens (on enter and on each reconnect) is wrapped in
  a transport that everything goes out through: direct sends, the SDK's queue
  flushed after a reconnect, and session lanes' sends (which bypass
  ``conn.send``); it plans the creates nobody planned yet.
* ``conn.recv_bytes`` (under ``recv()``, iteration and a session's reader)
  hands each frame to the book: responses are recorded, and the error frame of
  a stale anchor anchortrack chained to is swallowed while the create is resent
  in full, once. Any other frame reaches the caller byte for byte.

The calls and the book are `anchortrack._socketcalls` and `anchortrack._socket`.
Works with openai 2.x (no sessions, no ``stream_id``) and 3.x.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import threading
from collections.abc import Callable, Generator, Mapping
from typing import Any

from openai import BaseModel
from openai._utils import maybe_transform
from openai.resources.responses.responses import (
    AsyncResponsesConnection,
    AsyncResponsesConnectionManager,
    ResponsesConnection,
    ResponsesConnectionManager,
)
from openai.types.responses import ResponsesClientEventParam

from ._flow import adrive, drive
from ._hashing import Scope
from ._mode import Mode, resolve
from ._plan import Reason
from ._socket import CREATE, Pending, SocketPlan, Verdict
from ._socketcalls import SocketCalls
from ._tracker import Tracker


try:  # openai 3.x: ``send`` serializes, then hands the text to the base class's queue-aware ``send_raw``
    from openai._websocket_connection import AsyncWebSocketConnectionBase, WebSocketConnectionBase
except ImportError:  # openai 2.x: ``send`` queues while reconnecting, and queues a frame whose send failed
    WebSocketConnectionBase = AsyncWebSocketConnectionBase = None  # type: ignore[assignment,misc]
_OPENAI_2 = WebSocketConnectionBase is None
#: What an unplanned outgoing text must contain to be worth parsing.
_CREATE_MARK = f'"{CREATE}"'


def connect_tracked(
    tracker: Tracker,
    scope: Callable[[], Scope],
    connect: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    """
    ``responses.connect(*args, **kwargs)`` of a wrapped client: the SDK's manager, tracked.

    In mode ``off`` (when connecting) the SDK's manager is returned untouched.
    """
    if resolve(tracker.mode) is Mode.OFF:
        return connect(*args, **kwargs)
    try:
        params = dict(inspect.signature(connect).bind(*args, **kwargs).arguments)
    except TypeError:
        return connect(*args, **kwargs)  # the SDK says what is wrong
    socket = _Socket(tracker, scope)
    callback = params.get("on_reconnecting")
    if callback is not None:
        params["on_reconnecting"] = socket.on_reconnecting(callback)
    manager = connect(**params)
    if isinstance(manager, AsyncResponsesConnectionManager):
        manager.__class__ = AsyncTrackedResponsesConnectionManager
    elif isinstance(manager, ResponsesConnectionManager):
        manager.__class__ = TrackedResponsesConnectionManager
    else:  # pragma: no cover - an SDK this module does not know
        return manager
    manager._anchortrack = socket
    return manager


def _serialized(body: Mapping[str, Any]) -> str:
    """The text the SDK would send for the client event *body*."""
    return json.dumps(maybe_transform(dict(body), ResponsesClientEventParam))


class _Socket(SocketCalls):
    """
    A tracked connection's calls and book, and what its transports share.

    `framing` and `outgoing` are written once for sync and async: they yield
    a create's fields, which the caller plans (`plan` or `aplan`).
    """

    def __init__(self, tracker: Tracker, scope: Callable[[], Scope]) -> None:
        super().__init__(tracker, scope)
        self.send_lock = threading.Lock()
        self.asend_lock = asyncio.Lock()  # bound to its event loop on first use

    def on_reconnecting(self, callback: Callable[[Any], Any]) -> Callable[[Any], Any]:
        """Wrap the caller's ``on_reconnecting``: forget the closed socket first (the callback may resend)."""

        def on_reconnecting(event: Any) -> Any:
            self.close()
            return callback(event)

        return on_reconnecting

    def framing(self, event: object) -> Generator[Mapping[str, Any], SocketPlan, str | None]:
        """The text ``conn.send`` sends for a client event, planned and registered (None: as given)."""
        fields: Mapping[str, Any] | None = None
        if isinstance(event, BaseModel):
            if getattr(event, "type", None) == CREATE:
                fields = event.to_dict(mode="json", exclude_unset=True)
        elif isinstance(event, Mapping) and event.get("type") == CREATE:
            fields = event
        if fields is None:
            return None
        plan = yield fields
        try:
            if isinstance(event, BaseModel) and plan.body is fields:  # unchanged: the SDK's own text
                text = event.to_json(use_api_names=True, exclude_unset=True, exclude_defaults=_OPENAI_2)
            else:
                text = _serialized(plan.body)
        except Exception:  # noqa: BLE001 - the SDK raises its own error for the event as given
            return None
        self.book.register(text, self.book.pending(plan))
        return text

    def outgoing(self, message: str) -> Generator[Mapping[str, Any], SocketPlan, tuple[str, Pending] | None]:
        """
        What a transport sends for *message*: a create's frame and its pending create, or None (as is).

        A create nobody planned (a session lane's, or one queued before the socket opened) is planned here.
        """
        pending = self.book.take(message)
        if pending is not None:
            if not self.book.stale(pending):
                return message, pending
            # Chained to a local anchor of a socket now gone: it goes out in full instead.
            self.settled(pending.plan, Reason.WEBSOCKET_DROPPED)
            full = pending.plan.in_full()
            return _serialized(full.body), self.book.pending(full)
        try:
            fields = json.loads(message) if _CREATE_MARK in message else None
        except ValueError:
            return None
        if not isinstance(fields, dict) or fields.get("type") != CREATE:
            return None
        plan = yield fields
        return (message if plan.body is fields else json.dumps(plan.body)), self.book.pending(plan)

    def resent(self, refused: Verdict, resend: SocketPlan | None) -> tuple[str, Pending] | None:
        """The frame that recovers *refused*, or None: the refusal reaches the caller."""
        if resend is not None:
            return _serialized(resend.body), self.book.pending(resend)
        self.settled(refused.ended[0].plan)
        self.book.refusal_passed(refused.ended[0])
        return None


# -- transports: every frame goes out through them ------------------------------


class _Transport:
    """A websockets ``ClientConnection`` whose ``send`` plans unplanned creates (sync)."""

    def __init__(self, ws: Any, socket: _Socket) -> None:
        self._ws = ws
        self._socket = socket

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ws, name)

    def send(self, message: Any, *args: Any, **kwargs: Any) -> Any:
        socket = self._socket
        if isinstance(message, str):
            frame = drive(socket.outgoing(message), socket.plan)
            if frame is not None:
                return self.emit(*frame, *args, **kwargs)
        return self._ws.send(message, *args, **kwargs)

    def emit(self, text: str, pending: Pending, *args: Any, **kwargs: Any) -> Any:
        """Send *text*, the frame of *pending*, keeping the lane's order."""
        with self._socket.send_lock:
            self._socket.book.commit(pending)
            try:
                return self._ws.send(text, *args, **kwargs)
            except BaseException:
                self._socket.withdrawn(pending)
                raise


class _AsyncTransport(_Transport):
    """The asyncio twin of `_Transport`."""

    async def send(self, message: Any, *args: Any, **kwargs: Any) -> Any:
        socket = self._socket
        if isinstance(message, str):
            frame = await adrive(socket.outgoing(message), socket.aplan)
            if frame is not None:
                return await self.emit(*frame, *args, **kwargs)
        return await self._ws.send(message, *args, **kwargs)

    async def emit(self, text: str, pending: Pending, *args: Any, **kwargs: Any) -> Any:
        async with self._socket.asend_lock:
            self._socket.book.commit(pending)
            try:
                return await self._ws.send(text, *args, **kwargs)
            except BaseException:
                self._socket.withdrawn(pending)
                raise


# -- connections ------------------------------------------------------------------


class TrackedResponsesConnection(ResponsesConnection):
    """A ``ResponsesConnection`` of a wrapped client (the SDK's object, retagged)."""

    _anchortrack: _Socket

    def send(self, event: Any) -> None:
        socket = self._anchortrack
        text = drive(socket.framing(event), socket.plan)
        if text is None:
            return super().send(event)
        # What the SDK's own send does with its text, in either major version.
        if WebSocketConnectionBase is not None:
            WebSocketConnectionBase.send_raw(self, text)
        elif self._is_reconnecting:
            self._send_queue.enqueue(text)
        else:
            try:
                self._connection.send(text)
            except Exception:
                self._send_queue.enqueue(text)
                raise
        return None

    def recv_bytes(self) -> bytes:
        socket = self._anchortrack
        while True:
            data = super().recv_bytes()
            refused = socket.received(data)
            socket.tracker.flush()
            if refused is None:
                return data
            frame = socket.resent(refused, socket.recover(refused))
            if frame is None:
                return data
            assert isinstance(self._connection, _Transport)
            self._connection.emit(*frame)


class AsyncTrackedResponsesConnection(AsyncResponsesConnection):
    """An ``AsyncResponsesConnection`` of a wrapped client (the SDK's object, retagged)."""

    _anchortrack: _Socket

    async def send(self, event: Any) -> None:
        socket = self._anchortrack
        text = await adrive(socket.framing(event), socket.aplan)
        if text is None:
            return await super().send(event)
        # What the SDK's own send does with its text, in either major version.
        if AsyncWebSocketConnectionBase is not None:
            await AsyncWebSocketConnectionBase.send_raw(self, text)
        elif self._is_reconnecting:
            self._send_queue.enqueue(text)
        else:
            try:
                await self._connection.send(text)
            except Exception:
                self._send_queue.enqueue(text)
                raise
        return None

    async def recv_bytes(self) -> bytes:
        socket = self._anchortrack
        while True:
            data = await super().recv_bytes()
            refused = socket.received(data)
            await socket.tracker.aflush()
            if refused is None:
                return data
            frame = socket.resent(refused, await socket.arecover(refused))
            if frame is None:
                return data
            assert isinstance(self._connection, _AsyncTransport)
            await self._connection.emit(*frame)


# -- managers: every socket they open is wrapped in a transport ---------------------


class TrackedResponsesConnectionManager(ResponsesConnectionManager):
    """The ``ResponsesConnectionManager`` of a wrapped client (the SDK's object, retagged)."""

    _anchortrack: _Socket

    def __enter__(self) -> ResponsesConnection:
        conn = super().__enter__()
        conn.__class__ = TrackedResponsesConnection
        conn._anchortrack = self._anchortrack  # type: ignore[attr-defined]
        return conn

    enter = __enter__

    def __exit__(self, *exc_info: Any) -> None:
        try:
            super().__exit__(*exc_info)
        finally:
            self._anchortrack.close()

    def _connect_ws(self, extra_query: Any, extra_headers: Any) -> Any:
        return self._anchortrack.attach(
            _Transport(super()._connect_ws(extra_query, extra_headers), self._anchortrack)
        )


class AsyncTrackedResponsesConnectionManager(AsyncResponsesConnectionManager):
    """The ``AsyncResponsesConnectionManager`` of a wrapped client (the SDK's object, retagged)."""

    _anchortrack: _Socket

    async def __aenter__(self) -> AsyncResponsesConnection:
        conn = await super().__aenter__()
        conn.__class__ = AsyncTrackedResponsesConnection
        conn._anchortrack = self._anchortrack  # type: ignore[attr-defined]
        return conn

    enter = __aenter__

    async def __aexit__(self, *exc_info: Any) -> None:
        try:
            await super().__aexit__(*exc_info)
        finally:
            self._anchortrack.close()

    async def _connect_ws(self, extra_query: Any, extra_headers: Any) -> Any:
        return self._anchortrack.attach(
            _AsyncTransport(await super()._connect_ws(extra_query, extra_headers), self._anchortrack)
        )
