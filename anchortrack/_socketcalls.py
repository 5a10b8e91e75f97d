"""
A tracker's calls over one WebSocket connection (``client.responses.connect()``).

A socket send returns nothing: the outcome arrives later on the receive side.
So the call the tracker makes in one piece over HTTP is split here:
`SocketCalls.plan` runs the same call flow up to its send, `SocketCalls.recover`
runs the flow's refusal branch when an error frame refuses a chained create,
and `SocketCalls.record` records at the terminal event. A `LaneOverlay`
answers for the connection's local anchors; the store effects left are
performed through the tracker's fail-open `FailOpen` (sync or async).

This module talks to the tracker only through the interface its docstring
names (`Tracker.begin`, `Tracker.note`, `Tracker.settle`, `Tracker.publish`,
`Tracker.fault`, `Tracker.chaining_disabled`, `Tracker.anchor_of`,
`Tracker.observe` and its attributes); the I/O shells in
`anchortrack._websocket` call it, and the pure bookkeeping of lanes and
frames is `anchortrack._socket`.
"""

from __future__ import annotations

from collections import ChainMap
from collections.abc import Callable, Generator, Mapping, Sequence
from typing import Any

import attrs

from ._flow import (
    UNAVAILABLE,
    Evict,
    Find,
    Flow,
    Get,
    Send,
    Ticket,
    Unavailable,
    adrive,
    call_flow,
    drive,
    refused_flow,
)
from ._hashing import Scope
from ._log import get_logger
from ._mode import Mode
from ._outcome import outcome_of
from ._plan import Reason, unrecordable
from ._request import Request
from ._socket import LaneOverlay, SocketPlan
from ._stats import WEBSOCKET
from ._tracker import CallState, Tracker, recorded_event
from .stores._base import Anchor


class SocketCalls:
    """
    The calls one tracked connection makes through its *tracker*, in the scope *scope* gives.

    Planning and recovering never raise: a fault inside anchortrack sends the
    event as given (or lets the error frame through), with a warning.
    """

    def __init__(self, tracker: Tracker, scope: Callable[[], Scope]) -> None:
        self.tracker = tracker
        self.scope = scope

    # -- planning and recovering: flows whose store effects are performed sync or async --

    def plan(self, fields: Mapping[str, Any], overlay: LaneOverlay) -> SocketPlan:
        """Plan one ``response.create`` event (sync). Never raises: a fault plans it as given."""
        return drive(self._planning(fields, overlay), self.tracker.failopen.perform)

    async def aplan(self, fields: Mapping[str, Any], overlay: LaneOverlay) -> SocketPlan:
        """Plan one ``response.create`` event (async): the twin of `plan`."""
        return await adrive(self._planning(fields, overlay), self.tracker.failopen.aperform)

    def recover(self, sent: SocketPlan, error: Exception, overlay: LaneOverlay) -> SocketPlan | None:
        """
        An error frame refused the create *sent* chained (sync): the full resend, or None.

        None when the refusal is the caller's (not a stale anchor or ZDR), or
        on a fault; the error frame then reaches the caller unchanged.
        """
        return drive(self._recovery(sent, error, overlay), self.tracker.failopen.perform)

    async def arecover(self, sent: SocketPlan, error: Exception, overlay: LaneOverlay) -> SocketPlan | None:
        """The twin of `recover` (async)."""
        return await adrive(self._recovery(sent, error, overlay), self.tracker.failopen.aperform)

    def _planning(self, fields: Mapping[str, Any], overlay: LaneOverlay) -> Generator[Any, Any, SocketPlan]:
        """Planning a socket create, as a flow whose store effects the caller performs (sync or async)."""
        try:
            begun = self._begin(fields, overlay)
            if begun is None:
                return SocketPlan(fields)
            state, request = begun
            yield from self._on_socket(state, overlay, call_flow(state.context, request))
            sent = _socket_plan(state, request, overlay)
            if not sent.unsettled:
                # A request that does not chain has its outcome already.
                self.tracker.settle(state)
            return sent
        except Exception as error:  # noqa: BLE001 - fail open
            self.fault(error, counted=True)
            return SocketPlan(fields)

    def _recovery(
        self, sent: SocketPlan, error: Exception, overlay: LaneOverlay
    ) -> Generator[Any, Any, SocketPlan | None]:
        """Recovering a refused socket create, as a flow whose store effects the caller performs."""
        begun = _recovery(sent)
        if begun is None:
            return None
        state, flow = begun
        try:
            yield from self._on_socket(state, overlay, flow(error))
        except Exception as raised:  # noqa: BLE001 - the caller's refusal, or a fault
            if raised is not error:
                self.fault(raised, counted=False)
            return None
        self.tracker.settle(state)
        return _resent(state, sent)

    def _begin(self, fields: Mapping[str, Any], overlay: LaneOverlay) -> tuple[CallState, Request] | None:
        begun = self.tracker.begin(fields, self.scope(), WEBSOCKET)
        if begun is None:
            return None
        context, request = begun
        if context.zdr_disabled and overlay.usable():
            # The scope refuses stored anchors; this socket's latest response still chains.
            context = attrs.evolve(context, zdr_disabled=False)
        return CallState(context, WEBSOCKET), request

    def _on_socket(self, state: CallState, overlay: LaneOverlay, flow: Flow) -> Generator[Any, Any, Any]:
        """
        Run *flow* for a socket: the connection's overlay answers what it can, the
        bookkeeping is done by the tracker, and the store effects left are yielded out.
        """
        zdr = self.tracker.chaining_disabled(state.context.scope_key)
        value: Any = None
        error: BaseException | None = None
        while True:
            try:
                effect = flow.throw(error) if error is not None else flow.send(value)
            except StopIteration as stop:
                return stop.value
            value, error = None, None
            try:
                step = _overlaid(effect, overlay, zdr)
                if isinstance(step, _Answered):
                    value = step.value
                elif step is not None:
                    value = step((yield effect))
                elif type(effect) is Send:
                    # Keep the flow's send: the event goes out later, on the socket.
                    state.sent = True
                    state.response = effect
                else:
                    self.tracker.note(state, effect)
            except Exception as exc:  # noqa: BLE001 - handed to the flow to decide
                error = exc

    # -- recording and outcomes ---------------------------------------------------------

    def record(self, ticket: Ticket, response: object, output: Sequence[Any] | None) -> Anchor | None:
        """
        Record a response that arrived on a socket. Never raises.

        A stored response is queued for the store like an HTTP one (the
        caller flushes). A ``store: false`` response, or any while the scope
        refuses storage (ZDR), lives only in that socket's memory: its anchor
        is returned, for the connection's overlay, and never written.
        """
        local = (
            ticket.skip_reason is Reason.STORE_FALSE
            or self.tracker.chaining_disabled(ticket.scope)
            or getattr(response, "store", None) is False
        )
        if not local:
            self.tracker.observe(ticket, response, output)
            return None
        try:
            return self._local_anchor(ticket, response, output)
        except Exception as error:  # noqa: BLE001 - recording must never break a socket
            get_logger().warning("anchortrack.record_failed", error=type(error).__name__, transport=WEBSOCKET)
            return None

    def _local_anchor(self, ticket: Ticket, response: object, output: Sequence[Any] | None) -> Anchor | None:
        tracker = self.tracker
        response_id = getattr(response, "id", None)
        skip = ticket.skip_reason
        reason = (
            skip
            if skip is not None and skip is not Reason.STORE_FALSE
            else unrecordable(response, record_incomplete=tracker.record_incomplete, connection_local=True)
        )
        if reason is not None:
            tracker.stats.skipped_response(reason.value)
            get_logger().debug(
                "anchortrack.response_not_recorded",
                response_id=response_id,
                status=getattr(response, "status", None),
                reason=reason.value,
                transport=WEBSOCKET,
            )
            return None
        assert isinstance(response_id, str)
        anchor, outputs = tracker.anchor_of(ticket, response_id, response, output, parent=None)
        tracker.stats.recorded_locally()
        recorded_event(response_id, anchor, outputs, transport=WEBSOCKET, connection_local=True)
        return anchor

    def settled(self, sent: SocketPlan, refused: str | None = None) -> None:
        """
        Publish a chained socket create's outcome once it is known (`SocketPlan.unsettled`).

        *refused*: the create went out in full instead (its anchor left with a closed socket).
        """
        if sent.unsettled and sent.context is not None and sent.plan is not None:
            self.tracker.publish(
                outcome_of(
                    sent.context.mode,
                    WEBSOCKET,
                    sent.plan,
                    refused=Reason(refused) if refused is not None else None,
                    attempted=False,
                    seconds=sent.seconds,
                )
            )

    def dropped(self, in_flight: Sequence[SocketPlan], local_anchors: int) -> None:
        """Report what a socket that closed or reconnected took with it."""
        for sent in in_flight:
            self.settled(sent)
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


# -- the pieces shared by the sync and async entries ----------------------------------


@attrs.frozen
class _Answered:
    """A store effect the connection's overlay answered by itself."""

    value: Any


def _overlaid(effect: Any, overlay: LaneOverlay, zdr: bool) -> _Answered | Callable[[Any], Any] | None:
    """
    How to answer a store effect on a socket: from the overlay, or the store's answer combined with it.

    None for an effect that is not a store operation.
    """
    if isinstance(effect, Find):
        local = overlay.find(effect.views)
        if zdr:
            return _Answered(local)

        def merged(found: Any) -> Any:
            if isinstance(found, Unavailable):
                return local or UNAVAILABLE
            # The overlay wins only where the store has nothing.
            return ChainMap(found, local) if local else found

        return merged
    if isinstance(effect, Get):
        anchor = overlay.get(effect.response_id)
        if anchor is not None:
            return _Answered(anchor)
        return _same
    if isinstance(effect, Evict):
        if overlay.evict(effect.response_id):
            return _Answered(None)
        return _same
    return None


def _same(value: Any) -> Any:
    return value


def _socket_plan(state: CallState, request: Request, overlay: LaneOverlay) -> SocketPlan:
    """What to send for a planned create."""
    send = state.response
    assert isinstance(send, Send)
    plan = state.plan
    anchor = plan.anchor if plan is not None and state.context.mode is Mode.CHAINED else None
    return SocketPlan(
        send.body,
        ticket=send.ticket,
        request=request,
        context=state.context,
        plan=plan,
        anchor=anchor,
        local=anchor is not None and overlay.is_local(anchor),
        unsettled=anchor is not None,
        seconds=state.seconds,
    )


def _recovery(sent: SocketPlan) -> tuple[CallState, Callable[[Exception], Any]] | None:
    """The state and flow that recover *sent* after a refusal, or None when it is not ours to recover."""
    anchor, request, context, ticket = sent.anchor, sent.request, sent.context, sent.full_ticket
    if sent.retried or anchor is None or request is None or context is None or ticket is None:
        return None
    state = CallState(context, WEBSOCKET)
    state.plan, state.seconds = sent.plan, sent.seconds
    state.published = not sent.unsettled

    def flow(error: Exception) -> Any:
        return refused_flow(context, request, anchor, ticket, error)

    return state, flow


def _resent(state: CallState, sent: SocketPlan) -> SocketPlan:
    send = state.response
    assert isinstance(send, Send)
    return attrs.evolve(
        sent, body=send.body, ticket=send.ticket, anchor=None, local=False, retried=True, unsettled=False
    )
