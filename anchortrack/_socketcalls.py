"""
A tracked WebSocket connection's calls: the same call flow as HTTP, split where a socket splits it.

A socket send returns nothing; its outcome arrives later. So `SocketCalls.plan`
runs the flow up to its send, `SocketCalls.recover` runs its refusal branch
when an error frame refuses a chained create, and `SocketCalls.received`
records at the terminal event. The connection's `SocketBook` answers for its
local anchors; the other store effects go through the tracker's ``failopen``.
The tracker is used only through the interface `Tracker` documents.
"""

from __future__ import annotations

from collections import ChainMap
from collections.abc import Callable, Generator, Mapping, Sequence
from typing import Any, TypeVar

import attrs

from ._flow import (
    UNAVAILABLE,
    Evict,
    Find,
    Get,
    Send,
    Ticket,
    Unavailable,
    adrive,
    call_flow,
    drive,
    refused_flow,
    relay,
)
from ._hashing import Scope
from ._log import get_logger
from ._mode import Mode
from ._outcome import outcome_of
from ._plan import Reason
from ._socket import Lane, Pending, SocketBook, SocketPlan, Verdict, lane_of
from ._stats import WEBSOCKET
from ._tracker import CallState, Tracker
from .stores._base import Anchor


R = TypeVar("R")
T = TypeVar("T")


class SocketCalls:
    """
    One tracked connection's calls through *tracker* (in the scope *scope* gives), and its `book`.

    Nothing here raises: a fault inside anchortrack sends the event as given,
    or lets the received frame through, with a warning.
    """

    def __init__(self, tracker: Tracker, scope: Callable[[], Scope]) -> None:
        self.tracker = tracker
        self.scope = scope
        self.book = SocketBook()

    def plan(self, fields: Mapping[str, Any]) -> SocketPlan:
        """Plan one ``response.create`` event (sync)."""
        call = _Call(self, lane_of(fields))
        return call.run(call.planning(fields))

    async def aplan(self, fields: Mapping[str, Any]) -> SocketPlan:
        """Plan one ``response.create`` event (async)."""
        call = _Call(self, lane_of(fields))
        return await call.arun(call.planning(fields))

    def recover(self, refused: Verdict) -> SocketPlan | None:
        """
        The full resend of the create an error frame *refused* (sync), or None: the
        refusal is the caller's (not a stale anchor or ZDR), or a fault occurred.
        """
        call = _Call(self, refused.ended[0].lane)
        return call.run(call.recovery(refused))

    async def arecover(self, refused: Verdict) -> SocketPlan | None:
        """The twin of `recover` (async)."""
        call = _Call(self, refused.ended[0].lane)
        return await call.arun(call.recovery(refused))

    def received(self, data: bytes) -> Verdict | None:
        """Take a received frame: record what it ended; hand back a refusal to recover."""
        try:
            verdict = self.book.on_frame(data)
        except Exception as error:  # noqa: BLE001 - a received frame always reaches the caller
            self.fault(error, counted=False)
            return None
        if verdict is None or verdict.refusal is not None:
            return verdict
        for pending in verdict.ended:
            self.settled(pending.plan)
        if verdict.response is not None:
            pending = verdict.ended[0]
            assert pending.plan.ticket is not None
            self.book.settle(pending, self._record(pending.plan.ticket, verdict.response, verdict.output))
        return None

    def _record(self, ticket: Ticket, response: object, output: Sequence[Any]) -> Anchor | None:
        """
        Record a response: a stored one like over HTTP (queued; the caller flushes).
        A ``store: false`` one, or any under ZDR, lives only in the socket's memory:
        its anchor is returned, for the book, never written.
        """
        local = (
            ticket.skip_reason is Reason.STORE_FALSE
            or self.tracker.chaining_disabled(ticket.scope)
            or getattr(response, "store", None) is False
        )
        return self.tracker.observe(ticket, response, output, local=local)

    def settled(self, sent: SocketPlan, refused: Reason | None = None) -> None:
        """
        Publish a chained create's outcome once it is known (`SocketPlan.unsettled`).

        *refused*: it went out in full instead (its anchor left with a closed socket).
        """
        context, plan = sent.context, sent.plan
        if sent.unsettled and context is not None and plan is not None:
            outcome = outcome_of(
                context.mode, WEBSOCKET, plan, refused=refused, attempted=False, seconds=sent.seconds
            )
            self.tracker.publish(outcome)

    def withdrawn(self, pending: Pending) -> None:
        """*pending* did not go out: its send failed."""
        self.book.withdraw(pending)
        self.settled(pending.plan)

    def close(self) -> None:
        """The socket closed: report what it took with it."""
        self._dropped(*self.book.reset())

    def attach(self, transport: T) -> T:
        """A new socket (wrapped in *transport*) is in use."""
        self._dropped(*self.book.attach())
        return transport

    def _dropped(self, in_flight: Sequence[Pending], local_anchors: int) -> None:
        for pending in in_flight:
            self.settled(pending.plan)
            self.tracker.stats.skipped_response(Reason.WEBSOCKET_DROPPED.value)
        if in_flight or local_anchors:
            get_logger().debug(
                "anchortrack.websocket_state_dropped",
                in_flight=len(in_flight),
                local_anchors=local_anchors,
                transport=WEBSOCKET,
            )

    def fault(self, error: Exception, *, counted: bool) -> None:
        """A fault inside anchortrack on the socket path: the event goes out, or comes in, as given."""
        self.tracker.fault(error, WEBSOCKET, counted=counted)


class _Call:
    """One create's call flow, run as over HTTP except for what `answer` does (sync or async)."""

    def __init__(self, calls: SocketCalls, lane: Lane) -> None:
        self.calls = calls
        self.tracker = calls.tracker
        self.book = calls.book
        self.lane = lane
        self.state: CallState | None = None
        self.zdr = False

    def run(self, flow: Generator[Any, Any, R]) -> R:
        """Drive *flow* (sync): `answer` performs its effects, the fail-open store those it yields."""
        return drive(relay(flow, self.answer), self.tracker.failopen.perform)

    async def arun(self, flow: Generator[Any, Any, R]) -> R:
        """Drive *flow* (async): the twin of `run`."""
        return await adrive(relay(flow, self.answer), self.tracker.failopen.aperform)

    def planning(self, fields: Mapping[str, Any]) -> Generator[Any, Any, SocketPlan]:
        """Plan a create: the flow up to its send. A fault plans it as given."""
        try:
            begun = self.tracker.begin(fields, self.calls.scope(), WEBSOCKET)
            if begun is None:
                return SocketPlan(fields)
            context, request = begun
            if context.zdr_disabled and self.book.usable(self.lane) is not None:
                # The scope refuses stored anchors; this socket's latest response still chains.
                context = attrs.evolve(context, zdr_disabled=False)
            state = self._start(CallState(context, WEBSOCKET))
            yield from call_flow(context, request)
            send = state.response
            assert isinstance(send, Send)
            plan = state.plan
            anchor = plan.anchor if plan is not None and context.mode is Mode.CHAINED else None
            if anchor is None:
                # A request that does not chain has its outcome already.
                self.tracker.settle(state)
            return SocketPlan(
                send.body,
                ticket=send.ticket,
                request=request,
                context=context,
                plan=plan,
                anchor=anchor,
                local=anchor is not None and self.book.holds(anchor),
                unsettled=anchor is not None,
                seconds=state.seconds,
            )
        except Exception as error:  # noqa: BLE001 - fail open
            self.calls.fault(error, counted=True)
            return SocketPlan(fields)

    def recovery(self, refused: Verdict) -> Generator[Any, Any, SocketPlan | None]:
        """Recover a refused create: the flow's refusal branch, to its full resend (None: not ours)."""
        sent, error = refused.ended[0].plan, refused.refusal
        assert error is not None
        anchor, request, context, ticket = sent.anchor, sent.request, sent.context, sent.full_ticket
        if sent.retried or anchor is None or request is None or context is None or ticket is None:
            return None
        state = self._start(CallState(context, WEBSOCKET))
        state.plan, state.seconds = sent.plan, sent.seconds
        state.published = not sent.unsettled
        try:
            yield from refused_flow(context, request, anchor, ticket, error)
        except Exception as raised:  # noqa: BLE001 - the caller's refusal, or a fault
            if raised is not error:
                self.calls.fault(raised, counted=False)
            return None
        self.tracker.settle(state)
        send = state.response
        assert isinstance(send, Send)
        return attrs.evolve(
            sent, body=send.body, ticket=send.ticket, anchor=None, local=False, retried=True, unsettled=False
        )

    def _start(self, state: CallState) -> CallState:
        self.state = state
        self.zdr = self.tracker.chaining_disabled(state.context.scope_key)
        return state

    def answer(self, effect: Any) -> Generator[Any, Any, Any]:
        """
        Perform one effect of the flow. The book answers for its local anchors, the store
        (yielded out) for the rest; the send is kept, for the socket to send later.
        """
        book, state = self.book, self.state
        assert state is not None
        if isinstance(effect, Find):
            local = book.find(self.lane, effect.views)
            if self.zdr:
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
        if type(effect) is Send:
            # Keep the flow's send: the event goes out later, on the socket.
            state.sent = True
            state.response = effect
        else:
            self.tracker.note(state, effect)
        return None
