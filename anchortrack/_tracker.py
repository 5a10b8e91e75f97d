"""
The tracker: one wrapped client's state, and the performer of its effects.

One tracker serves one wrapped client and every copy made from it
(``with_options()``, ``copy()``).
The decisions live in `anchortrack._flow`; this module performs the effects
the flow yields — store operations through the fail-open `Guard`, sends
through the client, bookkeeping into `Stats` and the log — and writes the
anchors recorded responses become.
It is also the call's fail-open entry (`Tracker._call` / `Tracker._acall`):
a fault while planning sends the call through unchanged.
"""

from __future__ import annotations

import threading
import time
from collections import ChainMap, deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextvars import ContextVar
from typing import Any

import attrs

from . import _otel
from ._backlog import Backlog
from ._flow import (
    UNAVAILABLE,
    CallContext,
    DisableChaining,
    Evict,
    FellBack,
    Find,
    Get,
    Log,
    Planned,
    Send,
    Ticket,
    Unavailable,
    adrive,
    call_flow,
    drive,
    refused_flow,
)
from ._guard import Guard, State
from ._hashing import Memo, Scope, api_key_digest, fingerprint_items, prefix_hashes
from ._log import debug_enabled, get_logger, short
from ._mode import Mode, coerce, describe, resolve
from ._plan import Plan, Reason, RecentViews, new_anchor, unrecordable
from ._refusal import Failure, classify
from ._request import Request, read_request
from ._seal import mac_key
from ._socket import LaneOverlay, SocketPlan
from ._stats import HTTP, WEBSOCKET, Stats
from .stores._base import Anchor, AnchorStore
from .stores.memory import MemoryStore


#: The tracked streams the SDK built while one request was sent (the client's
#: post_parser adds them): the one peeked for an in-stream refusal, whatever
#: object a tracer hands back around it.
sent_streams: ContextVar[list[Any] | None] = ContextVar("anchortrack_sent_streams", default=None)

SendFn = Callable[[Mapping[str, Any], "Ticket | None"], Any]
AsyncSendFn = Callable[[Mapping[str, Any], "Ticket | None"], Awaitable[Any]]

#: The one dispatch table of store effects: the operation (the sync store
#: method; the async one has an ``a`` prefix) and its arguments.
_STORE_OPERATIONS: dict[type[Any], Callable[[Any], tuple[str, tuple[Any, ...]]]] = {
    Find: lambda effect: ("find", (effect.scope, effect.views)),
    Get: lambda effect: ("get", (effect.scope, effect.response_id)),
    Evict: lambda effect: ("evict", (effect.scope, effect.response_id)),
}

#: Most backlog entries one flush writes (the rest wait for the next call).
_FLUSH_BATCH = 64

#: How many of its latest anchors a tracker keeps in process, beside a shared store.
_LOCAL_ANCHORS = 10_000


class _CallState:
    """What the performer of one call's effects keeps: its context, its plan, its sends."""

    __slots__ = ("answered", "context", "plan", "response", "sdk_error", "sent", "transport", "unsettled")

    def __init__(self, context: CallContext, transport: str = HTTP) -> None:
        self.context = context
        self.transport = transport
        self.plan: Plan | None = None
        #: A chained plan whose outcome (accepted or refused) is not counted yet.
        self.unsettled = False
        self.sent = False
        self.answered = False
        self.response: Any = None
        self.sdk_error: BaseException | None = None


#: The process-wide default store (see `default_store`).
_default: AnchorStore | None = None
_default_lock = threading.Lock()
#: How many anchors the default store keeps (about 22 MB; least recently used dropped first).
DEFAULT_STORE_ANCHORS = 100_000
#: How `store=` may be spelled: the message of the error for anything else.
STORE_ACCEPTED = (
    "an AnchorStore instance (MemoryStore(), SQLiteStore(path), RedisStore.from_url(url)) "
    "or a store spec string ('memory', 'sqlite:PATH', 'redis://HOST[:PORT][/DB]')"
)


def default_store() -> AnchorStore:
    """
    Return the process-wide default store, creating it on first use.

    One bounded `MemoryStore` (`DEFAULT_STORE_ANCHORS`, LRU) shared by every
    tracker made without ``store=``, so a sync and an async client, or two
    wraps of one client, continue each other's conversations. Scopes keep
    endpoints, organizations, projects, namespaces and (in this store only)
    API keys apart.
    """
    global _default
    with _default_lock:
        if _default is None:
            _default = MemoryStore(DEFAULT_STORE_ANCHORS)
        return _default


def coerce_store(store: object, *, caller: str = "anchortrack.wrap()") -> AnchorStore:
    """
    Return the store *store* names: an `AnchorStore` as is, a spec string opened.

    Raises:
        TypeError: *store* is neither (the message names what was given and
            what is accepted).
        ImportError: a Redis URL without the ``redis`` package.
        OSError: a SQLite path that cannot be created.
    """
    if isinstance(store, str):
        from .stores._open import open_store

        try:
            return open_store(store)
        except ValueError:
            hint = ""
            if store and ":" not in store:
                hint = f" (for a SQLite file, write store='sqlite:{store}')"
            raise TypeError(
                f"{caller}: store={store!r} is not a store spec{hint}; store= takes {STORE_ACCEPTED}"
            ) from None
    if isinstance(store, type):
        raise TypeError(
            f"{caller}: store={store.__name__} is the class, not a store; "
            f"pass an instance such as {store.__name__}(...). store= takes {STORE_ACCEPTED}"
        )
    if not isinstance(store, AnchorStore):
        import reprlib

        raise TypeError(
            f"{caller}: store={reprlib.repr(store)} is a {type(store).__name__}, not an anchor store; "
            f"store= takes {STORE_ACCEPTED}"
        )
    return store


class Tracker:
    """
    Plans requests and records responses for one wrapped client.

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
        store_timeout: Seconds a store operation may take (sync or async; for
            a sync store that may block, on a worker thread) before the call
            goes out stateless; also the most the write after a response may
            delay handing the response back.
        store_cooldown: Seconds between two probes of a store that is down
            (one call tries it, the others go without it); also settable on
            a live tracker (``anchortrack.tracker(client).store_cooldown = 0``).
        scope_by_api_key: Put a keyed digest of the client's API key in the
            scope (the default), so clients with different keys sharing a
            store never share anchors. False keeps anchors usable across a
            key rotation (then separate tenants with *namespace*).
        clock: Unix time source (tests).

    Raises:
        TypeError: *store* is not a store or a store spec.

    Attributes:
        store: The anchor store.
        shared_default: Whether *store* is the process-wide default store.
        stats: What this tracker did (`Stats`).
        recent: The views this tracker recorded lately; hand them to
            ``anchortrack.explain(..., recent=...)`` to locate where a
            diverged history first differs.
        backlog: Anchor writes the store did not take in time, written when
            it answers again (`Backlog`; its ``limit`` is the bound, 10,000
            by default).
        local_anchors: With a store that may block (SQLite, Redis, your
            own), the 10,000 anchors this tracker recorded last, in a
            `MemoryStore`: planning looks there too, so a conversation keeps
            chaining from its own anchors while the store is down or slow, or
            after it came back empty. None with a `MemoryStore`.
    """

    def __init__(
        self,
        store: AnchorStore | str | None = None,
        *,
        mode: Mode | str | None = None,
        namespace: str | None = None,
        record_incomplete: bool = False,
        store_timeout: float = 1.0,
        store_cooldown: float = 1.0,
        scope_by_api_key: bool = True,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.shared_default = store is None
        self.store: AnchorStore = (
            default_store() if store is None else coerce_store(store, caller="Tracker()")
        )
        self.mode: Mode | None = coerce(mode) if mode is not None else None
        self.namespace = namespace
        self.record_incomplete = record_incomplete
        self.scope_by_api_key = scope_by_api_key
        self.clock = clock
        self.stats = Stats()
        self.recent = RecentViews()
        self._guard = Guard(self.stats, timeout=store_timeout, cooldown=store_cooldown)
        self._memo = Memo()
        self._pending: deque[tuple[str, Anchor]] = deque()
        self.backlog = Backlog()
        #: The backlog's entries, read on every call to skip the work when it is empty.
        self._backlog_entries = self.backlog._entries
        self.local_anchors: MemoryStore | None = (
            None if _never_blocks(self.store) else MemoryStore(_LOCAL_ANCHORS, clock=lambda: self.clock())
        )
        self._cycle = [0, 0]  # written, dropped since the backlog was last empty
        self._zdr: set[str] = set()
        self._roots: dict[Scope, tuple[str, bytes]] = {}
        self._last_root: tuple[Scope | None, tuple[str, bytes]] = (None, ("", b""))
        self._scopes: dict[int, tuple[tuple[Any, ...], Scope]] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        mode = describe(self.mode)
        store = type(self.store).__name__ + (" (shared default)" if self.shared_default else "")
        namespace = f" namespace={self.namespace!r}" if self.namespace is not None else ""
        return f"<Tracker mode={mode} store={store}{namespace} {self.stats._summary()}>"

    @property
    def store_cooldown(self) -> float:
        """Seconds the store is skipped after a failure before it is tried again."""
        return self._guard.breaker.cooldown

    @store_cooldown.setter
    def store_cooldown(self, seconds: float) -> None:
        self._guard.breaker.cooldown = seconds

    @property
    def store_timeout(self) -> float:
        """Seconds a store operation may take before the call goes without it."""
        return self._guard.timeout

    @store_timeout.setter
    def store_timeout(self, seconds: float) -> None:
        self._guard.timeout = seconds

    def scope_for(self, client: Any) -> Scope:
        """
        The scope this tracker records *client*'s anchors under.

        Its base URL, organization and project, this tracker's namespace and,
        with ``scope_by_api_key``, a keyed digest of its API key (a key that
        comes from a provider or workload identity changes as it rotates, so
        it is left out: separate such tenants with a namespace). Hand it to
        ``anchortrack.explain`` or ``plan_request`` to look at the same anchors.
        """
        api_key = getattr(client, "api_key", None)
        by_key = (
            self.scope_by_api_key
            and isinstance(api_key, str)
            and api_key
            and getattr(client, "_api_key_provider", None) is None
        )
        secret = self.store.secret_key
        # Every call asks: the same settings give the same scope, so it is made
        # once. The key is named by its (cached) string hash, never held.
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
        with self._lock:
            if len(self._scopes) >= 64:
                self._scopes.clear()
            self._scopes[id(client)] = (settings, scope)
        return scope

    # -- the fail-open entry ------------------------------------------------

    def _call(self, params: dict[str, Any], scope: Callable[[], Scope], send: SendFn) -> Any:
        """
        Make one tracked call (sync): plan it, send it, record its response.

        *send* sends keyword arguments through the SDK and records the response
        with the ticket, if any. A fault while planning sends *params* through
        unchanged; once something was sent, only what the SDK raised reaches
        the caller.
        """
        try:
            begun = self._begin(params, scope())
        except Exception as error:  # noqa: BLE001 - fail open
            self._fault(error)
            return send(params, None)
        if begun is None:
            return send(params, None)
        state = _CallState(begun[0])
        try:
            return self._run(state, begun[1], send)
        except Exception as error:
            if error is state.sdk_error:
                raise
            self._fault(error)
            return state.response if state.answered else send(params, None)

    async def _acall(self, params: dict[str, Any], scope: Callable[[], Scope], send: AsyncSendFn) -> Any:
        """Make one tracked call (async): the twin of `_call`."""
        try:
            begun = self._begin(params, scope())
        except Exception as error:  # noqa: BLE001 - fail open
            self._fault(error)
            return await send(params, None)
        if begun is None:
            return await send(params, None)
        state = _CallState(begun[0])
        try:
            return await self._arun(state, begun[1], send)
        except Exception as error:
            if error is state.sdk_error:
                raise
            self._fault(error)
            return state.response if state.answered else await send(params, None)

    def _begin(self, params: Mapping[str, Any], scope: Scope) -> tuple[CallContext, Request] | None:
        """
        Read one ``responses.create`` / ``parse`` call and build its context.

        Returns None when the call must pass through untouched (mode ``off``).

        Raises:
            TypeError: ``input`` has no Responses API shape.
        """
        mode = resolve(self.mode)
        if mode is Mode.OFF:
            self.stats.passed_through(mode=mode.value, reason=Reason.MODE_OFF.value)
            get_logger().debug("anchortrack.request_passed_through", reason=Reason.MODE_OFF.value)
            return None
        request = read_request(params)
        key, root = self._root(scope)
        context = CallContext(
            scope_key=key,
            root=root,
            mode=mode,
            zdr_disabled=key in self._zdr,
            now=self.clock(),
            memo=self._memo,
            recent=self.recent,
            mac_key=mac_key(self.store.secret_key),
            quiet=not debug_enabled(),
            local_store=self.local_anchors is None,  # the store never blocks
        )
        return context, request

    def _root(self, scope: Scope) -> tuple[str, bytes]:
        last = self._last_root
        if last[0] is scope:
            return last[1]
        cached = self._roots.get(scope)
        if cached is None:
            secret = self.store.secret_key
            cached = (scope.store_key(secret), scope.root(secret))
            with self._lock:
                if len(self._roots) > 64:
                    self._roots.clear()
                self._roots[scope] = cached
        self._last_root = (scope, cached)
        return cached

    def _fault(self, error: Exception) -> None:
        """Report a fault inside anchortrack; the call goes out exactly as given."""
        self.stats.passed_through(mode=resolve(self.mode).value, reason=Reason.INTERNAL_ERROR.value)
        get_logger().warning("anchortrack.tracker_fault", error=type(error).__name__, fallback="stateless")

    # -- performing effects: run and arun differ only in awaiting ------------

    def _run(self, state: _CallState, request: Request, send: SendFn) -> Any:
        self._flush()
        guard, store = self._guard, self.store
        inline = _never_blocks(store)

        def perform(effect: Any) -> Any:
            operation = _STORE_OPERATIONS.get(type(effect))
            if operation is not None:
                name, args = operation(effect)
                method = getattr(store, name)
                answer = guard.run(name, lambda: method(*args), inline=inline)
                return self._with_local(effect, answer)
            if type(effect) is Send:
                state.sent = True
                try:
                    built: list[Any] = []
                    token = sent_streams.set(built)
                    try:
                        response = send(effect.body, effect.ticket)
                    finally:
                        sent_streams.reset(token)
                    stream = built[0] if built else None
                    if effect.anchor_id is not None and stream is not None:
                        refusal = stream._peek()
                        if refusal is not None:
                            if _recoverable(refusal, effect.anchor_id):
                                stream._discard()
                                raise refusal
                            stream._release()
                except Exception as error:
                    state.sdk_error = error
                    raise
                state.response = response
                state.answered = True
                self._flush()
                return response
            return self._note(state, effect)

        try:
            return drive(call_flow(state.context, request), perform)
        finally:
            self._settle(state, None)

    async def _arun(self, state: _CallState, request: Request, send: AsyncSendFn) -> Any:
        await self._aflush()
        guard, store = self._guard, self.store

        async def perform(effect: Any) -> Any:
            operation = _STORE_OPERATIONS.get(type(effect))
            if operation is not None:
                name, args = operation(effect)
                method = getattr(store, "a" + name)
                answer = await guard.arun(name, lambda: method(*args))
                return self._with_local(effect, answer)
            if type(effect) is Send:
                state.sent = True
                try:
                    built: list[Any] = []
                    token = sent_streams.set(built)
                    try:
                        response = await send(effect.body, effect.ticket)
                    finally:
                        sent_streams.reset(token)
                    stream = built[0] if built else None
                    if effect.anchor_id is not None and stream is not None:
                        refusal = await stream._peek()
                        if refusal is not None:
                            if _recoverable(refusal, effect.anchor_id):
                                await stream._discard()
                                raise refusal
                            await stream._release()
                except Exception as error:
                    state.sdk_error = error
                    raise
                state.response = response
                state.answered = True
                await self._aflush()
                return response
            return self._note(state, effect)

        try:
            return await adrive(call_flow(state.context, request), perform)
        finally:
            self._settle(state, None)

    def _with_local(self, effect: Any, answer: Any) -> Any:
        """
        Add the anchors this tracker recorded lately to a store effect's *answer*.

        The same for sync and async calls. A conversation keeps chaining from
        its own anchors when the store is down, slow, or came back empty.
        """
        local = self.local_anchors
        if local is None and not self._backlog_entries:
            return answer  # nothing of this tracker's own to add (the common case: a MemoryStore)
        if isinstance(effect, Evict):
            if len(self.backlog):
                self.backlog.evict(effect.scope, effect.response_id)
                self.stats.backlog_changed(size=len(self.backlog))
            if local is not None:
                local.evict(effect.scope, effect.response_id)
            return answer
        backlog = self.backlog if local is None else None  # else the local anchors hold it
        if (local is None or not len(local)) and (backlog is None or not len(backlog)):
            return answer
        if isinstance(effect, Find):
            if local is not None:
                hits = local.find(effect.scope, effect.views)
            else:
                assert backlog is not None
                hits = backlog.find(effect.scope, effect.views, self.clock())
            if not hits:
                return answer
            # The store's answer wins; neither side is decoded until the plan reads it.
            return hits if isinstance(answer, Unavailable) else ChainMap(answer, hits)  # type: ignore[arg-type]
        if isinstance(answer, Anchor):
            return answer
        if local is not None:
            hit = local.get(effect.scope, effect.response_id)
        else:
            assert backlog is not None
            hit = backlog.get(effect.scope, effect.response_id, self.clock())
        return hit if hit is not None else answer

    def _note(self, state: _CallState, effect: Any) -> None:
        """Perform a bookkeeping effect (the same for sync and async calls)."""
        if type(effect) is Planned:
            plan = state.plan = effect.plan
            # A chained request is counted once the server accepted or refused it.
            state.unsettled = plan.chained and state.context.mode is Mode.CHAINED
            self.stats.planned(
                mode=state.context.mode.value,
                chained=plan.chained,
                reason=plan.reason.value,
                items_sent=plan.sent,
                items_total=plan.total,
                bytes_planned=plan.bytes_planned,
                bytes_stateless=plan.bytes_stateless,
                seconds=effect.seconds,
                count=not state.unsettled,
                rejected=len(plan.rejected),
                transport=state.transport,
            )
            _otel.planned(plan, state.context.mode.value)
        elif isinstance(effect, Log):
            fields = (
                effect.fields if state.transport == HTTP else {**effect.fields, "transport": state.transport}
            )
            getattr(get_logger(), effect.level)(effect.event, **fields)
        elif isinstance(effect, FellBack):
            planned = state.plan
            _otel.fell_back(effect.failure.value)
            self.stats.fell_back(
                effect.failure.value,
                items_resent=planned.total if planned is not None else 0,
                bytes_resent=planned.bytes_stateless if planned is not None else 0,
            )
            self._settle(state, effect.failure.value)
        elif isinstance(effect, DisableChaining):
            self._zdr.add(effect.scope_key)
        else:
            raise TypeError(f"unknown effect {effect!r}")

    def _settle(self, state: _CallState, refused: str | None) -> None:
        """Count a chained call's outcome, once: ``chained``, or ``resent`` after a refusal."""
        if state.unsettled:
            state.unsettled = False
            self.stats.settled(mode=state.context.mode.value, refused=refused, transport=state.transport)

    # -- recording ----------------------------------------------------------

    def _observe(self, ticket: Ticket, response: object, output: Sequence[Any] | None = None) -> None:
        """
        Decide whether *response* becomes an anchor; queue it if so. Never raises.

        The caller writes the queue: `_flush` or `_aflush`.
        """
        try:
            self._record(ticket, response, output)
        except Exception as error:  # noqa: BLE001 - recording must never break a call
            get_logger().warning("anchortrack.record_failed", error=type(error).__name__)

    def _record(self, ticket: Ticket, response: object, output: Sequence[Any] | None) -> None:
        response_id = getattr(response, "id", None)
        status = getattr(response, "status", None)
        reason = ticket.skip_reason or unrecordable(response, record_incomplete=self.record_incomplete)
        if reason is not None:
            self.stats.skipped_response(reason.value)
            get_logger().debug(
                "anchortrack.response_not_recorded",
                response_id=response_id,
                status=status,
                reason=reason.value,
            )
            return
        assert isinstance(response_id, str)
        anchor, outputs = self._anchor_of(ticket, response_id, response, output, parent=ticket.parent)
        self._pending.append((ticket.scope, anchor))
        if self.local_anchors is not None:
            self.local_anchors.put(ticket.scope, anchor)
        _recorded_event(response_id, anchor, outputs)

    def _anchor_of(
        self,
        ticket: Ticket,
        response_id: str,
        response: object,
        output: Sequence[Any] | None,
        *,
        parent: str | None,
    ) -> tuple[Anchor, int]:
        """The anchor *response* becomes after *ticket*'s request, and how many output items it has."""
        items = list(output if output is not None else getattr(response, "output", None) or ())
        fps, _, _ = fingerprint_items(items, self._memo)
        hashes = prefix_hashes(ticket.base, fps)
        anchor = new_anchor(
            response_id,
            base=ticket.base,
            count=ticket.count,
            hashes=hashes,
            now=self.clock(),
            ttl=self.store.ttl,
            chain_expires_at=ticket.expires_at,
            properties=ticket.properties,
            scope=ticket.scope,
            mac_key=mac_key(self.store.secret_key),
            parent=parent,
        )
        if ticket.hashes is not None:
            self.recent.add(ticket.hashes, hashes)
        return anchor, len(items)

    def _abandoned(self, ticket: Ticket | None) -> None:
        """Report a stream that ended without a terminal event."""
        if ticket is None:
            return
        self.stats.skipped_response(Reason.STREAM_ABANDONED.value)
        get_logger().debug("anchortrack.response_not_recorded", reason=Reason.STREAM_ABANDONED.value)

    # -- writing anchors: at most one deadline after a response ---------------

    def _flush(self) -> None:
        """
        Write queued anchors to the store (sync), then some of the backlog.

        Takes at most the store timeout in all: what does not fit, or what
        the store refuses, waits in the backlog.
        """
        pending, backlog = self._pending, self.backlog
        if not pending and not self._backlog_entries:
            return
        guard, store = self._guard, self.store
        inline = _never_blocks(store)
        ends = time.monotonic() + guard.timeout
        while pending:
            try:
                scope, anchor = pending.popleft()
            except IndexError:
                break
            budget = ends - time.monotonic()
            written = budget > 0 and not isinstance(
                guard.run("put", lambda: store.put(scope, anchor), inline=inline, budget=budget),  # noqa: B023
                Unavailable,
            )
            if written:
                self.stats.recorded_response()
            else:
                self._queue(scope, anchor)
        if not len(backlog) or guard.breaker.state is not State.CLOSED:
            return
        batch, expired = backlog.take(_FLUSH_BATCH, self.clock())
        done = 0
        for scope, anchor in batch:
            budget = ends - time.monotonic()
            if budget <= 0 or isinstance(
                guard.run("put", lambda: store.put(scope, anchor), inline=inline, budget=budget),  # noqa: B023
                Unavailable,
            ):
                break
            done += 1
        self._drained(batch, done, expired)

    async def _aflush(self) -> None:
        """Write queued anchors to the store (async): the twin of `_flush`."""
        pending, backlog = self._pending, self.backlog
        if not pending and not self._backlog_entries:
            return
        guard, store = self._guard, self.store
        ends = time.monotonic() + guard.timeout
        while pending:
            try:
                scope, anchor = pending.popleft()
            except IndexError:
                break
            budget = ends - time.monotonic()
            written = budget > 0 and not isinstance(
                await guard.arun("put", lambda: store.aput(scope, anchor), budget=budget),  # noqa: B023
                Unavailable,
            )
            if written:
                self.stats.recorded_response()
            else:
                self._queue(scope, anchor)
        if not len(backlog) or guard.breaker.state is not State.CLOSED:
            return
        batch, expired = backlog.take(_FLUSH_BATCH, self.clock())
        done = 0
        for scope, anchor in batch:
            budget = ends - time.monotonic()
            if budget <= 0 or isinstance(
                await guard.arun("put", lambda: store.aput(scope, anchor), budget=budget),  # noqa: B023
                Unavailable,
            ):
                break
            done += 1
        self._drained(batch, done, expired)

    def _queue(self, scope: str, anchor: Anchor) -> None:
        """Keep an anchor the store did not take in time in the backlog."""
        queued, overflowed = self.backlog.add(scope, anchor, self.clock())
        dropped = {"overflow": overflowed, "expired": 0 if queued or overflowed else 1}
        self._count_backlog(queued=int(queued), dropped=dropped)

    def _drained(self, batch: list[tuple[str, Anchor]], done: int, expired: int) -> None:
        """Account for one backlog batch: *done* written, the rest back in the backlog."""
        now = self.clock()
        for scope, anchor in batch[done:]:
            self.backlog.add(scope, anchor, now)
        self._count_backlog(written=done, dropped={"expired": expired})
        if not len(self.backlog):
            with self._lock:
                (written, dropped), self._cycle = self._cycle, [0, 0]
            if written or dropped:
                get_logger().info("anchortrack.backlog_flushed", written=written, dropped=dropped)

    def _count_backlog(self, *, queued: int = 0, written: int = 0, dropped: dict[str, int]) -> None:
        """
        Count backlog traffic. A response counts as recorded once its anchor
        is written (at once, or later from the backlog), and as not recorded
        (``store_unavailable``) if its anchor is dropped from the backlog.
        """
        lost = sum(dropped.values())
        for _ in range(written):
            self.stats.recorded_response()
        for _ in range(lost):
            self.stats.skipped_response(Reason.STORE_UNAVAILABLE.value)
        with self._lock:
            first_loss = lost > 0 and self._cycle[1] == 0
            self._cycle[0] += written
            self._cycle[1] += lost
        self.stats.backlog_changed(size=len(self.backlog), queued=queued, written=written, dropped=dropped)
        if first_loss:
            reason = "overflow" if dropped.get("overflow") else "expired"
            get_logger().warning("anchortrack.backlog_dropped", reason=reason, limit=self.backlog.limit)

    # -- the WebSocket transport (``client.responses.connect()``) -------------
    #
    # A socket send returns nothing: the outcome arrives later on the receive
    # side. So the call is split: `_plan_socket` runs the same call flow up to
    # its send, `_recover_socket` runs the flow's refusal branch when an error
    # frame refuses a chained create, and `_record_socket` records at the
    # terminal event. *overlay* answers for the connection's local anchors.

    def _plan_socket(
        self, fields: Mapping[str, Any], scope: Callable[[], Scope], overlay: LaneOverlay
    ) -> SocketPlan:
        """Plan one ``response.create`` event (sync). Never raises: a fault plans it as given."""
        try:
            begun = self._begin_socket(fields, scope(), overlay)
            if begun is None:
                return SocketPlan(fields)
            state, request = begun
            drive(call_flow(state.context, request), self._socket_perform(state, overlay))
            return _socket_plan(state, request, overlay)
        except Exception as error:  # noqa: BLE001 - fail open
            self._socket_fault(error, counted=True)
            return SocketPlan(fields)

    async def _aplan_socket(
        self, fields: Mapping[str, Any], scope: Callable[[], Scope], overlay: LaneOverlay
    ) -> SocketPlan:
        """Plan one ``response.create`` event (async): the twin of `_plan_socket`."""
        try:
            begun = self._begin_socket(fields, scope(), overlay)
            if begun is None:
                return SocketPlan(fields)
            state, request = begun
            await adrive(call_flow(state.context, request), self._asocket_perform(state, overlay))
            return _socket_plan(state, request, overlay)
        except Exception as error:  # noqa: BLE001 - fail open
            self._socket_fault(error, counted=True)
            return SocketPlan(fields)

    def _recover_socket(self, sent: SocketPlan, error: Exception, overlay: LaneOverlay) -> SocketPlan | None:
        """
        An error frame refused the create *sent* chained (sync): the full resend, or None.

        None when the refusal is the caller's (not a stale anchor or ZDR), or
        on a fault; the error frame then reaches the caller unchanged.
        """
        begun = _recovery(sent)
        if begun is None:
            return None
        state, flow = begun
        try:
            drive(flow(error), self._socket_perform(state, overlay))
        except Exception as raised:  # noqa: BLE001 - the caller's refusal, or a fault
            if raised is not error:
                self._socket_fault(raised, counted=False)
            return None
        return _resent(state, sent)

    async def _arecover_socket(
        self, sent: SocketPlan, error: Exception, overlay: LaneOverlay
    ) -> SocketPlan | None:
        """The twin of `_recover_socket` (async)."""
        begun = _recovery(sent)
        if begun is None:
            return None
        state, flow = begun
        try:
            await adrive(flow(error), self._asocket_perform(state, overlay))
        except Exception as raised:  # noqa: BLE001 - the caller's refusal, or a fault
            if raised is not error:
                self._socket_fault(raised, counted=False)
            return None
        return _resent(state, sent)

    def _record_socket(self, ticket: Ticket, response: object, output: Sequence[Any] | None) -> Anchor | None:
        """
        Record a response that arrived on a socket. Never raises.

        A stored response is queued for the store like an HTTP one (the
        caller flushes). A ``store: false`` response, or any while the scope
        refuses storage (ZDR), lives only in that socket's memory: its anchor
        is returned, for the connection's overlay, and never written.
        """
        local = (
            ticket.skip_reason is Reason.STORE_FALSE
            or ticket.scope in self._zdr
            or getattr(response, "store", None) is False
        )
        if not local:
            self._observe(ticket, response, output)
            return None
        try:
            return self._local_anchor(ticket, response, output)
        except Exception as error:  # noqa: BLE001 - recording must never break a socket
            get_logger().warning("anchortrack.record_failed", error=type(error).__name__, transport=WEBSOCKET)
            return None

    def _local_anchor(self, ticket: Ticket, response: object, output: Sequence[Any] | None) -> Anchor | None:
        response_id = getattr(response, "id", None)
        skip = ticket.skip_reason
        reason = (
            skip
            if skip is not None and skip is not Reason.STORE_FALSE
            else unrecordable(response, record_incomplete=self.record_incomplete, connection_local=True)
        )
        if reason is not None:
            self.stats.skipped_response(reason.value)
            get_logger().debug(
                "anchortrack.response_not_recorded",
                response_id=response_id,
                status=getattr(response, "status", None),
                reason=reason.value,
                transport=WEBSOCKET,
            )
            return None
        assert isinstance(response_id, str)
        anchor, outputs = self._anchor_of(ticket, response_id, response, output, parent=None)
        self.stats.recorded_locally()
        _recorded_event(response_id, anchor, outputs, transport=WEBSOCKET, connection_local=True)
        return anchor

    def _socket_settle(self, sent: SocketPlan, refused: str | None = None) -> None:
        """Count a chained socket create once its outcome is known (`SocketPlan.unsettled`)."""
        if sent.unsettled and sent.context is not None:
            self.stats.settled(mode=sent.context.mode.value, refused=refused, transport=WEBSOCKET)

    def _socket_dropped(self, in_flight: Sequence[SocketPlan], local_anchors: int) -> None:
        """Report what a socket that closed or reconnected took with it."""
        for sent in in_flight:
            self._socket_settle(sent)
            self.stats.skipped_response(Reason.WEBSOCKET_DROPPED.value)
        if in_flight or local_anchors:
            get_logger().debug(
                "anchortrack.websocket_state_dropped",
                in_flight=len(in_flight),
                local_anchors=local_anchors,
                transport=WEBSOCKET,
            )

    def _socket_fault(self, error: Exception, *, counted: bool) -> None:
        """A fault inside anchortrack on the socket path: the event goes out, or comes in, as given."""
        if counted:
            self.stats.passed_through(
                mode=resolve(self.mode).value, reason=Reason.INTERNAL_ERROR.value, transport=WEBSOCKET
            )
        get_logger().warning(
            "anchortrack.tracker_fault", error=type(error).__name__, fallback="stateless", transport=WEBSOCKET
        )

    def _begin_socket(
        self, fields: Mapping[str, Any], scope: Scope, overlay: LaneOverlay
    ) -> tuple[_CallState, Request] | None:
        mode = resolve(self.mode)
        if mode is Mode.OFF:
            self.stats.passed_through(mode=mode.value, reason=Reason.MODE_OFF.value, transport=WEBSOCKET)
            get_logger().debug(
                "anchortrack.request_passed_through", reason=Reason.MODE_OFF.value, transport=WEBSOCKET
            )
            return None
        begun = self._begin(fields, scope)
        if begun is None:
            return None
        context, request = begun
        if context.zdr_disabled and overlay.usable():
            # The scope refuses stored anchors; this socket's latest response still chains.
            context = attrs.evolve(context, zdr_disabled=False)
        return _CallState(context, WEBSOCKET), request

    def _socket_perform(self, state: _CallState, overlay: LaneOverlay) -> Callable[[Any], Any]:
        guard, store = self._guard, self.store
        stored_only_local = state.context.scope_key in self._zdr

        def perform(effect: Any) -> Any:
            step = _overlaid(effect, overlay, stored_only_local)
            if isinstance(step, _Answered):
                return step.value
            if step is not None:
                name, args, combine = step
                method = getattr(store, name)
                return combine(guard.run(name, lambda: method(*args)))
            return _captured(self, state, effect)

        return perform

    def _asocket_perform(self, state: _CallState, overlay: LaneOverlay) -> Callable[[Any], Awaitable[Any]]:
        guard, store = self._guard, self.store
        stored_only_local = state.context.scope_key in self._zdr

        async def perform(effect: Any) -> Any:
            step = _overlaid(effect, overlay, stored_only_local)
            if isinstance(step, _Answered):
                return step.value
            if step is not None:
                name, args, combine = step
                method = getattr(store, "a" + name)
                return combine(await guard.arun(name, lambda: method(*args)))
            return _captured(self, state, effect)

        return perform


# -- the socket path's pieces shared by its sync and async entries -------------


@attrs.frozen
class _Answered:
    """A store effect the connection's overlay answered by itself."""

    value: Any


def _overlaid(
    effect: Any, overlay: LaneOverlay, zdr: bool
) -> _Answered | tuple[str, tuple[Any, ...], Callable[[Any], Any]] | None:
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

        return "find", (effect.scope, effect.views), merged
    if isinstance(effect, Get):
        anchor = overlay.get(effect.response_id)
        if anchor is not None:
            return _Answered(anchor)
        return "get", (effect.scope, effect.response_id), _same
    if isinstance(effect, Evict):
        if overlay.evict(effect.response_id):
            return _Answered(None)
        return "evict", (effect.scope, effect.response_id), _same
    return None


def _same(value: Any) -> Any:
    return value


def _captured(tracker: Tracker, state: _CallState, effect: Any) -> Any:
    """Keep the flow's ``Send`` (the event goes out later, on the socket); note the rest."""
    if type(effect) is Send:
        state.sent = True
        state.response = effect
        return None
    return tracker._note(state, effect)


def _socket_plan(state: _CallState, request: Request, overlay: LaneOverlay) -> SocketPlan:
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
        unsettled=state.unsettled,
    )


def _recovery(sent: SocketPlan) -> tuple[_CallState, Callable[[Exception], Any]] | None:
    """The state and flow that recover *sent* after a refusal, or None when it is not ours to recover."""
    anchor, request, context, ticket = sent.anchor, sent.request, sent.context, sent.full_ticket
    if sent.retried or anchor is None or request is None or context is None or ticket is None:
        return None
    state = _CallState(context, WEBSOCKET)
    state.plan = sent.plan
    state.unsettled = sent.unsettled

    def flow(error: Exception) -> Any:
        return refused_flow(context, request, anchor, ticket, error)

    return state, flow


def _resent(state: _CallState, sent: SocketPlan) -> SocketPlan:
    send = state.response
    assert isinstance(send, Send)
    return attrs.evolve(
        sent, body=send.body, ticket=send.ticket, anchor=None, local=False, retried=True, unsettled=False
    )


def _recoverable(error: BaseException, anchor_id: str) -> bool:
    """
    Whether the flow recovers from a chained stream's first-event *error*.

    A stale-anchor or ZDR refusal inside the stream is raised into the flow,
    which evicts and resends, like an HTTP refusal; any other error stays the
    caller's, in its stream.
    """
    return classify(error, anchor_id) is not Failure.OTHER


def _recorded_event(response_id: str, anchor: Anchor, outputs: int, **extra: Any) -> None:
    """The debug event for a recorded anchor (not even built unless it would show)."""
    if debug_enabled():
        get_logger().debug(
            "anchortrack.response_recorded",
            response_id=response_id,
            view=short(anchor.view),
            items=anchor.count,
            outputs=outputs,
            **extra,
        )


def _never_blocks(store: object) -> bool:
    """Whether *store* declares that its sync methods never block (run them inline)."""
    return getattr(store, "never_blocks", False) is True
