"""
The tracker: one wrapped client's state (shared by its copies), and the performer of the effects the
flows of `anchortrack._flow` decide (the store through `FailOpen`, bookkeeping into `Stats` and the
log). It builds anchors, and fails open: a fault inside anchortrack sends the call through unchanged.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from contextlib import closing
from contextvars import ContextVar
from typing import Any

from . import _otel, _settings
from ._canonical import as_received
from ._chaindrop import ChainDropped, ChainWatch
from ._failopen import FailOpen, is_store_effect
from ._flow import (
    FLUSH,
    HINTS,
    CallContext,
    CallState,
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
from ._hashing import Memo, Scope, api_key_digest, fingerprint_items, prefix_hashes
from ._log import debug_enabled, get_logger, short
from ._mode import Mode
from ._outcome import Outcome, event, outcome_of, passed_through
from ._plan import Reason, RecentViews, new_anchor, unrecordable
from ._properties import ANY, announced
from ._refusal import classify
from ._request import Request, read_request
from ._seal import mac_key
from ._settings import STORE_COOLDOWN, STORE_TIMEOUT, describe, resolve
from ._stats import HTTP, WEBSOCKET, Stats
from .stores._base import Anchor, AnchorStore
from .stores._open import coerce_store, default_store


#: The tracked streams the SDK built while one request was sent (the client's post_parser adds them):
#: the one peeked for an in-stream refusal, whatever object a tracer hands back around it.
sent_streams: ContextVar[list[Any] | None] = ContextVar("anchortrack_sent_streams", default=None)

SendFn = Callable[[Mapping[str, Any], "Ticket | None"], Any]
AsyncSendFn = Callable[[Mapping[str, Any], "Ticket | None"], Awaitable[Any]]

#: How many entries each of a tracker's small caches holds before it starts over.
_CACHE_SIZE = 64


class Tracker:
    """
    Plans requests and records responses for one wrapped client.

    A setting left out (None) is its environment variable's value, if it has one, else its default
    (its row in ``anchortrack._settings``; docs/operations.md, "Environment variables").

    Args:
        store: Where anchors live: an `AnchorStore`, or a spec string
            (``"memory"``, ``"sqlite:PATH"``, ``"redis://…"``) opened with
            `anchortrack.stores.open_store`; by default the process-wide
            default store (`default_store`).
        mode: ``chained`` (default), ``shadow`` or ``off``; the
            ``ANCHORTRACK_MODE`` environment variable wins.
        namespace: An extra scope partition: anchors recorded under one
            namespace are never used under another.
        record_incomplete: Also anchor on ``incomplete`` responses (OpenAI
            stores them and accepts them as ``previous_response_id``).
        store_timeout: Seconds a store operation may take before the call goes
            out stateless; also the most the write after a response may delay it
            (None: 1 second).
        store_cooldown: Seconds between two probes of a store that is down
            (one call tries it, the others go without it; None: 1 second);
            settable on a live tracker.
        scope_by_api_key: Put a keyed digest of the client's API key in the
            scope (the default), so clients with different keys sharing a
            store never share anchors. False keeps anchors usable across a
            key rotation (then separate tenants with *namespace*).
        clock: Unix time source (tests).

    Raises:
        TypeError: *store* is not a store or a store spec; a time is not a number.
        ValueError: *store_timeout* is not a finite number above 0, or *store_cooldown* of 0 or more
            (also when set on a live tracker).

    Its methods other than `scope_for` and `subscribe` are an internal
    interface of the wrapped client, its streams and its WebSocket calls.

    Attributes:
        shared_default: Whether *store* is the process-wide default store.
        stats: What this tracker did (`Stats`).
        recent: The views this tracker recorded lately; hand them to
            ``anchortrack.explain(..., recent=...)`` to locate where a
            diverged history first differs.
        backlog: Anchor writes the store did not take in time, written when
            it answers again; with a store that may block it also holds the
            anchors this tracker wrote last, and planning looks there too, so
            a conversation keeps chaining while the store is down, slow or
            came back empty. Its ``limit`` is the bound (10,000 by default).
    """

    def __init__(
        self,
        store: AnchorStore | str | None = None,
        *,
        mode: Mode | str | None = None,
        namespace: str | None = None,
        record_incomplete: bool | None = None,
        store_timeout: float | None = None,
        store_cooldown: float | None = None,
        scope_by_api_key: bool | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.shared_default = store is None
        self.store: AnchorStore = (
            default_store() if store is None else coerce_store(store, caller="Tracker()")
        )
        self.mode: Mode | None = _settings.MODE.given(
            mode, "Tracker"
        )  # the variable and `using` win per call
        self.namespace = _settings.NAMESPACE.value(namespace)
        self.record_incomplete = _settings.RECORD_INCOMPLETE.value(record_incomplete)
        self.scope_by_api_key = _settings.SCOPE_BY_API_KEY.value(scope_by_api_key)
        self.clock = clock
        self.stats = Stats()
        self.recent = RecentViews()
        timeout, cooldown = STORE_TIMEOUT.value(store_timeout), STORE_COOLDOWN.value(store_cooldown)
        self.failopen = FailOpen(self.store, self.stats, timeout=timeout, cooldown=cooldown, clock=clock)
        self.backlog = self.failopen.backlog
        #: Write the anchors recorded, then some of the backlog, within one deadline (``aflush``: async).
        self.flush = self.failopen.flush
        self.aflush = self.failopen.aflush
        self._memo = Memo()
        self._zdr: set[str] = set()
        #: The servers that dropped a chain, and what finding them needs (`anchortrack._chaindrop`).
        self.chains = ChainWatch()
        self._scopes: dict[int, tuple[tuple[Any, ...], Scope]] = {}
        self._lock = ForkSafeLock()
        self._subscribers: tuple[Callable[[Outcome], object], ...] = ()
        self._hinted: set[str] = set()
        #: Per scope, the last history without model output: its length, h(n), how often in a row it grew.
        self._no_output: dict[str, tuple[int, bytes, int]] = {}

    def __repr__(self) -> str:
        mode = describe(self.mode)
        store = type(self.store).__name__ + (" (shared default)" if self.shared_default else "")
        namespace = f" namespace={self.namespace!r}" if self.namespace is not None else ""
        return f"<Tracker mode={mode} store={store}{namespace} {self.stats._summary()}>"

    # -- one HTTP call: a flow yielding store effects and calls (sends, flushes, a stream's steps) ---

    def call(self, params: dict[str, Any], scope: Callable[[], Scope], send: SendFn) -> Any:
        """Make one tracked call (sync); *send* sends keyword arguments through the SDK."""
        with closing(self._call(params, scope, send)) as flow:
            return drive(flow, self.perform)

    async def acall(self, params: dict[str, Any], scope: Callable[[], Scope], send: AsyncSendFn) -> Any:
        """Make one tracked call (async): the twin of `call`."""
        with closing(self._call(params, scope, send)) as flow:
            return await adrive(flow, self.aperform)

    def perform(self, effect: Any) -> Any:
        """Perform one effect of a call (sync): `FLUSH`, a store effect (failing open), or a callable."""
        if effect is FLUSH:
            return self.failopen.flush()
        return effect() if callable(effect) else self.failopen.perform(effect)

    def aperform(self, effect: Any) -> Awaitable[Any]:
        """The twin of `perform` (async)."""
        if effect is FLUSH:
            return self.failopen.aflush()
        return effect() if callable(effect) else self.failopen.aperform(effect)

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
            return (yield functools.partial(send, params, None))
        state = CallState(begun[0], HTTP)

        def step(effect: Any) -> Generator[Any, Any, Any]:
            if type(effect) is Send:
                return (yield from self._send(state, effect, send))
            if is_store_effect(effect):
                return (yield effect)
            self.note(state, effect)
            return None

        try:
            yield FLUSH
            try:
                response = yield from relay(call_flow(state.context, begun[1]), step)
                yield FLUSH
                return response
            finally:
                self.settle(state)
        except Exception as error:
            if error is state.sdk_error:
                raise
            self.fault(error)
            return state.response if state.answered else (yield functools.partial(send, params, None))

    def _send(self, state: CallState, effect: Send, send: Callable[..., Any]) -> Generator[Any, Any, Any]:
        """Send; a chained stream's refusal as its first event is raised into the flow like an HTTP one."""
        try:
            built: list[Any] = []
            token = sent_streams.set(built)
            try:
                response = yield functools.partial(send, effect.body, effect.ticket)
            finally:
                sent_streams.reset(token)
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
        """
        Read one ``responses.create`` / ``parse`` call and build its context (TypeError: not a Responses
        API ``input``); None in mode ``off``, which passes it through (its outcome published).
        """
        mode = resolve(self.mode)
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

    def note(self, state: CallState, effect: Any) -> None:
        """Perform a bookkeeping effect (the same for sync and async calls)."""
        if type(effect) is Planned:
            state.plan, state.seconds = effect.plan, effect.seconds
            if effect.plan.reason is Reason.NO_HISTORY and effect.hashes:
                self._grown(state.context.scope_key, effect.hashes)
            if _otel.enabled():
                _otel.annotate(
                    outcome_of(state.context.mode, state.transport, effect.plan, seconds=state.seconds)
                )
        elif isinstance(effect, Log):
            if effect.event not in HINTS or self._hint_once(effect.event):
                getattr(get_logger(), effect.level)(effect.event, **effect.fields, **_via(state.transport))
        else:  # FellBack: the flows yield no other bookkeeping
            state.refused = effect.reason
            if _otel.enabled() and state.plan is not None:
                _otel.annotate(
                    outcome_of(state.context.mode, state.transport, state.plan, refused=effect.reason)
                )
            if effect.reason is Reason.ZDR:
                self._zdr.add(state.context.scope_key)

    # -- scope and store settings ---------------------------------------------

    @property
    def store_cooldown(self) -> float:
        """Seconds the store is skipped after a failure before it is tried again."""
        return self.failopen.cooldown

    @store_cooldown.setter
    def store_cooldown(self, seconds: float) -> None:
        self.failopen.cooldown = STORE_COOLDOWN.check(seconds, "Tracker", "store_cooldown")

    @property
    def store_timeout(self) -> float:
        """Seconds a store operation may take before the call goes without it."""
        return self.failopen.timeout

    @store_timeout.setter
    def store_timeout(self, seconds: float) -> None:
        self.failopen.timeout = STORE_TIMEOUT.check(seconds, "Tracker", "store_timeout")

    def scope_for(self, client: Any) -> Scope:
        """
        The scope this tracker records *client*'s anchors under (for ``explain`` or ``plan_request``).

        Its base URL, organization and project, this tracker's namespace and,
        with ``scope_by_api_key``, a keyed digest of its API key (not of a key
        from a provider, which rotates: separate such tenants with a namespace).
        """
        api_key = getattr(client, "api_key", None)
        provided = getattr(client, "_api_key_provider", None) is not None
        by_key = self.scope_by_api_key and isinstance(api_key, str) and api_key and not provided
        secret = self.store.secret_key
        # Asked on every call, so made once per client and settings; the key is named by its hash, never held.
        settings = (
            client.base_url,
            getattr(client, "organization", None),
            getattr(client, "project", None),
            self.namespace,
            (len(api_key), hash(api_key)) if by_key else None,  # type: ignore[arg-type]
            secret,
        )
        cached = self._scopes.get(id(client))
        if cached is not None and cached[0] == settings:
            return cached[1]
        scope = Scope(
            base_url=str(settings[0]),
            organization=settings[1],
            project=settings[2],
            namespace=self.namespace,
            api_key_digest=api_key_digest(api_key, secret) if by_key else None,  # type: ignore[arg-type]
        )
        self._remember(self._scopes, id(client), (settings, scope))
        return scope

    def _remember(self, cache: dict[Any, Any], key: object, value: object) -> None:
        """Put *value* in one of the small caches, which starts over when full."""
        with self._lock:
            if len(cache) >= _CACHE_SIZE:
                cache.clear()
            cache[key] = value

    # -- outcomes -------------------------------------------------------------

    def subscribe(self, callback: Callable[[Outcome], object]) -> Callable[[], None]:
        """
        Call *callback* with the `Outcome` of every call from now on; return the function that stops it.

        It runs on the caller's thread (or task) once the decision is final, before an HTTP call returns
        (the caller's tracing span is still current); what it raises is logged, never raised.
        """
        with self._lock:
            self._subscribers = (*self._subscribers, callback)

        def unsubscribe() -> None:
            with self._lock:
                self._subscribers = tuple(c for c in self._subscribers if c is not callback)

        return unsubscribe

    def publish(self, outcome: Outcome) -> None:
        """
        Hand one call's outcome to `stats`, the current span, its event and every subscriber; what a
        subscriber raises is logged.
        """
        self.stats.observe(outcome)
        _otel.annotate(outcome)
        level, name, keys = event(outcome)
        if level != "debug" or debug_enabled():
            getattr(get_logger(), level)(name, **keys)
        for callback in self._subscribers:
            try:
                callback(outcome)
            except Exception as error:  # noqa: BLE001, PERF203 - an observer never breaks the call
                get_logger().warning("anchortrack.subscriber_failed", error=type(error).__name__)

    def settle(self, state: CallState | None, *, dropped: bool = False) -> None:
        """Publish the call's outcome once, if planned (*dropped*: a create sent in full, its socket gone)."""
        if state is None or state.plan is None or state.published:
            return
        state.published = True
        response_id = getattr(state.response, "id", None) if state.answered else None
        self.publish(
            outcome_of(
                state.context.mode,
                state.transport,
                state.plan,
                refused=Reason.WEBSOCKET_DROPPED if dropped else state.refused,
                attempted=not dropped,
                seconds=state.seconds,
                response_id=response_id if isinstance(response_id, str) else None,
            )
        )

    def fault(self, error: Exception, transport: str = HTTP, *, counted: bool = True) -> None:
        """Report a fault inside anchortrack (*counted*: as the call's outcome); the call goes on as given."""
        if counted:
            self.publish(passed_through(resolve(self.mode), Reason.INTERNAL_ERROR, transport))
        get_logger().warning(
            "anchortrack.tracker_fault", error=type(error).__name__, fallback="stateless", **_via(transport)
        )

    # -- hints: logged once per tracker ---------------------------------------

    def _hint_once(self, event: str) -> bool:
        """Whether the hint *event* is due: the first time on this tracker."""
        with self._lock:
            due = event not in self._hinted
            self._hinted.add(event)
        return due

    def _grown(self, scope_key: str, hashes: Sequence[bytes]) -> None:
        """Note a history without model output; hint once when one keeps growing so (none of it can chain)."""
        last = self._no_output.get(scope_key)
        grew = last is not None and last[0] < len(hashes) and hashes[last[0] - 1] == last[1]
        streak = last[2] + 1 if grew and last is not None else 0
        self._remember(self._no_output, scope_key, (len(hashes), hashes[-1], streak))
        event = "anchortrack.hint_output_missing"
        if streak >= 2 and self._hint_once(event):
            get_logger().warning(event, items=len(hashes), calls=streak + 1, hint=HINTS[event])

    # -- recording ----------------------------------------------------------

    def observe(
        self, ticket: Ticket, response: object, output: Sequence[Any] | None = None, *, local: bool = False
    ) -> Anchor | None:
        """
        Decide whether *response* becomes an anchor; queue it if so (`flush` writes it). Never raises.
        A *local* one (a WebSocket's, maybe ``store: false``) is returned for its book, never written.
        """
        via = _via(WEBSOCKET) if local else {}
        try:
            response_id = getattr(response, "id", None)
            skip = None if local and ticket.skip_reason is Reason.STORE_FALSE else ticket.skip_reason
            reason = skip or unrecordable(
                response, record_incomplete=self.record_incomplete, connection_local=local
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
            received = [as_received(item) for item in items]  # the server's own form, which a chain replays
            hashes = prefix_hashes(ticket.base, fingerprint_items(received, self._memo)[0])
            anchor = new_anchor(
                response_id,
                base=ticket.base,
                count=ticket.count,
                hashes=hashes,
                now=self.clock(),
                ttl=self.store.ttl,
                chain_expires_at=ticket.expires_at,
                properties=ANY if announced(response) else ticket.properties,
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


@functools.lru_cache(maxsize=_CACHE_SIZE)
def _keys(scope: Scope, secret_key: bytes | None) -> tuple[str, bytes]:
    """The store key and the root ``h(0)`` of *scope* under *secret_key*."""
    return scope.store_key(secret_key), scope.root(secret_key)


def _via(transport: str) -> dict[str, str]:
    """The log field naming a transport other than HTTP (HTTP events carry none)."""
    return {} if transport == HTTP else {"transport": transport}
