"""
Fail open around the anchor store: written once for every backend.

A store fault costs a larger request, never the caller's call.
After a failure the store is skipped for a cooldown, then tried again; one
warning marks the start of an outage and one event its end, however many
calls fall in between.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from ._flow import UNAVAILABLE, Unavailable
from ._log import get_logger
from ._stats import Stats


T = TypeVar("T")


class Breaker:
    """
    Circuit-breaker state: closed, open for *cooldown* seconds, then half-open.

    Thread-safe; the monotonic clock is injectable for tests.
    """

    def __init__(self, cooldown: float = 5.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.cooldown = cooldown
        self._clock = clock
        self._lock = threading.Lock()
        self._down_since: float | None = None
        self._retry_at = 0.0

    @property
    def down(self) -> bool:
        """Whether an outage is in progress."""
        return self._down_since is not None

    def allow(self) -> bool:
        """Whether the store may be tried now."""
        with self._lock:
            return self._down_since is None or self._clock() >= self._retry_at

    def failed(self) -> bool:
        """Record a failure; return True if it starts an outage."""
        with self._lock:
            now = self._clock()
            self._retry_at = now + self.cooldown
            if self._down_since is None:
                self._down_since = now
                return True
            return False

    def succeeded(self) -> float | None:
        """Record a success; return the outage's length if it ends one."""
        with self._lock:
            if self._down_since is None:
                return None
            length = self._clock() - self._down_since
            self._down_since = None
            return length


class Guard:
    """Runs store operations, turning any failure into `UNAVAILABLE`."""

    def __init__(
        self,
        stats: Stats,
        *,
        timeout: float = 1.0,
        cooldown: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.breaker = Breaker(cooldown, clock)
        self.stats = stats
        self.timeout = timeout

    def run(self, operation: str, call: Callable[[], T]) -> T | Unavailable:
        """Run a sync store operation, failing open."""
        if not self.breaker.allow():
            return UNAVAILABLE
        try:
            result = call()
        except Exception as error:  # noqa: BLE001 - any store fault fails open
            self._failed(operation, error)
            return UNAVAILABLE
        self._succeeded()
        return result

    async def arun(self, operation: str, call: Callable[[], Awaitable[T]]) -> T | Unavailable:
        """Run an async store operation with a timeout, failing open."""
        if not self.breaker.allow():
            return UNAVAILABLE
        try:
            result = await asyncio.wait_for(call(), self.timeout)
        except Exception as error:  # noqa: BLE001 - any store fault fails open
            self._failed(operation, error)
            return UNAVAILABLE
        self._succeeded()
        return result

    def _failed(self, operation: str, error: Exception) -> None:
        self.stats.store_failed(operation)
        if self.breaker.failed():
            get_logger().warning(
                "anchortrack.store_degraded",
                operation=operation,
                error=type(error).__name__,
                retry_in=self.breaker.cooldown,
            )

    def _succeeded(self) -> None:
        length = self.breaker.succeeded()
        if length is not None:
            get_logger().warning("anchortrack.store_recovered", outage_seconds=round(length, 3))
