"""In-process counters and histograms (thread-safe, no dependencies); exporters read `Stats.snapshot()`."""

from __future__ import annotations

import bisect
import itertools
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any, Literal

import attrs

from ._fork import ForkSafeLock
from ._outcome import Decision, Outcome, stateless_share


#: The histograms (`Stats` attributes; Prometheus ``anchortrack_<name>``): their upper bounds, and what one
#: observation is. Adding one is a row here and its line in `Stats.observe` (and docs/operations.md).
HISTOGRAMS: dict[str, tuple[tuple[float, ...], str]] = {
    "plan_seconds": (
        (1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1),
        "Time to plan one request (fingerprint, look up, choose).",
    ),
    "delta_items": (
        (1, 2, 3, 5, 10, 20, 50, 100, 500, 1000),
        "Items sent by chained requests the server accepted.",
    ),
}

#: Transports a request is counted under.
HTTP, WEBSOCKET = "http", "websocket"

#: The counters `Stats.add` adds to (the others count `Outcome`s).
# fmt: off
Counted = Literal["recorded", "recorded_local", "not_recorded", "store_errors", "store_stalls",
                  "backlog_queued", "backlog_written", "backlog_dropped", "chains_dropped"]
# fmt: on


@attrs.define
class Histogram:
    """A cumulative-bucket histogram like Prometheus'."""

    bounds: tuple[float, ...]
    counts: list[int] = attrs.field(
        default=attrs.Factory(lambda self: [0] * (len(self.bounds) + 1), takes_self=True)
    )
    total: float = 0.0
    count: int = 0

    def observe(self, value: float) -> None:
        """Add one observation."""
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value
        self.count += 1

    def snapshot(self) -> dict[str, Any]:
        """Return cumulative bucket counts keyed by upper bound (``"+Inf"`` last)."""
        bounds = [*map(repr, self.bounds), "+Inf"]
        buckets = dict(zip(bounds, itertools.accumulate(self.counts), strict=True))
        return {"buckets": buckets, "sum": self.total, "count": self.count}


class Stats:
    """
    What a tracker did, since it was created: every call through the tracked client is counted
    once in ``requests`` from its `Outcome` (`observe`); ``print(stats)`` shows the headline.

    ``requests`` counts by ``(mode, decision, reason, transport)``. The decision is ``chained``
    (``previous_response_id`` plus the delta, accepted by the server), ``resent`` (sent chained,
    refused, resent in full), ``stateless`` (the full history: no anchor could be proved) or
    ``passthrough`` (the request exactly as built: mode ``off``, caller-managed state, or a fault
    inside anchortrack); in ``shadow`` mode, what *would* have been sent. The other counters
    (``resends``, ``recorded``, ``store_errors``, ``backlog_*``, the items and bytes, …) and the
    histograms (`HISTOGRAMS`) are attributes of the same names, each described where
    ``snapshot()`` is: docs/operations.md, "Counters in process".
    """

    plan_seconds: Histogram
    delta_items: Histogram

    def __init__(self) -> None:
        self._lock = ForkSafeLock()
        self.requests: Counter[tuple[str, str, str, str]] = Counter()
        self.resends: Counter[str] = Counter()
        self.stateless: Counter[str] = Counter()
        self.recorded = 0
        self.recorded_local = 0
        self.not_recorded: Counter[str] = Counter()
        self.store_errors: Counter[str] = Counter()
        self.anchors_rejected = 0
        self.chains_dropped = 0
        self.store_stalls: Counter[str] = Counter()
        self.backlog_queued = 0
        self.backlog_written = 0
        self.backlog_dropped: Counter[str] = Counter()
        self.backlog_size = 0
        self.items_sent = 0
        self.items_total = 0
        self.items_planned = 0
        self.bytes_sent = 0
        self.bytes_stateless = 0
        self.bytes_planned = 0
        for name, (bounds, _) in HISTOGRAMS.items():
            setattr(self, name, Histogram(bounds))

    def __repr__(self) -> str:
        return f"<Stats {self}>"

    def __str__(self) -> str:
        """
        The headline counters in one line, such as ``requests 12 (chained 9, resent 1, stateless 2);
        input bytes ~5,210 sent of ~21,337 stateless (24%), saved ~16,127; recorded 12``; shadow-mode
        requests apart, by what they would have done.
        """
        snap = self.snapshot()
        live: Counter[str] = Counter()
        shadow: Counter[str] = Counter()
        for row in snap["requests"]:
            (shadow if row["mode"] == "shadow" else live)[row["decision"]] += row["count"]
        sent, stateless, planned = snap["bytes_sent"], snap["bytes_stateless"], snap["bytes_planned"]
        total = sum(live.values()) + sum(shadow.values())
        decisions = [d.value for d in Decision]
        split = [f"{d} {live[d]}" for d in decisions if live[d]]
        if shadow:  # never resent
            would = (f"{'would chain' if d == 'chained' else d} {shadow[d]}" for d in decisions if shadow[d])
            split.append(f"shadow {sum(shadow.values())}: {', '.join(would)}")
        parts = [f"requests {total}" + (f" ({', '.join(split)})" if split else "")]
        share = stateless_share(sent, stateless)
        if share is not None:
            line = f"input bytes ~{sent:,} sent of ~{stateless:,} stateless ({share:.0%})"
            line += f", saved ~{stateless - sent:,}"
            if shadow and planned != sent:
                line += f", chaining would send ~{planned:,} ({stateless_share(planned, stateless):.0%})"
            parts.append(line)
        parts.append(f"recorded {snap['recorded']}")
        failed = {key: sum(snap[key].values()) for key in ("not_recorded", "store_errors")}
        parts.extend(f"{key.replace('_', ' ')} {n}" for key, n in failed.items() if n)
        return "; ".join(parts)

    _summary = __str__

    def observe(self, outcome: Outcome) -> None:
        """Count one call's `Outcome`: its decision and reason, items, bytes, plan time, rejected anchors."""
        o = outcome
        with self._lock:
            self.requests[o.mode, o.decision.value, o.reason.value, o.transport] += 1
            if o.decision is Decision.RESENT:
                self.resends[o.reason.value] += 1
            elif o.decision is Decision.STATELESS:
                self.stateless[o.reason.value] += 1
            self.anchors_rejected += o.anchors_rejected
            self.items_sent += o.items_sent
            self.items_total += o.items_total
            self.items_planned += o.items_planned
            self.bytes_sent += o.bytes_sent
            self.bytes_planned += o.bytes_planned
            self.bytes_stateless += o.bytes_stateless
            if o.decision is Decision.CHAINED and o.mode == "chained":
                self.delta_items.observe(o.items_sent)
            if o.plan_seconds is not None:
                self.plan_seconds.observe(o.plan_seconds)

    def add(self, counter: Counted, n: int = 1, *, key: str | None = None) -> None:
        """Add *n* to the counter named *counter* (to its *key*, for a counter by label: ``store_errors``)."""
        if not n:
            return
        with self._lock:
            if key is None:
                setattr(self, counter, getattr(self, counter) + n)
            else:
                getattr(self, counter)[key] += n

    def snapshot(self) -> dict[str, Any]:
        """
        Return every counter and histogram as plain data, and ``bytes_saved`` (``bytes_stateless -
        bytes_sent``) and ``bytes_would_save`` (``bytes_stateless - bytes_planned``: shadow mode included).
        """
        with self._lock:
            return {
                "requests": [
                    {"mode": m, "decision": d, "reason": r, "transport": t, "count": n}
                    for (m, d, r, t), n in sorted(self.requests.items())
                ],
                "resends": dict(sorted(self.resends.items())),
                "stateless": dict(sorted(self.stateless.items())),
                "recorded": self.recorded,
                "recorded_local": self.recorded_local,
                "not_recorded": dict(sorted(self.not_recorded.items())),
                "store_errors": dict(sorted(self.store_errors.items())),
                "anchors_rejected": self.anchors_rejected,
                "chains_dropped": self.chains_dropped,
                "store_stalls": dict(sorted(self.store_stalls.items())),
                "backlog": {
                    "queued": self.backlog_queued,
                    "written": self.backlog_written,
                    "dropped": {reason: self.backlog_dropped[reason] for reason in ("overflow", "expired")},
                    "size": self.backlog_size,
                },
                "items_sent": self.items_sent,
                "items_total": self.items_total,
                "items_planned": self.items_planned,
                "bytes_sent": self.bytes_sent,
                "bytes_stateless": self.bytes_stateless,
                "bytes_planned": self.bytes_planned,
                "bytes_saved": self.bytes_stateless - self.bytes_sent,
                "bytes_would_save": self.bytes_stateless - self.bytes_planned,
                **{name: getattr(self, name).snapshot() for name in HISTOGRAMS},
            }

    def count(
        self,
        decision: str | None = None,
        reason: str | None = None,
        mode: str | None = None,
        transport: str | None = None,
    ) -> int:
        """Return how many requests match *decision*, *reason*, *mode* and *transport* (each optional)."""
        wanted = (mode, decision, reason, transport)  # in the order of a `requests` key
        with self._lock:
            counts = list(self.requests.items())
        return sum(n for key, n in counts if all(w in (None, k) for w, k in zip(wanted, key, strict=True)))


def merge_snapshots(snapshots: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Add up the `Stats.snapshot` results of several trackers into one of the same shape."""
    merged = Stats().snapshot()
    requests: Counter[tuple[str, str, str, str]] = Counter()
    for snap in snapshots:
        for row in snap["requests"]:
            requests[row["mode"], row["decision"], row["reason"], row.get("transport", HTTP)] += row["count"]
        for key, value in snap.items():
            if key != "requests":
                merged[key] = _add(merged[key], value)
    merged["requests"] = [
        {"mode": m, "decision": d, "reason": r, "transport": t, "count": n}
        for (m, d, r, t), n in sorted(requests.items())
    ]
    return merged


def _add(a: Any, b: Any) -> Any:
    """Add two snapshot values of the same shape (numbers, or mappings of them)."""
    if isinstance(a, Mapping):
        keys = sorted({*a, *b}, key=str) if "+Inf" not in a else list(a)
        return {k: _add(a.get(k, 0), b.get(k, 0)) for k in keys}
    return a + b
