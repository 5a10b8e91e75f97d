"""
The tracker: configuration, in-memory state, recording, and the two drivers.

One tracker serves one wrapped client and every copy made from it
(``with_options()``, ``copy()``).
The decisions live in `anchortrack._flow`; this module performs the effects:
store operations go through the fail-open `Guard`, sends go to the client.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from ._flow import Context, Effect, Find, Get, Send, Ticket, adrive, call_flow, drive
from ._guard import UNAVAILABLE, Guard
from ._hashing import Memo, Scope, fingerprint_items, prefix_hashes
from ._log import get_logger, short
from ._mode import Mode, coerce, resolve
from ._plan import Plan, Reason, RecentViews, choose, unrecordable
from ._refusal import Failure
from ._request import Request, read_request
from ._stats import Stats
from .stores._base import Anchor, AnchorStore


SendFn = Callable[[Mapping[str, Any], "Ticket | None"], Any]
AsyncSendFn = Callable[[Mapping[str, Any], "Ticket | None"], Awaitable[Any]]


class Tracker:
    """
    Plans requests and records responses for one wrapped client.

    Args:
        store: Where anchors live; defaults to a new `MemoryStore`.
        mode: ``chained`` (default), ``shadow`` or ``off``; the
            ``ANCHORTRACK_MODE`` environment variable wins.
        namespace: An extra scope partition: anchors recorded under one
            namespace are never used under another.
        record_incomplete: Also anchor on ``incomplete`` responses (OpenAI
            stores them and accepts them as ``previous_response_id``).
        store_timeout: Seconds an async store operation may take before the
            call goes out stateless.
        clock: Unix time source (tests).
    """

    def __init__(
        self,
        store: AnchorStore | None = None,
        *,
        mode: Mode | str | None = None,
        namespace: str | None = None,
        record_incomplete: bool = False,
        store_timeout: float = 1.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if store is None:
            from .stores.memory import MemoryStore

            store = MemoryStore()
        self.store: AnchorStore = store
        self.mode: Mode | None = coerce(mode) if mode is not None else None
        self.namespace = namespace
        self.record_incomplete = record_incomplete
        self.clock = clock
        self.stats = Stats()
        self.guard = Guard(self.stats, timeout=store_timeout)
        self.recent = RecentViews()
        self.memo = Memo()
        self.is_async = False
        self._pending: deque[tuple[str, Anchor]] = deque()
        self._zdr: set[str] = set()
        self._roots: dict[Scope, tuple[str, bytes]] = {}
        self._lock = threading.Lock()

    # -- per call -----------------------------------------------------------

    def begin(self, params: Mapping[str, Any], scope: Scope) -> tuple[Mode, _Call | None]:
        """
        Decide how to handle one ``responses.create`` / ``parse`` call.

        Returns the mode and, unless the call must pass through untouched, the
        call context.

        Raises:
            TypeError: ``input`` has no Responses API shape.
        """
        mode = resolve(self.mode)
        if mode is Mode.OFF:
            self.stats.passed_through(mode=mode.value, reason=Reason.MODE_OFF.value)
            get_logger().debug("anchortrack.request_passed_through", reason=Reason.MODE_OFF.value)
            return mode, None
        request = read_request(params)
        key, root = self._root(scope)
        return mode, _Call(self, request, mode, key, root)

    def _root(self, scope: Scope) -> tuple[str, bytes]:
        cached = self._roots.get(scope)
        if cached is None:
            cached = (scope.key, scope.root(self.store.secret_key))
            with self._lock:
                if len(self._roots) > 64:
                    self._roots.clear()
                self._roots[scope] = cached
        return cached

    def run(self, call: _Call, send: SendFn) -> Any:
        """Run one call's flow with sync effects."""
        self.flush()
        guard, store = self.guard, self.store

        def perform(effect: Effect) -> Any:
            if isinstance(effect, Send):
                call.sent = True
                result = send(effect.body, effect.ticket)
                self.flush()
                return result
            if isinstance(effect, Find):
                return guard.run("find", lambda: store.find(effect.scope, effect.views))
            if isinstance(effect, Get):
                return guard.run("get", lambda: store.get(effect.scope, effect.response_id))
            return guard.run("evict", lambda: store.evict(effect.scope, effect.response_id))

        return drive(call_flow(call, call.request, UNAVAILABLE), perform)

    async def arun(self, call: _Call, send: AsyncSendFn) -> Any:
        """Run one call's flow with async effects."""
        await self.aflush()
        guard, store = self.guard, self.store

        async def perform(effect: Effect) -> Any:
            if isinstance(effect, Send):
                call.sent = True
                result = await send(effect.body, effect.ticket)
                await self.aflush()
                return result
            if isinstance(effect, Find):
                return await guard.arun("find", lambda: store.afind(effect.scope, effect.views))
            if isinstance(effect, Get):
                return await guard.arun("get", lambda: store.aget(effect.scope, effect.response_id))
            return await guard.arun("evict", lambda: store.aevict(effect.scope, effect.response_id))

        return await adrive(call_flow(call, call.request, UNAVAILABLE), perform)

    # -- recording ----------------------------------------------------------

    def observe(self, ticket: Ticket, response: object, output: Sequence[Any] | None = None) -> None:
        """
        Decide whether *response* becomes an anchor; queue it if so. Never raises.

        Sync trackers write the anchor at once; async ones on the next await.
        """
        try:
            self._observe(ticket, response, output)
        except Exception as error:  # noqa: BLE001 - recording must never break a call
            get_logger().warning("anchortrack.record_failed", error=type(error).__name__)
        if not self.is_async:
            self.flush()

    def _observe(self, ticket: Ticket, response: object, output: Sequence[Any] | None) -> None:
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
        items = list(output if output is not None else getattr(response, "output", None) or ())
        fps, _, _ = self.fingerprints(items)
        hashes = prefix_hashes(ticket.base, fps)
        view = hashes[-1] if hashes else ticket.base
        now = self.clock()
        expires_at = now + self.store.ttl
        if ticket.expires_at is not None:
            expires_at = min(expires_at, ticket.expires_at)
        anchor = Anchor(
            view=view,
            response_id=response_id,
            count=ticket.count + len(items),
            created_at=now,
            expires_at=expires_at,
        )
        self._pending.append((ticket.scope, anchor))
        if ticket.hashes is not None:
            self.recent.add([*ticket.hashes, *hashes])
        self.stats.recorded_response()
        get_logger().debug(
            "anchortrack.response_recorded",
            response_id=response_id,
            view=short(view),
            items=anchor.count,
            outputs=len(items),
        )

    def abandoned(self, ticket: Ticket | None) -> None:
        """Report a stream that ended without a terminal event."""
        if ticket is None:
            return
        self.stats.skipped_response(Reason.STREAM_ABANDONED.value)
        get_logger().debug("anchortrack.response_not_recorded", reason=Reason.STREAM_ABANDONED.value)

    def flush(self) -> None:
        """Write queued anchors to the store (sync)."""
        pending, guard, store = self._pending, self.guard, self.store
        while pending:
            try:
                scope, anchor = pending.popleft()
            except IndexError:
                return
            guard.run("put", lambda: store.put(scope, anchor))  # noqa: B023 - called at once

    async def aflush(self) -> None:
        """Write queued anchors to the store (async)."""
        pending, guard, store = self._pending, self.guard, self.store
        while pending:
            try:
                scope, anchor = pending.popleft()
            except IndexError:
                return
            await guard.arun("put", lambda: store.aput(scope, anchor))  # noqa: B023 - awaited at once

    # -- pure helpers used by the flow --------------------------------------

    def fingerprints(self, items: Sequence[object]) -> tuple[list[bytes], list[int], bool]:
        """Return fingerprints, canonical sizes and whether model output is present."""
        return fingerprint_items(items, self.memo)

    def disable_scope(self, scope_key: str) -> None:
        """Stop chaining in *scope_key* (after a ZDR refusal)."""
        self._zdr.add(scope_key)


class _Call(Context):
    """The flow's view of its tracker for one call."""

    def __init__(self, tracker: Tracker, request: Request, mode: Mode, key: str, root: bytes) -> None:
        self.tracker = tracker
        self.request = request
        self.mode = mode
        self.scope_key = key
        self.root = root
        self.zdr_disabled = key in tracker._zdr
        self.sent = False
        self.plan: Plan | None = None

    def fingerprints(self, items: Sequence[object]) -> tuple[list[bytes], list[int], bool]:
        return self.tracker.fingerprints(items)

    def choose(self, hashes: Sequence[bytes], found: Mapping[bytes, Anchor], *, has_model: bool) -> Plan:
        t = self.tracker
        return choose(hashes, found, t.clock(), has_model_items=has_model, recent=t.recent)

    def planned(self, request: Request, plan: Plan, seconds: float | None) -> None:
        self.plan = plan
        t = self.tracker
        t.stats.planned(
            mode=self.mode.value,
            chained=plan.chained,
            reason=plan.reason.value,
            items_sent=plan.sent,
            items_total=plan.total,
            bytes_planned=plan.bytes_planned,
            bytes_stateless=plan.bytes_stateless,
            seconds=seconds,
        )
        log = get_logger()
        if self.mode is Mode.SHADOW:
            log.info(
                "anchortrack.shadow_planned",
                would_chain=plan.chained,
                reason=plan.reason.value,
                anchor_id=plan.anchor.response_id if plan.anchor else None,
                items_total=plan.total,
                items_would_send=plan.sent,
                bytes_would_save=plan.bytes_stateless - plan.bytes_planned,
                diverged_at=plan.diverged_at,
            )
        elif plan.anchor is not None:
            log.debug(
                "anchortrack.request_chained",
                anchor_id=plan.anchor.response_id,
                items_sent=plan.sent,
                items_skipped=plan.skip,
                bytes_saved=plan.bytes_stateless - plan.bytes_planned,
            )
        elif plan.reason is Reason.CALLER_MANAGED:
            log.debug("anchortrack.request_passed_through", reason=plan.reason.value, items_sent=plan.total)
        else:
            log.debug(
                "anchortrack.request_stateless",
                reason=plan.reason.value,
                items_sent=plan.total,
                diverged_at=plan.diverged_at,
            )

    def fell_back(self, failure: Failure, anchor: Anchor) -> None:
        t = self.tracker
        plan = self.plan
        t.stats.fell_back(
            failure.value,
            items_resent=plan.total if plan is not None else 0,
            bytes_resent=plan.bytes_stateless if plan is not None else 0,
        )
        log = get_logger()
        if failure is Failure.ZDR:
            t.disable_scope(self.scope_key)
            log.warning(
                "anchortrack.scope_disabled",
                reason=Reason.ZDR.value,
                anchor_id=anchor.response_id,
                scope=self.scope_key,
            )
        else:
            log.warning(
                "anchortrack.anchor_evicted",
                reason=Reason.STALE_ANCHOR.value,
                anchor_id=anchor.response_id,
                resent="stateless",
            )
