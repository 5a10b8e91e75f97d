"""Tracking ``client.responses.connect()`` (WebSocket mode, openai >= 2.32; `anchortrack._seams` checks the
SDK's private names on each ``connect()``): the SDK's manager and connection, retagged to subclasses.
``conn.send`` plans a ``response.create`` before the SDK serializes it (a chained one: only its delta); each
socket's transport plans the creates nobody planned (a session lane's, one queued while reconnecting).
``recv_bytes`` hands each frame to the `SocketBook`: responses are recorded, and the error frame refusing an
anchor anchortrack chained to is swallowed while the create is resent in full, once; any other frame reaches
the caller byte for byte."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import threading
from collections import ChainMap
from collections.abc import Callable, Generator, Iterator, Mapping
from typing import Any

import attrs
import openai
from openai import BaseModel
from openai.resources.responses.responses import (
    AsyncResponsesConnection,
    AsyncResponsesConnectionManager,
    ResponsesConnection,
    ResponsesConnectionManager,
)
from openai.types.responses import ResponsesClientEventParam
from pydantic import PrivateAttr

from ._calls import Calls
from ._flow import FLUSH, UNAVAILABLE, CallState, Evict, Find, Flow, Get, Unavailable, call_flow, refused_flow
from ._hashing import Scope
from ._log import get_logger
from ._mode import Mode
from ._plan import Reason
from ._seams import missing_websocket, sdk, unattached
from ._settings import resolve
from ._socket import CREATE, Lane, Pending, SocketBook, SocketPlan, Verdict, lane_of
from ._stats import WEBSOCKET
from ._tracker import Tracker


#: openai 2.x serializes a client event without its default values; 3.x with them.
_OPENAI_2 = openai.__version__.startswith("2.")
#: What goes out untracked where a seam is missing (`anchortrack._seams.unattached`).
_SOCKETS = "responses.connect() sockets go out"
#: What an unplanned outgoing text must contain to be worth parsing.
_CREATE_MARK = f'"{CREATE}"'


def connect_tracked(
    tracker: Tracker,
    scope: Callable[[], Scope],
    connect: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    """``responses.connect(...)`` of a wrapped client: the SDK's manager, tracked (but not in mode off)."""
    if resolve(tracker.mode) is Mode.OFF:
        return connect(*args, **kwargs)
    missing = missing_websocket()
    if missing is not None:
        unattached(missing, _SOCKETS, stacklevel=5)
        return connect(*args, **kwargs)
    try:
        params = dict(inspect.signature(connect).bind(*args, **kwargs).arguments)
    except TypeError:
        return connect(*args, **kwargs)  # the SDK says what is wrong
    socket = _Socket(tracker._calls, scope)
    callback = params.get("on_reconnecting")
    if callback is not None:

        def on_reconnecting(event: Any) -> Any:
            socket.close()  # first: the callback may resend
            return callback(event)

        params["on_reconnecting"] = on_reconnecting
    manager = connect(**params)
    if isinstance(manager, AsyncResponsesConnectionManager):
        manager.__class__ = AsyncTrackedResponsesConnectionManager
    elif isinstance(manager, ResponsesConnectionManager):
        manager.__class__ = TrackedResponsesConnectionManager
    else:  # not the SDK's manager this module subclasses
        unattached(f"its connect() made a {type(manager).__qualname__}", _SOCKETS, stacklevel=5)
        return manager
    manager._anchortrack = socket
    return manager


class _Framed(str):
    """A create's text planned by ``conn.send``, carrying its pending create until a transport takes it."""

    pending: Pending


def _resent(message: str) -> _Framed | None:
    """*message*, a planned text, if the SDK sends it again itself when its send fails (openai 2.x does)."""
    return message if _OPENAI_2 and isinstance(message, _Framed) else None


class _Planned(BaseModel):
    """A `_Framed` text as a client event: the SDK's own ``send`` sends what its ``to_json`` returns."""

    _text: str = PrivateAttr()

    def __init__(self, text: str) -> None:
        super().__init__()
        self._text = text

    def to_json(self, *args: Any, **kwargs: Any) -> str:
        return self._text


def _serialized(body: Mapping[str, Any]) -> str:
    """The text the SDK would send for the client event *body*."""
    return json.dumps(sdk("openai._utils", "maybe_transform")(dict(body), ResponsesClientEventParam))


class _Socket:
    """One tracked connection: its book, its calls (HTTP's call flow, split where a send returns nothing),
    and its send locks. A fault inside anchortrack sends the event, or lets the frame in, as given."""

    def __init__(self, calls: Calls, scope: Callable[[], Scope]) -> None:
        self.calls, self.scope = calls, scope
        #: Run one of this socket's flows, performing its effects (sync, async).
        self.run, self.arun = calls.run, calls.arun
        self.book = SocketBook()
        self.send_lock = threading.Lock()
        self.asend_lock = asyncio.Lock()  # bound to its event loop on first use
        self.transport: _Transport | None = None  # the socket's connection in use (the latest made)

    def framing(self, event: object) -> Generator[Any, Any, str | None]:
        """The text ``conn.send`` sends for a client event, planned and marked (None: as given)."""
        fields: Mapping[str, Any]
        if isinstance(event, BaseModel) and getattr(event, "type", None) == CREATE:
            fields = event.to_dict(mode="json", exclude_unset=True)
        elif isinstance(event, Mapping) and event.get("type") == CREATE:
            fields = event
        else:
            return None
        plan = yield from self.planning(fields)
        try:
            if isinstance(event, BaseModel) and plan.body is fields:  # unchanged: the SDK's own text
                text = event.to_json(use_api_names=True, exclude_unset=True, exclude_defaults=_OPENAI_2)
            else:
                text = _serialized(plan.body)
        except Exception:  # noqa: BLE001 - the SDK raises its own error for the event as given
            return None
        framed = _Framed(text)
        framed.pending = self.book.pending(plan)
        return framed

    def outgoing(self, message: str) -> Generator[Any, Any, tuple[str, Pending] | None]:
        """What a transport sends for *message*: a create's frame (planned here if nobody did), or None."""
        pending = vars(message).pop("pending", None) if isinstance(message, _Framed) else None
        if pending is not None:
            if not self.book.stale(pending):
                return message, pending
            # Chained to a local anchor of a socket now gone: it goes out in full instead.
            self.calls.settle(pending.plan.state, dropped=True)
            full = pending.plan.in_full()
            return _serialized(full.body), self.book.pending(full)
        try:
            fields = json.loads(message) if _CREATE_MARK in message else None
        except ValueError:
            return None
        if not isinstance(fields, dict) or fields.get("type") != CREATE:
            return None
        plan = yield from self.planning(fields)
        return (message if plan.body is fields else json.dumps(plan.body)), self.book.pending(plan)

    def incoming(self, data: bytes) -> Generator[Any, Any, tuple[str, Pending] | None]:
        """Take a received frame: record what it ended; the frame that recovers a refusal, if any."""
        try:
            verdict = self.book.on_frame(data)
        except Exception as error:  # noqa: BLE001 - a received frame always reaches the caller
            self.calls.fault(error, WEBSOCKET, counted=False)
            verdict = None
        if verdict is not None and verdict.refusal is None:
            for pending in verdict.ended:
                self.calls.settle(pending.plan.state)
            if verdict.response is not None:
                self._record(verdict)
            verdict = None
        yield FLUSH
        if verdict is None:
            return None
        resend = yield from self.recovery(verdict)
        if resend is not None:
            return _serialized(resend.body), self.book.pending(resend)
        self.calls.settle(verdict.ended[0].plan.state)
        self.book.refusal_passed(verdict.ended[0])
        return None

    def planning(self, fields: Mapping[str, Any]) -> Generator[Any, Any, SocketPlan]:
        """Plan a create: the call flow up to its send. A fault plans it as given."""
        try:
            begun = self.calls.begin(fields, self.scope(), WEBSOCKET)
            if begun is None:
                return SocketPlan(fields)
            context, request = begun
            lane = lane_of(fields)
            if context.zdr_disabled and self.book.usable(lane) is not None:
                # The scope refuses stored anchors; this socket's latest response still chains.
                context = attrs.evolve(context, zdr_disabled=False)
            state = CallState(context, WEBSOCKET)
            send = yield from self._relayed(lane, state, call_flow(context, request))
            plan = state.plan
            anchor = plan.anchor if plan is not None and context.mode is Mode.CHAINED else None
            if anchor is None:
                # A request that does not chain has its outcome already.
                self.calls.settle(state)
            local = anchor is not None and self.book.holds(anchor)
            return SocketPlan(send.body, send.ticket, request, state, anchor, local)
        except Exception as error:  # noqa: BLE001 - fail open
            self.calls.fault(error, WEBSOCKET, counted=True)
            return SocketPlan(fields)

    def recovery(self, refused: Verdict) -> Generator[Any, Any, SocketPlan | None]:
        """The full resend of the create an error frame *refused* (None: the caller's refusal, or a fault)."""
        sent, error = refused.ended[0].plan, refused.refusal
        assert error is not None
        full = sent.in_full()
        anchor, request, ticket = sent.anchor, sent.request, full.ticket
        if anchor is None or request is None or sent.state is None or ticket is None:
            return None
        state = attrs.evolve(sent.state)  # published only if the resend goes out
        flow = refused_flow(state.context, request, anchor, ticket, error)
        try:
            send = yield from self._relayed(sent.lane, state, flow)
        except Exception as raised:  # noqa: BLE001 - the caller's refusal, or a fault
            if raised is not error:
                self.calls.fault(raised, WEBSOCKET, counted=False)
            return None
        self.calls.settle(state)
        return attrs.evolve(full, body=send.body, ticket=send.ticket, state=state)

    def _relayed(self, lane: Lane, state: CallState, flow: Flow) -> Flow:
        """Run *flow* as over HTTP, but the book answers for *lane*'s local anchors; it returns its `Send`."""
        book, zdr = self.book, self.calls.chaining_disabled(state.context.scope_key)

        def answer(effect: Any) -> Generator[Any, Any, Any]:
            if isinstance(effect, Find):
                usable = book.usable(lane)
                local = {usable.view: usable} if usable is not None and usable.view in effect.views else {}
                if zdr:
                    return local
                found = yield effect
                if isinstance(found, Unavailable):
                    return local or UNAVAILABLE
                # The book wins only where the store has nothing.
                return ChainMap(found, local) if local else found
            if isinstance(effect, Get):
                anchor = book.local(effect.response_id)
                return anchor if anchor is not None else (yield effect)
            if isinstance(effect, Evict):
                return None if book.evict(effect.response_id) else (yield effect)
            return effect  # a `Send`: a socket's send returns nothing, its answer comes in a frame

        return self.calls.relay(state, flow, answer)

    def _record(self, verdict: Verdict) -> None:
        """Record *verdict*'s response: in the store, or, if ``store: false`` or under ZDR, in the book."""
        pending, response = verdict.ended[0], verdict.response
        ticket = pending.plan.ticket
        assert ticket is not None
        local = (
            ticket.skip_reason is Reason.STORE_FALSE
            or self.calls.chaining_disabled(ticket.scope)
            or getattr(response, "store", None) is False
        )
        self.book.settle(pending, self.calls.observe(ticket, response, verdict.output, local=local))

    @contextlib.contextmanager
    def sending(self, pending: Pending, framed: _Framed | None = None) -> Iterator[None]:
        """Send *pending*'s frame inside: its lane awaits its answer; a failed send ends the create, unless
        *framed* (a text openai 2.x resends after reconnecting, then planned again) keeps it until then."""
        self.book.commit(pending)
        try:
            yield
        except BaseException:
            self.book.withdraw(pending)
            if framed is None:
                self.calls.settle(pending.plan.state)
            else:
                framed.pending = pending
            raise

    def close(self) -> None:
        """The socket closed: report what it took with it."""
        self._dropped(*self.book.reset())

    def attach(self) -> None:
        """A new socket is in use."""
        self._dropped(*self.book.attach())

    def _dropped(self, in_flight: list[Pending], local_anchors: int) -> None:
        for pending in in_flight:
            self.calls.settle(pending.plan.state, lost=True)
        if in_flight or local_anchors:
            get_logger().debug(
                "anchortrack.websocket_state_dropped",
                in_flight=len(in_flight),
                local_anchors=local_anchors,
                transport=WEBSOCKET,
            )


class _Transport:
    """A new socket's connection (attached when made): it sends every frame, planning unplanned creates."""

    def __init__(self, ws: Any, socket: _Socket) -> None:
        self._ws, self._socket = ws, socket
        socket.attach()
        socket.transport = self

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ws, name)

    def send(self, message: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(message, str):
            frame = self._socket.run(self._socket.outgoing(message))
            if frame is not None:
                return self.emit(*frame, *args, framed=_resent(message), **kwargs)
        return self._ws.send(message, *args, **kwargs)

    def emit(
        self, text: str, pending: Pending, *args: Any, framed: _Framed | None = None, **kwargs: Any
    ) -> Any:
        """Send *text*, the frame of *pending*, keeping the lane's order (see `_Socket.sending`)."""
        with self._socket.send_lock, self._socket.sending(pending, framed):
            return self._ws.send(text, *args, **kwargs)


class _AsyncTransport(_Transport):
    """The asyncio twin of `_Transport`."""

    async def send(self, message: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(message, str):
            frame = await self._socket.arun(self._socket.outgoing(message))
            if frame is not None:
                return await self.emit(*frame, *args, framed=_resent(message), **kwargs)
        return await self._ws.send(message, *args, **kwargs)

    async def emit(
        self, text: str, pending: Pending, *args: Any, framed: _Framed | None = None, **kwargs: Any
    ) -> Any:
        async with self._socket.asend_lock:
            with self._socket.sending(pending, framed):
                return await self._ws.send(text, *args, **kwargs)


class TrackedResponsesConnection(ResponsesConnection):
    """A ``ResponsesConnection`` of a wrapped client (the SDK's object, retagged)."""

    _anchortrack: _Socket

    def send(self, event: Any) -> None:
        text = self._anchortrack.run(self._anchortrack.framing(event))
        super().send(event if text is None else _Planned(text))  # type: ignore[arg-type]

    def recv_bytes(self) -> bytes:
        while True:
            data = super().recv_bytes()
            frame = self._anchortrack.run(self._anchortrack.incoming(data))
            if frame is None:
                return data
            transport = self._anchortrack.transport
            assert transport is not None  # a frame arrived, so a socket was made
            transport.emit(*frame)


class AsyncTrackedResponsesConnection(AsyncResponsesConnection):
    """An ``AsyncResponsesConnection`` of a wrapped client (the SDK's object, retagged)."""

    _anchortrack: _Socket

    async def send(self, event: Any) -> None:
        text = await self._anchortrack.arun(self._anchortrack.framing(event))
        await super().send(event if text is None else _Planned(text))  # type: ignore[arg-type]

    async def recv_bytes(self) -> bytes:
        while True:
            data = await super().recv_bytes()
            frame = await self._anchortrack.arun(self._anchortrack.incoming(data))
            if frame is None:
                return data
            transport = self._anchortrack.transport
            assert isinstance(transport, _AsyncTransport)  # a frame arrived, so a socket was made
            await transport.emit(*frame)


class TrackedResponsesConnectionManager(ResponsesConnectionManager):
    """The ``ResponsesConnectionManager`` of a wrapped client (the SDK's, retagged): wraps each socket."""

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
        return _Transport(super()._connect_ws(extra_query, extra_headers), self._anchortrack)


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
        return _AsyncTransport(await super()._connect_ws(extra_query, extra_headers), self._anchortrack)
