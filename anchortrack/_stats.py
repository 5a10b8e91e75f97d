"""
In-process counters and histograms (thread-safe, no dependencies).

`Stats.snapshot()` returns plain data; exporters (Prometheus) read it.
"""

from __future__ import annotations

import bisect
import threading
from collections import Counter
from collections.abc import Sequence
from typing import Any

import attrs


#: Upper bounds of the plan-duration histogram, in seconds.
PLAN_SECONDS_BUCKETS: tuple[float, ...] = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
)
#: Upper bounds of the delta-size histogram, in items.
DELTA_ITEMS_BUCKETS: tuple[float, ...] = (1, 2, 3, 5, 10, 20, 50, 100, 500, 1000)


@attrs.define
class Histogram:
    """A cumulative-bucket histogram like Prometheus'."""

    bounds: tuple[float, ...]
    counts: list[int] = attrs.field()
    total: float = 0.0
    count: int = 0

    @counts.default
    def _zeros(self) -> list[int]:
        return [0] * (len(self.bounds) + 1)

    def observe(self, value: float) -> None:
        """Add one observation."""
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value
        self.count += 1

    def snapshot(self) -> dict[str, Any]:
        """Return cumulative bucket counts keyed by upper bound (``"+Inf"`` last)."""
        buckets: dict[str, int] = {}
        running = 0
        for bound, n in zip([*self.bounds, float("inf")], self.counts, strict=True):
            running += n
            buckets["+Inf" if bound == float("inf") else repr(bound)] = running
        return {"buckets": buckets, "sum": self.total, "count": self.count}


class Stats:
    """
    What a tracker did, since it was created.

    Counters:
        requests: by ``(mode, decision, reason)``; decision ``chained`` or
            ``stateless`` is what the planner chose (in ``shadow`` mode, what
            *would* have been sent; the request itself went out in full).
        fallbacks: resends after a stale anchor or a ZDR refusal, by reason.
        recorded / not_recorded: responses, the latter by reason.
        store_errors: failed store operations, by operation.
        items_sent / items_total: items sent vs items in the caller's histories.
        bytes_sent / bytes_stateless: estimated input bytes actually sent vs
            what stateless requests would have sent.
        bytes_planned: estimated input bytes of the planned requests (equal to
            bytes_sent except in shadow mode, where it is what chaining would
            have sent).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: Counter[tuple[str, str, str]] = Counter()
        self.fallbacks: Counter[str] = Counter()
        self.recorded = 0
        self.not_recorded: Counter[str] = Counter()
        self.store_errors: Counter[str] = Counter()
        self.items_sent = 0
        self.items_total = 0
        self.bytes_sent = 0
        self.bytes_stateless = 0
        self.bytes_planned = 0
        self.plan_seconds = Histogram(PLAN_SECONDS_BUCKETS)
        self.delta_items = Histogram(DELTA_ITEMS_BUCKETS)

    def planned(
        self,
        *,
        mode: str,
        chained: bool,
        reason: str,
        items_sent: int,
        items_total: int,
        bytes_planned: int,
        bytes_stateless: int,
        seconds: float | None,
    ) -> None:
        """Count one planned request."""
        shadow = mode == "shadow"
        with self._lock:
            self.requests[mode, "chained" if chained else "stateless", reason] += 1
            self.items_sent += items_total if shadow else items_sent
            self.items_total += items_total
            self.bytes_sent += bytes_stateless if shadow else bytes_planned
            self.bytes_planned += bytes_planned
            self.bytes_stateless += bytes_stateless
            if chained:
                self.delta_items.observe(items_sent)
            if seconds is not None:
                self.plan_seconds.observe(seconds)

    def fell_back(self, reason: str) -> None:
        """Count one resend after a chained request was refused."""
        with self._lock:
            self.fallbacks[reason] += 1

    def recorded_response(self) -> None:
        """Count one recorded response."""
        with self._lock:
            self.recorded += 1

    def skipped_response(self, reason: str) -> None:
        """Count one response that was not recorded."""
        with self._lock:
            self.not_recorded[reason] += 1

    def store_failed(self, operation: str) -> None:
        """Count one failed store operation."""
        with self._lock:
            self.store_errors[operation] += 1

    def snapshot(self) -> dict[str, Any]:
        """Return every counter and histogram as plain data."""
        with self._lock:
            return {
                "requests": [
                    {"mode": m, "decision": d, "reason": r, "count": n}
                    for (m, d, r), n in sorted(self.requests.items())
                ],
                "fallbacks": dict(sorted(self.fallbacks.items())),
                "recorded": self.recorded,
                "not_recorded": dict(sorted(self.not_recorded.items())),
                "store_errors": dict(sorted(self.store_errors.items())),
                "items_sent": self.items_sent,
                "items_total": self.items_total,
                "bytes_sent": self.bytes_sent,
                "bytes_stateless": self.bytes_stateless,
                "bytes_planned": self.bytes_planned,
                "plan_seconds": self.plan_seconds.snapshot(),
                "delta_items": self.delta_items.snapshot(),
            }

    def count(self, decision: str | None = None, reason: str | None = None, mode: str | None = None) -> int:
        """Return how many requests match *decision*, *reason* and *mode* (each optional)."""
        with self._lock:
            return sum(
                n
                for (m, d, r), n in self.requests.items()
                if decision in (None, d) and reason in (None, r) and mode in (None, m)
            )


def sizes_total(sizes: Sequence[int]) -> int:
    """Estimated JSON bytes of a list of items of the given canonical sizes."""
    return sum(sizes) + max(len(sizes) - 1, 0) + 2
