"""
Fail open around the anchor store: written once for every backend.

A store fault costs a larger request, never the caller's call, and never more
than the deadline (*timeout*) of waiting: async calls wait with
``asyncio.wait_for``, sync calls on a worker thread (`StoreWorker`), except for
stores that declare they never block (``never_blocks = True``, as
`MemoryStore` does), which run inline.

What counts against the store:

* A call that failed while the caller's own event loop was blocked for most
  of its wait (`LoopWatch`) is not the store's fault: it is tried once more at
  once, and counted as a loop stall, not a store error.
* One failure only makes the store *suspect*; the next call is a probe (the
  only store call in flight, the others go without the store meanwhile), and
  only if the probe fails too is the store *down*: ``store_degraded`` is
  logged once, and the store is skipped except for one probe every
  *cooldown* seconds. Probes are of the same kind (read: ``find``, ``get``;
  write: ``put``, ``evict``) as the first failure; calls of the other kind
  go without the store meanwhile (a write waits in the backlog). The first
  success of a probe ends the suspicion or the outage (``store_recovered``).
"""

from __future__ import annotations

import asyncio
import enum
import threading
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from ._deadline import StoreWorker, loop_watch
from ._flow import UNAVAILABLE, Unavailable
from ._log import get_logger
from ._stats import Stats


T = TypeVar("T")


class State(enum.Enum):
    """Where the breaker stands."""

    CLOSED = "closed"
    SUSPECT = "suspect"
    OPEN = "open"


class Attempt:
    """One admitted store call: whether it is the probe."""

    __slots__ = ("probe",)

    def __init__(self, probe: bool) -> None:
        self.probe = probe


_GO = Attempt(probe=False)


class Breaker:
    """
    Circuit-breaker state: closed, suspect, or open with one probe every *cooldown* seconds.

    Thread-safe; the monotonic clock is injectable for tests.
    """

    def __init__(self, cooldown: float = 1.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.cooldown = cooldown
        self._clock = clock
        self._lock = threading.Lock()
        self.state = State.CLOSED
        self._since: float | None = None
        self._first: tuple[str, str] | None = None
        self._retry_at = 0.0
        self._probing = False

    @property
    def down(self) -> bool:
        """Whether an outage is in progress (a probe confirmed a failure)."""
        return self.state is State.OPEN

    @property
    def first_failure(self) -> tuple[str, str] | None:
        """The operation and error name that started the current suspicion or outage."""
        return self._first

    def enter(self, operation: str) -> Attempt | None:
        """
        Admit a store call now (possibly as the probe), or None to go without the store.

        While the store is suspect or down, only calls of the same kind (read
        or write) as the first failure probe it; the others go without it.
        """
        if self.state is State.CLOSED:
            return _GO
        with self._lock:
            if self._closed():
                return _GO
            first = self._first
            if first is not None and _kind(first[0]) != _kind(operation):
                return None
            if self._probing or self._clock() < self._retry_at:
                return None
            self._probing = True
            return Attempt(probe=True)

    def _closed(self) -> bool:
        """Whether the breaker is closed (read again under the lock)."""
        return self.state is State.CLOSED

    def abandon(self, attempt: Attempt) -> None:
        """The call was cancelled before it answered: let another probe go."""
        if attempt.probe:
            with self._lock:
                self._probing = False

    def failed(self, attempt: Attempt, operation: str, error: str) -> State | None:
        """Record a failure; return the state it moved the breaker to, if it moved it."""
        with self._lock:
            if attempt.probe:
                self._probing = False
            now = self._clock()
            if self.state is State.CLOSED:
                self.state, self._since, self._first = State.SUSPECT, now, (operation, error)
                self._retry_at = now
                return State.SUSPECT
            if not attempt.probe:
                return None  # begun before the suspicion: the same event
            self._retry_at = now + self.cooldown
            if self.state is State.SUSPECT:
                self.state = State.OPEN
                return State.OPEN
            return None

    def succeeded(self, attempt: Attempt, operation: str) -> tuple[State, float] | None:
        """
        Record a success; return the state it ended and how long that lasted, if it ended one.

        Only a success of the same kind (a read: ``find``, ``get``; a write:
        ``put``, ``evict``) as the failure that began the suspicion or outage
        ends it: a store that answers reads but refuses writes stays down.
        """
        if self.state is State.CLOSED and not attempt.probe:
            return None
        with self._lock:
            if attempt.probe:
                self._probing = False
            if self._closed():
                return None
            first = self._first
            if first is not None and _kind(first[0]) != _kind(operation):
                return None
            ended, since = self.state, self._since
            self.state, self._since, self._first = State.CLOSED, None, None
            return ended, self._clock() - (since if since is not None else self._clock())


def _kind(operation: str) -> str:
    return "read" if operation in ("find", "get") else "write"


#: A failed async call whose wait the loop was blocked for at least this
#: share of, and at least `_MIN_STALL` seconds, is tried again.
_STALL_SHARE = 0.5
_MIN_STALL = 0.02


class Guard:
    """Runs store operations with a deadline, turning any failure into `UNAVAILABLE`."""

    def __init__(
        self,
        stats: Stats,
        *,
        timeout: float = 1.0,
        cooldown: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.breaker = Breaker(cooldown, clock)
        self.stats = stats
        self.timeout = timeout
        self.worker = StoreWorker()

    def run(
        self, operation: str, call: Callable[[], T], *, inline: bool = True, budget: float | None = None
    ) -> T | Unavailable:
        """
        Run a sync store operation, failing open.

        *inline* runs it on the caller's thread with no deadline (stores that
        never block); else it runs on the worker thread and the caller waits
        at most the timeout, or *budget* seconds if that is shorter.
        """
        breaker = self.breaker
        # A closed breaker admits every call and a success changes nothing: asked inline.
        attempt = _GO if breaker.state is State.CLOSED else breaker.enter(operation)
        if attempt is None:
            return UNAVAILABLE
        try:
            result = call() if inline else self.worker.call(call, self._deadline(budget))
        except Exception as error:  # noqa: BLE001 - any store fault fails open
            self._failed(attempt, operation, error)
            return UNAVAILABLE
        except BaseException:
            breaker.abandon(attempt)
            raise
        if attempt is not _GO or breaker.state is not State.CLOSED:
            self._succeeded(attempt, operation)
        return result

    async def arun(
        self, operation: str, call: Callable[[], Awaitable[T]], *, budget: float | None = None
    ) -> T | Unavailable:
        """Run an async store operation with a deadline, failing open (see the module)."""
        attempt = self.breaker.enter(operation)
        if attempt is None:
            return UNAVAILABLE
        watch = loop_watch()
        retried = False
        while True:
            started = watch.enter()
            try:
                result = await asyncio.wait_for(call(), self._deadline(budget))
            except Exception as error:  # noqa: BLE001 - any store fault fails open
                stalled = watch.stalled_since(started)
                elapsed = asyncio.get_running_loop().time() - started
                watch.leave()
                if not retried and stalled >= max(_MIN_STALL, _STALL_SHARE * elapsed):
                    retried = True
                    self.stats.store_stalled(operation)
                    get_logger().debug(
                        "anchortrack.store_call_stalled",
                        operation=operation,
                        error=type(error).__name__,
                        stalled_seconds=round(stalled, 3),
                    )
                    continue
                self._failed(attempt, operation, error)
                return UNAVAILABLE
            except BaseException:
                watch.leave()
                self.breaker.abandon(attempt)
                raise
            watch.leave()
            self._succeeded(attempt, operation)
            return result

    def _deadline(self, budget: float | None) -> float:
        return self.timeout if budget is None else max(0.0, min(self.timeout, budget))

    def _failed(self, attempt: Attempt, operation: str, error: Exception) -> None:
        self.stats.store_failed(operation)
        moved = self.breaker.failed(attempt, operation, type(error).__name__)
        if moved is State.SUSPECT:
            get_logger().debug("anchortrack.store_suspect", operation=operation, error=type(error).__name__)
        elif moved is State.OPEN:
            first_operation, first_error = self.breaker.first_failure or (operation, type(error).__name__)
            get_logger().warning(
                "anchortrack.store_degraded",
                operation=first_operation,
                error=first_error,
                retry_in=self.breaker.cooldown,
            )

    def _succeeded(self, attempt: Attempt, operation: str) -> None:
        ended = self.breaker.succeeded(attempt, operation)
        if ended is not None and ended[0] is State.OPEN:
            get_logger().warning("anchortrack.store_recovered", outage_seconds=round(ended[1], 3))
