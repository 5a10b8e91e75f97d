"""Fail open around any store: one that fails, hangs or lies costs a larger request, never the call. One
deadline, one cooldown with a single probe per kind of call (read, write), one bounded write-behind `Backlog`
that planning reads, so a conversation keeps chaining through an outage."""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import queue
import threading
import time
from collections import ChainMap, OrderedDict, deque
from collections.abc import Awaitable, Callable, Generator, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, TypeVar

import attrs

from ._flow import FLUSH, UNAVAILABLE, Evict, Find, Get, Unavailable, adrive, drive
from ._fork import ForkSafeLock
from ._log import get_logger
from ._settings import STORE_COOLDOWN, STORE_TIMEOUT
from ._stats import Stats
from .stores._base import Anchor, runs_inline
from .stores._open import store_label


T = TypeVar("T")
#: A sync store call for a worker thread, and where its answer goes.
_Job = tuple[Callable[[], Any], Future[Any]]

#: How many anchors the backlog holds by default.
DEFAULT_BACKLOG_LIMIT = 10_000
#: Most backlog entries one flush writes (the rest wait for the next call).
_FLUSH_BATCH = 64
#: A failed async call is tried again if the loop was blocked for this share of its wait (and `_MIN_STALL` s).
_STALL_SHARE = 0.5
_MIN_STALL = 0.02
#: How often the loop is sampled while an async call waits; lateness below `_NOISE` is scheduling noise.
_TICK = 0.025
_NOISE = 0.005


class StoreTimeout(TimeoutError):
    """A store call did not answer within its deadline."""


@attrs.frozen
class Put:
    """Write *anchor* (the write-behind's effect), within the shared deadline *ends* (monotonic)."""

    scope: str
    anchor: Anchor
    ends: float


#: The store effects: the operation (the sync method; a native async twin adds an ``a``) and its arguments.
_OPERATIONS: dict[type[Any], Callable[[Any], tuple[str, tuple[Any, ...]]]] = {
    Find: lambda effect: ("find", (effect.scope, effect.views)),
    Get: lambda effect: ("get", (effect.scope, effect.response_id)),
    Evict: lambda effect: ("evict", (effect.scope, effect.response_id)),
    Put: lambda effect: ("put", (effect.scope, effect.anchor)),
}


def is_store_effect(effect: object) -> bool:
    """Whether *effect* is store I/O."""
    return type(effect) in _OPERATIONS


def _kind(operation: str) -> str:
    return "read" if operation in ("find", "get") else "write"


class FailOpen:
    """The store as a tracker uses it: every call with a deadline (*timeout*, also the one deadline of all the
    writes after a response), a *cooldown* between probes, a backlog; *monotonic* times outages."""

    def __init__(
        self,
        store: Any,
        stats: Stats,
        *,
        timeout: float = STORE_TIMEOUT.default,
        cooldown: float = STORE_COOLDOWN.default,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store, self.stats, self.timeout, self.cooldown = store, stats, timeout, cooldown
        self.label = store_label(store)  # how warnings name it: a Redis URL without its password
        self.inline = runs_inline(store)
        # Beside a store that may block, planning also reads this tracker's latest written anchors.
        self.backlog = Backlog(keep_written=not self.inline)
        self._clock, self._monotonic = clock, monotonic
        self._recorded: deque[tuple[str, Anchor]] = deque()
        self._workers = _Workers()
        self._lock = ForkSafeLock()
        # The breaker: healthy while no failure is pending. The first failure's operation, error and
        # time; whether a probe failed since; when the next probe may go (never while one is out).
        self._first: tuple[str, str, float] | None = None
        self._down = False
        self._retry_at = 0.0
        self._cycle = [0, 0]  # written, dropped since the backlog was last empty

    @property
    def healthy(self) -> bool:
        """Whether the store is neither suspect nor down."""
        return self._first is None

    def call(self, operation: str, fn: Callable[[], T], *, budget: float | None = None) -> T | Unavailable:
        """Run a sync store operation, failing open (`UNAVAILABLE`); *budget* may shorten its deadline."""
        probe = self._admit(operation, budget)
        if probe is None:
            return UNAVAILABLE
        try:
            result = fn() if self.inline else self._workers.call(fn, self._deadline(budget))
        except BaseException as error:  # noqa: BLE001 - any store fault fails open
            return self._failed(probe, operation, error)
        return self._succeeded(probe, operation, result)

    async def acall(self, operation: str, fn: Callable[[], Any], *, budget: float | None = None) -> Any:
        """The twin of `call` (async): *fn* returns its answer (an inline store) or an awaitable."""
        probe = self._admit(operation, budget)
        if probe is None:
            return UNAVAILABLE
        try:
            result = fn() if self.inline else await self._awaited(operation, fn, self._deadline(budget))
        except BaseException as error:  # noqa: BLE001 - any store fault fails open
            return self._failed(probe, operation, error)
        return self._succeeded(probe, operation, result)

    async def _awaited(self, operation: str, fn: Callable[[], Awaitable[T]], deadline: float) -> T:
        """*fn*'s answer within *deadline*, tried once more if it failed while the caller's own loop was
        blocked for most of its wait (a timer due every `_TICK` s that fires L s late: blocked L s)."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        blocked, due = 0.0, started + _TICK
        timer: asyncio.TimerHandle

        def tick() -> None:
            nonlocal blocked, due, timer
            now = loop.time()
            if now - due > _NOISE:
                blocked += now - due
            due = now + _TICK
            timer = loop.call_at(due, tick)

        timer = loop.call_at(due, tick)
        try:
            return await asyncio.wait_for(fn(), deadline)
        except Exception as error:
            now = loop.time()
            late = now - due  # a tick the loop has not run yet
            blocked += late if late > _NOISE else 0.0
            if blocked < max(_MIN_STALL, _STALL_SHARE * (now - started)):
                raise
            self.stats.add("store_stalls", key=operation)
            get_logger().debug(
                "anchortrack.store_call_stalled",
                operation=operation,
                error=type(error).__name__,
                stalled_seconds=round(blocked, 3),
            )
        finally:
            timer.cancel()
        return await asyncio.wait_for(fn(), deadline)

    def _deadline(self, budget: float | None) -> float:
        return self.timeout if budget is None else max(0.0, min(self.timeout, budget))

    def _admit(self, operation: str, budget: float | None) -> bool | None:
        """Whether the call may go: False as a plain call, True as the probe, None to go without the store."""
        if budget is not None and budget <= 0:  # out of time
            return None
        if self.healthy:
            return False
        with self._lock:
            first = self._first
            if first is None:
                return False
            if _kind(first[0]) != _kind(operation) or self._monotonic() < self._retry_at:
                return None
            self._retry_at = math.inf  # the one probe
            return True

    def _failed(self, probe: bool, operation: str, error: BaseException) -> Unavailable:
        """Count the failure; the first makes the store suspect, a failed probe means down. A call cancelled
        before it answered (*error* is no `Exception`) is no failure: it lets another probe go."""
        if not isinstance(error, Exception):
            if probe:
                with self._lock:
                    self._retry_at = 0.0
            raise error
        self.stats.add("store_errors", key=operation)
        name = type(error).__name__
        with self._lock:
            now, first = self._monotonic(), self._first
            degraded = probe and first is not None and not self._down
            if first is None:
                self._first, self._retry_at = (operation, name, now), now
            elif probe:  # a failure of a call begun before the suspicion is the same event
                self._retry_at, self._down = now + self.cooldown, True
        if first is None:
            get_logger().debug("anchortrack.store_suspect", operation=operation, error=name)
        elif degraded:
            get_logger().warning(
                "anchortrack.store_degraded",
                store=self.label,
                operation=first[0],
                error=first[1],
                retry_in=self.cooldown,
            )
        return UNAVAILABLE

    def _succeeded(self, probe: bool, operation: str, result: T) -> T:
        """End the suspicion or outage, if this success is of the kind that began it; return *result*."""
        if not probe and self._first is None:
            return result
        with self._lock:
            first = self._first
            if first is None or _kind(first[0]) != _kind(operation):
                return result
            was_down, self._first, self._down = self._down, None, False
            lasted = self._monotonic() - first[2]
        if was_down:
            get_logger().warning("anchortrack.store_recovered", outage_seconds=round(lasted, 3))
        return result

    def perform(self, effect: Any) -> Any:
        """Perform one effect of a call: `FLUSH`, a callable (called), or a store effect, failing open (this
        tracker's own anchors fill the gaps in an answer)."""
        if effect is FLUSH:
            return self.flush()
        if callable(effect):
            return effect()
        name, args, budget = self._bind(effect)
        method = getattr(self.store, name)
        return self._merged(effect, self.call(name, lambda: method(*args), budget=budget))

    async def aperform(self, effect: Any) -> Any:
        """The twin of `perform` (async): a store's native async method if it has one (``afind``, ...),
        else its sync one, inline for a store that never blocks, in a worker thread for any other."""
        if effect is FLUSH:
            return await self.aflush()
        if callable(effect):
            return await effect()
        name, args, budget = self._bind(effect)
        method = getattr(self.store, name)
        if self.inline:
            fn: Callable[[], Any] = lambda: method(*args)  # noqa: E731
        elif (native := getattr(self.store, "a" + name, None)) is not None:
            fn = lambda: native(*args)  # noqa: E731
        else:
            fn = lambda: asyncio.wrap_future(self._workers.submit(lambda: method(*args)))  # noqa: E731
        return self._merged(effect, await self.acall(name, fn, budget=budget))

    def _bind(self, effect: Any) -> tuple[str, tuple[Any, ...], float | None]:
        """The operation of *effect*, its arguments, and the time a write has left."""
        name, args = _OPERATIONS[type(effect)](effect)
        return name, args, effect.ends - time.monotonic() if type(effect) is Put else None

    def _merged(self, effect: Any, answer: Any) -> Any:
        """The store's *answer*, with what the backlog holds for the effect where the store has nothing."""
        backlog = self.backlog
        if not backlog.held or type(effect) is Put:
            return answer
        if isinstance(effect, Evict):
            backlog.evict(effect.scope, effect.response_id)
            self.stats.backlog_size = len(backlog)
            return answer
        now = self._clock()
        if isinstance(effect, Find):
            hits = backlog.find(effect.scope, effect.views, now)
            if not hits:
                return answer
            # The store's answer wins; neither side is decoded until the plan reads it.
            return hits if isinstance(answer, Unavailable) else ChainMap(answer, hits)
        hit = None if isinstance(answer, Anchor) else backlog.get(effect.scope, effect.response_id, now)
        return hit if hit is not None else answer

    def record(self, scope: str, anchor: Anchor) -> None:
        """Queue *anchor* for the next `flush`."""
        self._recorded.append((scope, anchor))

    def flush(self) -> None:
        """Write what was recorded, then some of the backlog, within one deadline in all (sync)."""
        if self._recorded or len(self.backlog):
            drive(self._writes(), self.perform)

    async def aflush(self) -> None:
        """The twin of `flush` (async)."""
        if self._recorded or len(self.backlog):
            await adrive(self._writes(), self.aperform)

    def _writes(self) -> Generator[Put, Any, None]:
        """The writes of one flush: what was recorded, then, if the store is healthy, the backlog."""
        recorded, backlog = self._recorded, self.backlog
        ends = time.monotonic() + self.timeout
        while recorded:
            try:
                scope, anchor = recorded.popleft()
            except IndexError:  # another thread's flush took it
                break
            if (yield Put(scope, anchor, ends)) is UNAVAILABLE:  # it waits in the backlog
                queued, overflowed = backlog.add(scope, anchor, self._clock())
                self._count(queued=int(queued), overflow=overflowed, expired=int(not queued))
            else:
                self.stats.add("recorded")
                if backlog.keep_written:
                    backlog.add(scope, anchor, self._clock(), written=True)
        if not len(backlog) or not self.healthy:
            return
        batch, expired = backlog.take(_FLUSH_BATCH, self._clock())
        done = 0
        for scope, anchor in batch:
            if (yield Put(scope, anchor, ends)) is UNAVAILABLE:
                break
            done += 1
        now, overflow = self._clock(), 0
        for scope, anchor in batch[done:]:  # back to wait: what that pushes out, or what expired, is lost
            queued, overflowed = backlog.add(scope, anchor, now)
            overflow, expired = overflow + overflowed, expired + int(not queued)
        self._count(written=done, overflow=overflow, expired=expired)
        if not len(backlog):
            with self._lock:
                (written, lost), self._cycle = self._cycle, [0, 0]
            if written or lost:
                get_logger().info("anchortrack.backlog_flushed", written=written, dropped=lost)

    def _count(self, *, queued: int = 0, written: int = 0, overflow: int = 0, expired: int = 0) -> None:
        """Count backlog traffic: recorded once written, not recorded (``store_unavailable``) once dropped."""
        stats, lost = self.stats, overflow + expired
        stats.add("recorded", written)
        stats.add("not_recorded", lost, key="store_unavailable")
        stats.add("backlog_queued", queued)
        stats.add("backlog_written", written)
        stats.add("backlog_dropped", overflow, key="overflow")
        stats.add("backlog_dropped", expired, key="expired")
        stats.backlog_size = len(self.backlog)
        with self._lock:
            first_loss = lost > 0 and self._cycle[1] == 0
            self._cycle[0] += written
            self._cycle[1] += lost
        if first_loss:
            reason = "overflow" if overflow else "expired"
            get_logger().warning("anchortrack.backlog_dropped", reason=reason, limit=self.backlog.limit)


class Backlog:
    """This tracker's anchors the store has not taken yet (``len()``) and, with *keep_written*, its latest
    ones it did take, for planning to read. Past *limit* the oldest written one goes, else the oldest
    waiting one (lost: ``overflow``); expired ones are dropped when met. Thread-safe."""

    def __init__(self, limit: int = DEFAULT_BACKLOG_LIMIT, *, keep_written: bool = False) -> None:
        self.limit, self.keep_written = limit, keep_written
        self._lock = ForkSafeLock()
        # By (scope, view), oldest first: the anchors waiting to be written, and those written (keep_written).
        self._waiting: OrderedDict[tuple[str, bytes], Anchor] = OrderedDict()
        self._kept: OrderedDict[tuple[str, bytes], Anchor] = OrderedDict()
        self._ids: dict[tuple[str, str], bytes] = {}  # (scope, response id) -> view, of both

    def __len__(self) -> int:
        return len(self._waiting)

    @property
    def held(self) -> int:
        """How many anchors it holds, written or not."""
        return len(self._waiting) + len(self._kept)

    def add(self, scope: str, anchor: Anchor, now: float, *, written: bool = False) -> tuple[bool, int]:
        """Hold *anchor* (waiting to be written, unless *written*), replacing what its view or id held;
        return whether it is held (not expired, limit above 0) and how many waiting ones overflowed."""
        key = (scope, anchor.view)
        with self._lock:
            self._forget(scope, anchor.response_id)
            self._drop(key)
            if not anchor.is_live(now) or self.limit <= 0:
                return False, 0
            (self._kept if written else self._waiting)[key] = anchor
            self._ids[scope, anchor.response_id] = anchor.view
            overflowed = 0
            while self.held > self.limit:
                pool = self._kept or self._waiting  # a written anchor never pushes out an unwritten one
                overflowed += pool is self._waiting
                self._drop(next(iter(pool)))
            return self._at(key) is not None, overflowed

    def find(self, scope: str, views: Sequence[bytes], now: float) -> dict[bytes, Anchor]:
        """The live anchors of *scope* it holds for any of *views*."""
        with self._lock:
            found = {view: self._at((scope, view)) for view in views}
        return {view: anchor for view, anchor in found.items() if anchor is not None and anchor.is_live(now)}

    def get(self, scope: str, response_id: str, now: float) -> Anchor | None:
        """The live anchor of *scope* it holds for *response_id*, if any."""
        with self._lock:
            view = self._ids.get((scope, response_id))
            anchor = self._at((scope, view)) if view is not None else None
        return anchor if anchor is not None and anchor.is_live(now) else None

    def evict(self, scope: str, response_id: str) -> None:
        """Forget *response_id* and every anchor chained from it."""
        with self._lock:
            children: dict[str, list[str]] = {}
            for (entry_scope, _), anchor in [*self._waiting.items(), *self._kept.items()]:
                if entry_scope == scope and anchor.parent is not None:
                    children.setdefault(anchor.parent, []).append(anchor.response_id)
            todo = [response_id]
            while todo:  # one pass over the held anchors, however deep (or cyclic) the chain below
                rid = todo.pop()
                self._forget(scope, rid)
                todo.extend(children.pop(rid, ()))

    def take(self, n: int, now: float) -> tuple[list[tuple[str, Anchor]], int]:
        """Up to *n* of the oldest live ``(scope, anchor)`` waiting, which wait no longer (hand back with
        `add` what was not written; held still with *keep_written*), and how many expired ones went."""
        taken: list[tuple[str, Anchor]] = []
        expired = 0
        with self._lock:
            while self._waiting and len(taken) < n:
                key, anchor = self._waiting.popitem(last=False)
                if not anchor.is_live(now):
                    self._ids.pop((key[0], anchor.response_id), None)
                    expired += 1
                    continue
                taken.append((key[0], anchor))
                if self.keep_written:
                    self._kept[key] = anchor  # held as written; `add` makes it wait again if it was not
                else:
                    self._ids.pop((key[0], anchor.response_id), None)
        return taken, expired

    def _at(self, key: tuple[str, bytes]) -> Anchor | None:
        return self._waiting.get(key) or self._kept.get(key)

    def _drop(self, key: tuple[str, bytes]) -> None:
        anchor = self._waiting.pop(key, None) or self._kept.pop(key, None)
        if anchor is not None:
            self._ids.pop((key[0], anchor.response_id), None)

    def _forget(self, scope: str, response_id: str) -> None:
        view = self._ids.get((scope, response_id))
        if view is not None:
            self._drop((scope, view))


class _Workers:
    """Up to *most* daemon threads (never keeping the interpreter alive while a store call hangs) running a
    sync store's calls, so a caller waits at most its deadline; each exits after *idle_seconds* idle."""

    def __init__(self, most: int = 4, idle_seconds: float = 10.0) -> None:
        self.most, self.idle_seconds = most, idle_seconds
        self._lock = ForkSafeLock()
        self._reset()

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self.threads, self._idle = 0, 0

    def submit(self, fn: Callable[[], T]) -> Future[T]:
        """Run *fn* on a worker thread; its future."""
        if self._pid != os.getpid():  # forked: the threads stayed in the parent
            self._reset()
        future: Future[T] = Future()
        self._jobs.put((fn, future))
        with self._lock:
            if self._idle == 0 and self.threads < self.most:
                self.threads += 1
                threading.Thread(
                    target=self._serve, args=(self._jobs,), name="anchortrack-store", daemon=True
                ).start()
        return future

    def call(self, fn: Callable[[], T], timeout: float) -> T:
        """Run *fn* on a worker thread; its result or error within *timeout* seconds, else `StoreTimeout`."""
        future = self.submit(fn)
        try:
            return future.result(max(timeout, 0.0))
        except FutureTimeout:
            future.cancel()  # not started yet: never run it (a started one keeps running)
            raise StoreTimeout(f"the store did not answer within {timeout:.3g} s") from None

    def _serve(self, jobs: queue.SimpleQueue[_Job]) -> None:
        while True:
            with self._lock:
                self._idle += 1
            job: _Job | None = None
            with contextlib.suppress(queue.Empty):
                job = jobs.get(timeout=self.idle_seconds)
            with self._lock:
                self._idle -= 1
                if job is None and jobs.empty():
                    self.threads -= 1
                    return
            if job is not None and job[1].set_running_or_notify_cancel():
                fn, future = job
                try:
                    future.set_result(fn())
                except BaseException as error:  # noqa: BLE001 - handed to the waiting caller
                    future.set_exception(error)
