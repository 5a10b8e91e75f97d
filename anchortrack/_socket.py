"""The book of one tracked WebSocket connection: which response answers which create (pure).

A send returns nothing; each lane answers its creates in order (error frames carry no response id), so the
book keeps a FIFO of `Pending` creates per lane. It mirrors the server's memory of the socket too: each
lane's latest chainable response is a local anchor, which chains even with ``store: false`` or zero data
retention while its lane is idle."""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Mapping
from typing import Any

import attrs

from ._flow import CallState, Ticket
from ._fork import ForkSafeLock
from ._request import Request
from .stores._base import Anchor


#: A lane: its ``stream_id``, or None for the default lane.
Lane = str | None

#: The client event that creates a response.
CREATE = "response.create"
#: Events that end a response and carry it whole (over a socket and in an HTTP stream).
TERMINAL_EVENTS = frozenset({"response.completed", "response.incomplete", "response.failed"})
#: Statuses the server keeps as a lane's latest response.
_CHAINABLE = frozenset({"completed", "incomplete"})
#: Received frames worth parsing: every other one (deltas) passes untouched.
_PARSED = tuple(
    f'"{kind}"'.encode()
    for kind in ("response.created", *TERMINAL_EVENTS, "response.output_item.done", "error")
)
#: Error codes about the connection, never about the create in flight.
_CONNECTION_CODES = frozenset({"websocket_connection_limit_reached"})


def lane_of(fields: Mapping[str, Any]) -> Lane:
    """The lane a client or server event belongs to."""
    value = fields.get("stream_id")
    return value if isinstance(value, str) else None


@attrs.frozen
class SocketPlan:
    """What to send for one ``response.create`` (*body*) and how to record its response (*ticket*); the call's
    *request* and *state* resend it in full if *anchor* (*local*: the socket's) is refused, and publish it."""

    body: Mapping[str, Any]
    ticket: Ticket | None = None
    request: Request | None = None
    state: CallState | None = None
    anchor: Anchor | None = None
    local: bool = False

    @property
    def lane(self) -> Lane:
        return lane_of(self.body)

    @property
    def previous_response_id(self) -> str | None:
        value = self.body.get("previous_response_id")
        return value if isinstance(value, str) else None

    def in_full(self) -> SocketPlan:
        """The same request without its anchor: the caller's event as given, recorded as sent in full."""
        if self.anchor is None or self.request is None:
            return self
        ticket = attrs.evolve(self.ticket, expires_at=None) if self.ticket is not None else None
        return attrs.evolve(self, body=self.request.body, ticket=ticket, anchor=None, local=False)


@attrs.define(eq=False)
class Pending:
    """One create sent (or about to be) on a lane of socket number *epoch*, until it ends."""

    plan: SocketPlan
    epoch: int
    response_id: str | None = None
    items: dict[int, Any] = attrs.field(factory=dict)


class FrameError(Exception):
    """An error frame, shaped like the SDK's API errors so `anchortrack._refusal.classify` reads it."""

    def __init__(self, frame: Mapping[str, Any]) -> None:
        error = frame.get("error")
        body: Mapping[str, Any] = error if isinstance(error, Mapping) else {}
        status = frame.get("status")
        self.status_code = status if isinstance(status, int) and not isinstance(status, bool) else None
        self.code = body.get("code")
        self.param = body.get("param")
        message = body.get("message")
        self.message = message if isinstance(message, str) else ""
        self.body = body
        super().__init__(self.message)


class ResponseView:
    """Attribute access to a response received as JSON (what the recorder reads)."""

    def __init__(self, data: Mapping[str, Any]) -> None:
        self._data = data

    def __getattr__(self, name: str) -> Any:
        return self._data.get(name)


@attrs.frozen
class Verdict:
    """The creates a received frame ended: with a *response* (and its *output*), record it for the only
    one; with a *refusal* of a create anchortrack chained, recover it. Otherwise publish their outcomes."""

    ended: tuple[Pending, ...]
    response: ResponseView | None = None
    output: list[Any] = attrs.field(factory=list)
    refusal: FrameError | None = None


class SocketBook:
    """The lanes and local anchors of one tracked connection, across reconnects: `reset` or `attach`
    drops what a closed socket took with it. Thread-safe."""

    def __init__(self) -> None:
        self._lock = ForkSafeLock()
        self._local: dict[Lane, Anchor] = {}
        self._lanes: dict[Lane, deque[Pending]] = {}
        self._fresh = True  # no socket yet, or reset since the last one
        self.epoch = 0

    def pending(self, plan: SocketPlan) -> Pending:
        """A new pending create for *plan*, of the current socket."""
        return Pending(plan, self.epoch)

    def stale(self, pending: Pending) -> bool:
        """Whether *pending* chains from a local anchor of a socket that is gone."""
        return pending.plan.local and pending.epoch != self.epoch

    def commit(self, pending: Pending) -> None:
        """*pending* goes out now: its answers come after those of its lane's earlier creates."""
        with self._lock:
            self._lanes.setdefault(pending.plan.lane, deque()).append(pending)

    def withdraw(self, pending: Pending) -> None:
        """*pending* did not go out after all."""
        with self._lock:
            queue = self._lanes.get(pending.plan.lane)
            if queue is not None and pending in queue:
                queue.remove(pending)

    def usable(self, lane: Lane) -> Anchor | None:
        """The local anchor *lane*'s next create may chain from (none while the lane has one in flight)."""
        with self._lock:
            return None if self._lanes.get(lane) else self._local.get(lane)

    def local(self, response_id: str) -> Anchor | None:
        """The local anchor of *response_id* on any lane (the server resolves forks by id)."""
        with self._lock:
            return next((a for a in self._local.values() if a.response_id == response_id), None)

    def evict(self, response_id: str) -> bool:
        """Forget the local anchor of *response_id*; return whether there was one."""
        with self._lock:
            lanes = [lane for lane, a in self._local.items() if a.response_id == response_id]
            for lane in lanes:
                del self._local[lane]
            return bool(lanes)

    def holds(self, anchor: Anchor) -> bool:
        """Whether *anchor* is one of this connection's local anchors."""
        with self._lock:
            return any(a is anchor for a in self._local.values())

    def reset(self) -> tuple[list[Pending], int]:
        """The socket is gone: drop and return its creates in flight, and how many local anchors it had."""
        with self._lock:
            self._fresh = True
            return self._reset_locked()

    def attach(self) -> tuple[list[Pending], int]:
        """A new socket is in use: `reset` first, unless that was done since the last one."""
        with self._lock:
            dropped = ([], 0) if self._fresh else self._reset_locked()
            self._fresh = False
            return dropped

    def _reset_locked(self) -> tuple[list[Pending], int]:
        dropped = [pending for queue in self._lanes.values() for pending in queue], len(self._local)
        self._lanes.clear()
        self._local.clear()
        self.epoch += 1
        return dropped

    def on_frame(self, data: bytes | str) -> Verdict | None:
        """Take one received frame: what it ended, or None. Deltas, unknown and malformed frames pass."""
        raw = data.encode() if isinstance(data, str) else data
        try:
            event = json.loads(raw) if any(marker in raw for marker in _PARSED) else None
        except ValueError:
            return None
        if not isinstance(event, dict):
            return None
        kind = event.get("type")
        lane = lane_of(event)
        response = event.get("response")
        response = response if isinstance(response, dict) else {}
        with self._lock:
            if kind == "response.created":
                return self._created(lane, response)
            if kind == "response.output_item.done":
                self._item_done(lane, event)
            elif kind in TERMINAL_EVENTS:
                return self._terminal(lane, response)
            elif kind == "error":
                return self._error(lane, event)
        return None

    def settle(self, pending: Pending, anchor: Anchor | None) -> None:
        """*pending*'s response became a local anchor (or not): it is now its lane's latest."""
        with self._lock:
            if anchor is not None and pending.epoch == self.epoch:
                self._local[pending.plan.lane] = anchor

    def refusal_passed(self, pending: Pending) -> None:
        """A refusal of *pending* goes to the caller: mirror the server's eviction."""
        with self._lock:
            self._evict_referenced(pending.plan.lane, pending.plan.previous_response_id)

    def _created(self, lane: Lane, response: Mapping[str, Any]) -> Verdict | None:
        queue = self._lanes.get(lane)
        if not queue or queue[0].response_id is not None:
            return None  # not ours, or an automatic successor
        head = queue[0]
        if not _answers(head, response):
            # Answers and creates no longer pair up on this lane: forget both sides.
            self._lanes.pop(lane, None)
            self._local.pop(lane, None)
            return Verdict(tuple(queue))
        rid = response.get("id")
        head.response_id = rid if isinstance(rid, str) else None
        return None

    def _item_done(self, lane: Lane, event: Mapping[str, Any]) -> None:
        queue = self._lanes.get(lane)
        if not queue or queue[0].response_id is None:
            return
        index = event.get("output_index")
        items = queue[0].items
        items[index if isinstance(index, int) else len(items)] = event.get("item")

    def _terminal(self, lane: Lane, response: Mapping[str, Any]) -> Verdict | None:
        queue = self._lanes.get(lane) or deque()
        head = queue[0] if queue else None
        ours = head is not None and (
            head.response_id == response.get("id") or (head.response_id is None and _answers(head, response))
        )
        head = queue.popleft() if ours else None
        if response.get("status") in _CHAINABLE:
            # The server keeps this response as the lane's latest; ours is no longer it.
            self._local.pop(lane, None)
        else:
            self._evict_referenced(lane, response.get("previous_response_id"))
        if head is None:
            return None
        if head.plan.ticket is None:
            return Verdict((head,))
        output = response.get("output")
        items = list(output) if isinstance(output, list) else []
        if not items and head.items:
            items = [head.items[i] for i in sorted(head.items)]
        return Verdict((head,), ResponseView(response), items)

    def _error(self, lane: Lane, event: Mapping[str, Any]) -> Verdict | None:
        error = FrameError(event)
        if lane is None and error.code in _CONNECTION_CODES:
            return None
        queue = self._lanes.get(lane)
        if not queue:
            return None
        head = queue.popleft()
        plan = head.plan
        if plan.anchor is not None and not queue and head.epoch == self.epoch:
            return Verdict((head,), refusal=error)
        self._evict_referenced(lane, plan.previous_response_id)
        return Verdict((head,))

    def _evict_referenced(self, lane: Lane, response_id: str | None) -> None:
        anchor = self._local.get(lane)
        if response_id is not None and anchor is not None and anchor.response_id == response_id:
            del self._local[lane]


def _answers(pending: Pending, response: Mapping[str, Any]) -> bool:
    """Whether *response* can be the answer to *pending* (the parent it names, if any, is the one sent)."""
    return (
        "previous_response_id" not in response
        or response["previous_response_id"] == pending.plan.previous_response_id
    )
