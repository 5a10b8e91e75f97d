"""`Calls`: a tracker's working side, the internal interface of both transports: a call is begun, its flow
relayed, its effects performed through `FailOpen`, its response observed, its outcome settled."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from contextlib import closing
from contextvars import ContextVar
from typing import Any, Protocol

from . import _otel
from ._chaindrop import ChainDropped, ChainWatch
from ._failopen import FailOpen, is_store_effect
from ._flow import (
    FLUSH,
    HINTS,
    CallContext,
    CallState,
    Flow,
    Log,
    Planned,
    Send,
    Ticket,
    adrive,
    call_flow,
    drive,
    relay,
)
from ._fork import ForkSafeLock
from ._hashing import Memo, Scope
from ._log import debug_enabled, get_logger, short
from ._mode import Mode
from ._outcome import Outcome, event, outcome_of, passed_through
from ._plan import Reason, RecentViews, anchor_of, unrecordable
from ._refusal import classify
from ._request import Request, read_request
from ._seal import mac_key
from ._settings import resolve
from ._stats import HTTP, WEBSOCKET, Stats
from .stores._base import Anchor, AnchorStore


class TrackerState(Protocol):
    """What `Calls` reads of its tracker (`anchortrack.Tracker`, which holds the `Calls`)."""

    mode: Mode | None
    record_incomplete: bool
    store: AnchorStore
    stats: Stats
    recent: RecentViews
    clock: Callable[[], float]
    failopen: FailOpen
    _memo: Memo
    _subscribers: tuple[Callable[[Outcome], object], ...]


#: The call whose ``POST /responses`` is being sent: its `Calls`, its ticket and the tracked streams the SDK
#: built for it (the client's post_parser takes the first two once, and adds the streams; one is peeked).
sending: ContextVar[tuple[Calls, Ticket, list[Any]] | None] = ContextVar("anchortrack_sending", default=None)
SendFn = Callable[[Mapping[str, Any]], Any]
AsyncSendFn = Callable[[Mapping[str, Any]], Awaitable[Any]]
#: How many entries each of a tracker's small caches holds before it starts over.
CACHE_SIZE = 64


def remember(lock: ForkSafeLock, cache: dict[Any, Any], key: object, value: object) -> None:
    """Put *value* in one of a tracker's small caches, which starts over when full."""
    with lock:
        if len(cache) >= CACHE_SIZE:
            cache.clear()
        cache[key] = value


class Calls:
    """One tracker's calls: `call` (HTTP); `begin`, `relay`, `run`, `settle`, `fault`, `chaining_disabled`
    (a socket's creates); `observe`, `abandoned`, `flush` (recording)."""

    def __init__(self, tracker: TrackerState) -> None:
        self.tracker, self.store, self.stats = tracker, tracker.store, tracker.stats
        self.recent, self.clock = tracker.recent, tracker.clock
        self.failopen, self._memo = tracker.failopen, tracker._memo
        self.flush, self.aflush = tracker.failopen.flush, tracker.failopen.aflush
        #: The servers that dropped a chain, and what finding them needs (`anchortrack._chaindrop`).
        self.chains = ChainWatch()
        self._zdr: set[str] = set()
        self._lock = ForkSafeLock()
        self._hinted: set[str] = set()
        #: Per scope, the last history without model output: its length, h(n), how often in a row it grew.
        self._no_output: dict[str, tuple[int, bytes, int]] = {}

    # -- one HTTP call: a flow yielding store effects and calls (sends, flushes, a stream's steps) ---

    def call(self, params: dict[str, Any], scope: Callable[[], Scope], send: SendFn) -> Any:
        """Make one tracked call (sync); *send* sends keyword arguments through the SDK."""
        with closing(self._call(params, scope, send)) as flow:
            return drive(flow, self.failopen.perform)

    async def acall(self, params: dict[str, Any], scope: Callable[[], Scope], send: AsyncSendFn) -> Any:
        """Make one tracked call (async): the twin of `call`."""
        with closing(self._call(params, scope, send)) as flow:
            return await adrive(flow, self.failopen.aperform)

    def run(self, flow: Generator[Any, Any, Any]) -> Any:
        """Run a transport's *flow*, performing its effects (sync)."""
        return drive(flow, self.failopen.perform)

    async def arun(self, flow: Generator[Any, Any, Any]) -> Any:
        """The twin of `run` (async)."""
        return await adrive(flow, self.failopen.aperform)

    def _call(
        self, params: dict[str, Any], scope: Callable[[], Scope], send: Callable[..., Any]
    ) -> Generator[Any, Any, Any]:
        """One HTTP call as a flow: a fault sends *params* as given; once sent, only SDK errors get out."""
        try:
            begun = self.begin(params, scope())
        except Exception as error:  # noqa: BLE001 - fail open
            self.fault(error)
            begun = None
        if begun is None:
            return (yield from _post(send, params))
        state = CallState(begun[0], HTTP)

        def answer(effect: Any) -> Generator[Any, Any, Any]:
            if type(effect) is Send:
                return (yield from self._send(state, effect, send))
            return (yield effect)

        try:
            yield FLUSH
            try:
                response = yield from self.relay(state, call_flow(state.context, begun[1]), answer)
                yield FLUSH
                return response
            finally:
                self.settle(state)
        except Exception as error:
            if error is state.sdk_error:
                raise
            self.fault(error)
            return state.response if state.answered else (yield from _post(send, params))

    def _send(self, state: CallState, effect: Send, send: Callable[..., Any]) -> Generator[Any, Any, Any]:
        """Send; a chained stream's refusal as its first event is raised into the flow like an HTTP one."""
        try:
            built: list[Any] = []
            pending = (self, effect.ticket, built) if effect.ticket is not None else None
            response = yield from _post(send, effect.body, pending)
            if effect.anchor_id is not None and built:
                stream = built[0]
                refusal = yield stream._peek
                if refusal is not None:
                    if classify(refusal, effect.anchor_id) is not None:
                        yield stream._discard
                        raise refusal
                    yield stream._release
                elif (dropped := self._dropped(effect, stream.first)) is not None:
                    yield stream._discard
                    raise dropped
            elif effect.anchor_id is not None and effect.ticket is not None:
                seen = self.chains.flagged(getattr(response, "id", None))
                if seen is not None:
                    raise ChainDropped(self.chains.base_url(effect.ticket.scope), seen)
        except Exception as error:
            state.sdk_error = error
            raise
        state.response = response
        state.answered = True
        return response

    def _dropped(self, effect: Send, first: object) -> ChainDropped | None:
        """The drop a chained stream's first event shows (its response names no previous_response_id)."""
        ticket, response = effect.ticket, self.chains.first_event(first)
        if ticket is None or response is None:
            return None
        seen = self.chains.check(ticket.scope, ticket.parent, response)
        if seen is None:
            return None
        self.chain_dropped(ticket.scope, seen)
        return ChainDropped(self.chains.base_url(ticket.scope), seen)

    def chain_dropped(self, scope_key: str, seen: str) -> None:
        """The server of *scope_key* dropped a chain (*seen*): stop chaining there (warn, count once)."""
        if self.chains.stop(scope_key, seen):
            self.stats.add("chains_dropped")
            base_url = self.chains.base_url(scope_key)
            get_logger().warning("anchortrack.chain_dropped", base_url=base_url, seen=seen, scope=scope_key)

    def begin(
        self, params: Mapping[str, Any], scope: Scope, transport: str = HTTP
    ) -> tuple[CallContext, Request] | None:
        """Read one ``responses.create`` / ``parse`` call and build its context (TypeError: not a Responses
        API ``input``); None in mode ``off``, which passes it through (its outcome published)."""
        mode = resolve(self.tracker.mode)
        if mode is Mode.OFF:
            self.publish(passed_through(mode, Reason.MODE_OFF, transport))
            return None
        request = read_request(params, scope.base_url)
        key, root = _keys(scope, self.store.secret_key)
        context = CallContext(
            scope_key=key,
            root=root,
            mode=mode,
            zdr_disabled=key in self._zdr,
            chain_dropped=self.chains.begin(key, scope.base_url),
            now=self.clock(),
            memo=self._memo,
            recent=self.recent,
            mac_key=mac_key(self.store.secret_key),
            local_store=self.failopen.inline,
        )
        return context, request

    def chaining_disabled(self, scope_key: str) -> bool:
        """Whether the scope *scope_key* refused stored anchors (zero data retention)."""
        return scope_key in self._zdr

    def relay(self, state: CallState, flow: Flow, answer: Callable[[Any], Flow]) -> Flow:
        """Run *flow* inside a flow, noting its bookkeeping; *answer* turns its sends and store effects into
        sub-flows (a transport's: HTTP sends and asks the store, a socket also asks its book)."""

        def step(effect: Any) -> Generator[Any, Any, Any]:
            if type(effect) is Send or is_store_effect(effect):
                return (yield from answer(effect))
            self._note(state, effect)
            return None

        return relay(flow, step)

    def _note(self, state: CallState, effect: Any) -> None:
        """Perform a bookkeeping effect (the same for sync and async calls)."""
        if type(effect) is Planned:
            state.plan, state.seconds = effect.plan, effect.seconds
            if effect.plan.reason is Reason.NO_HISTORY and effect.hashes:
                self._grown(state.context.scope_key, effect.hashes)
            if _otel.enabled():
                _otel.annotate(_outcome(state, seconds=state.seconds))
        elif isinstance(effect, Log):
            if effect.event not in HINTS or self._hint_once(effect.event):
                getattr(get_logger(), effect.level)(effect.event, **effect.fields, **_via(state.transport))
        else:  # FellBack: the flows yield no other bookkeeping
            state.refused = effect.reason
            if _otel.enabled() and state.plan is not None:
                _otel.annotate(_outcome(state, refused=effect.reason))
            if effect.reason is Reason.ZDR:
                self._zdr.add(state.context.scope_key)

    def publish(self, outcome: Outcome) -> None:
        """Hand one call's outcome to `stats`, the current span, its event and every subscriber; what a
        subscriber raises is logged."""
        self.stats.observe(outcome)
        _otel.annotate(outcome)
        level, name, keys = event(outcome)
        if level != "debug" or debug_enabled():
            getattr(get_logger(), level)(name, **keys)
        for callback in self.tracker._subscribers:
            try:
                callback(outcome)
            except Exception as error:  # noqa: BLE001, PERF203 - an observer never breaks the call
                get_logger().warning("anchortrack.subscriber_failed", error=type(error).__name__)

    def settle(self, state: CallState | None, *, dropped: bool = False, lost: bool = False) -> None:
        """Publish the call's outcome once, if planned (*dropped*: a create sent in full, its anchor's socket
        gone; *lost*: a create whose socket closed before its response, which is not recorded)."""
        if state is not None and state.plan is not None and not state.published:
            state.published = True
            rid = getattr(state.response, "id", None) if state.answered else None
            refused = Reason.WEBSOCKET_DROPPED if dropped else state.refused
            rid = rid if isinstance(rid, str) else None
            self.publish(
                _outcome(
                    state, refused=refused, attempted=not dropped, seconds=state.seconds, response_id=rid
                )
            )
        if lost:
            self.stats.add("not_recorded", key=Reason.WEBSOCKET_DROPPED.value)

    def fault(self, error: Exception, transport: str = HTTP, *, counted: bool = True) -> None:
        """Report a fault inside anchortrack (*counted*: as the call's outcome); the call goes on as given."""
        if counted:
            self.publish(passed_through(resolve(self.tracker.mode), Reason.INTERNAL_ERROR, transport))
        get_logger().warning(
            "anchortrack.tracker_fault", error=type(error).__name__, fallback="stateless", **_via(transport)
        )

    def _hint_once(self, event: str) -> bool:
        with self._lock:
            due = event not in self._hinted
            self._hinted.add(event)
        return due

    def _grown(self, scope_key: str, hashes: Sequence[bytes]) -> None:
        """Note a history without model output; hint once when one keeps growing so (none of it can chain)."""
        last = self._no_output.get(scope_key)
        grew = last is not None and last[0] < len(hashes) and hashes[last[0] - 1] == last[1]
        streak = last[2] + 1 if grew and last is not None else 0
        remember(self._lock, self._no_output, scope_key, (len(hashes), hashes[-1], streak))
        event = "anchortrack.hint_output_missing"
        if streak >= 2 and self._hint_once(event):
            get_logger().warning(event, items=len(hashes), calls=streak + 1, hint=HINTS[event])

    def observe(
        self, ticket: Ticket, response: object, output: Sequence[Any] | None = None, *, local: bool = False
    ) -> Anchor | None:
        """Decide whether *response* becomes an anchor; queue it if so (`flush` writes it). Never raises. A
        *local* one (a WebSocket's, maybe ``store: false``) is returned for its book, never written."""
        via = _via(WEBSOCKET) if local else {}
        try:
            response_id = getattr(response, "id", None)
            skip = None if local and ticket.skip_reason is Reason.STORE_FALSE else ticket.skip_reason
            reason = skip or unrecordable(
                response, record_incomplete=self.tracker.record_incomplete, connection_local=local
            )
            seen = None if reason or local else self.chains.check(ticket.scope, ticket.parent, response)
            if seen is not None:
                self.chain_dropped(ticket.scope, seen)
                reason = Reason.CHAIN_DROPPED
            if reason is not None:
                self.stats.add("not_recorded", key=reason.value)
                fields = {"response_id": response_id, "status": getattr(response, "status", None)}
                get_logger().debug("anchortrack.response_not_recorded", **fields, reason=reason.value, **via)
                return None
            assert isinstance(response_id, str)
            items = list(output if output is not None else getattr(response, "output", None) or ())
            anchor, hashes = anchor_of(
                response,
                items,
                base=ticket.base,
                count=ticket.count,
                properties=ticket.properties,
                memo=self._memo,
                now=self.clock(),
                ttl=self.store.ttl,
                chain_expires_at=ticket.expires_at,
                scope=ticket.scope,
                mac_key=mac_key(self.store.secret_key),
                parent=None if local else ticket.parent,
            )
            if ticket.hashes is not None:
                self.recent.add(ticket.hashes, hashes)
            if local:
                self.stats.add("recorded_local")
            else:
                self.failopen.record(ticket.scope, anchor)
            if debug_enabled():
                get_logger().debug(
                    "anchortrack.response_recorded",
                    response_id=response_id,
                    view=short(anchor.view),
                    items=anchor.count,
                    outputs=len(items),
                    **({**via, "connection_local": True} if local else {}),
                )
            return anchor if local else None
        except Exception as error:  # noqa: BLE001 - recording must never break a call
            get_logger().warning("anchortrack.record_failed", error=type(error).__name__, **via)
        return None

    def abandoned(self, ticket: Ticket | None) -> None:
        """Report a stream that ended without a terminal event."""
        if ticket is not None:
            self.stats.add("not_recorded", key=Reason.STREAM_ABANDONED.value)
            get_logger().debug("anchortrack.response_not_recorded", reason=Reason.STREAM_ABANDONED.value)


@functools.lru_cache(maxsize=CACHE_SIZE)
def _keys(scope: Scope, secret_key: bytes | None) -> tuple[str, bytes]:
    return scope.store_key(secret_key), scope.root(secret_key)


def _outcome(state: CallState, **details: Any) -> Outcome:
    """The outcome of *state*'s call as it stands (its plan made), with *details* (`outcome_of`'s)."""
    assert state.plan is not None
    return outcome_of(state.context.mode, state.transport, state.plan, **details)


def _via(transport: str) -> dict[str, str]:
    """The log field naming a transport other than HTTP (HTTP events carry none)."""
    return {} if transport == HTTP else {"transport": transport}


def _post(
    send: Callable[..., Any], body: Any, pending: tuple[Calls, Ticket, list[Any]] | None = None
) -> Generator[Any, Any, Any]:
    """Send *body*: its ``POST /responses`` records *pending*, never an outer call's pending call."""
    token = sending.set(pending)
    try:
        return (yield functools.partial(send, body))
    finally:
        sending.reset(token)
