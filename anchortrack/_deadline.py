"""
Deadlines for store calls: a worker thread for sync stores, a stall detector for event loops.

* `StoreWorker` runs a sync store's calls on a few daemon threads, so that a
  caller waits at most its deadline even when the store hangs (a
  ``redis.Redis`` built without socket timeouts, a stopped server, a locked
  file). A call that misses its deadline keeps running on its thread; the
  caller has already moved on.
* `LoopWatch` tells how long an event loop was blocked during a time span, so
  that a store call that timed out while the caller's own code held the loop
  (a slow callback, a CPU-bound step) is not blamed on the store.
"""

from __future__ import annotations

import asyncio
import os
import queue
import threading
import weakref
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, TypeVar


T = TypeVar("T")


class StoreTimeout(TimeoutError):
    """A store call did not answer within its deadline."""


class StoreWorker:
    """
    A few daemon threads that run sync store calls for callers who wait with a deadline.

    Threads start on demand (one more whenever none is idle, up to
    *max_threads*) and exit after *idle_seconds* without work, so a tracker
    that is no longer used holds none. Daemon threads never keep the
    interpreter from exiting, even while a store call hangs.
    """

    def __init__(self, max_threads: int = 4, idle_seconds: float = 10.0) -> None:
        self.max_threads = max_threads
        self.idle_seconds = idle_seconds
        self._queue: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0
        self._idle = 0
        self._pid = os.getpid()

    @property
    def threads(self) -> int:
        """How many threads are alive now."""
        return self._threads

    def call(self, fn: Callable[[], T], timeout: float) -> T:
        """
        Run *fn* on a worker thread and return its result within *timeout* seconds.

        Raises:
            StoreTimeout: *fn* did not return in time (it keeps running).
            Exception: Whatever *fn* raised.
        """
        if self._pid != os.getpid():  # forked: the threads stayed in the parent
            self._pid, self._lock, self._queue = os.getpid(), threading.Lock(), queue.SimpleQueue()
            self._threads = self._idle = 0
        future: Future[T] = Future()
        self._queue.put((fn, future))
        with self._lock:
            if self._idle == 0 and self._threads < self.max_threads:
                self._threads += 1
                threading.Thread(target=self._serve, name="anchortrack-store", daemon=True).start()
        try:
            return future.result(max(timeout, 0.0))
        except FutureTimeout:
            future.cancel()  # not started yet: never run it
            raise StoreTimeout(f"the store did not answer within {timeout:.3g} s") from None

    def _serve(self) -> None:
        while True:
            with self._lock:
                self._idle += 1
            try:
                fn, future = self._queue.get(timeout=self.idle_seconds)
            except queue.Empty:
                with self._lock:
                    self._idle -= 1
                    if self._queue.empty():
                        self._threads -= 1
                        return
                continue
            with self._lock:
                self._idle -= 1
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn())
            except BaseException as error:  # noqa: BLE001 - handed to the waiting caller
                future.set_exception(error)


#: Lateness below this is scheduling noise, not a stall.
_NOISE = 0.005


class LoopWatch:
    """
    Measures how long one event loop was blocked, while anyone asks.

    While at least one user is inside (`enter` … `leave`), a callback runs
    every *interval* seconds and records how late it ran: a callback late by
    L seconds means the loop was blocked for about L seconds before it.
    Thread-unsafe by design: only the loop's own thread uses it.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, interval: float = 0.025) -> None:
        self._loop = loop
        self.interval = interval
        self._users = 0
        self._handle: asyncio.TimerHandle | None = None
        self._expected = 0.0
        self._stalls: deque[tuple[float, float]] = deque(maxlen=256)  # (when it ended, how long)

    def enter(self) -> float:
        """Start watching (if nobody was); return the loop's time now."""
        self._users += 1
        now = self._loop.time()
        if self._handle is None:
            self._arm(now)
        return now

    def leave(self) -> None:
        """Stop watching when the last user leaves."""
        self._users -= 1
        if self._users <= 0 and self._handle is not None:
            self._users = 0
            self._handle.cancel()
            self._handle = None

    def stalled_since(self, start: float) -> float:
        """Seconds the loop was blocked between *start* and now (including a stall just ending)."""
        now = self._loop.time()
        total = 0.0
        for ended, length in self._stalls:
            if ended > start:
                total += min(length, ended - start)
        if self._handle is not None:
            pending = now - self._expected
            if pending > _NOISE:
                total += min(pending, now - start)
        return total

    def _arm(self, now: float) -> None:
        self._expected = now + self.interval
        self._handle = self._loop.call_at(self._expected, self._tick)

    def _tick(self) -> None:
        now = self._loop.time()
        late = now - self._expected
        if late > _NOISE:
            self._stalls.append((now, late))
        self._handle = None
        if self._users > 0:
            self._arm(now)


_watches: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopWatch] = weakref.WeakKeyDictionary()
_watches_lock = threading.Lock()


def loop_watch() -> LoopWatch:
    """The `LoopWatch` of the running event loop."""
    loop = asyncio.get_running_loop()
    with _watches_lock:
        watch = _watches.get(loop)
        if watch is None:
            watch = _watches[loop] = LoopWatch(loop)
    return watch
