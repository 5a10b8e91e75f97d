"""In-process counters and histograms (thread-safe, no dependencies); exporters read `Stats.snapshot()`."""

from __future__ import annotations

import bisect
import itertools
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Literal

import attrs

from ._fork import ForkSafeLock
from ._outcome import Decision, Outcome, stateless_share


#: Transports a request is counted under.
HTTP, WEBSOCKET = "http", "websocket"
#: What a `Stats.requests` key holds, in order.
_REQUEST_KEY = ("mode", "decision", "reason", "transport")


@attrs.frozen
class Metric:
    """One counter or histogram besides ``requests``: a `Stats` attribute, its `Stats.snapshot` key, its
    Prometheus series and its row in docs/operations.md."""

    key: str  # the attribute, and the snapshot key (under *group*, without its prefix)
    doc: str  # what it counts (docs/operations.md)
    field: str | None = None  # the `Outcome` field added up or observed ("a - b": field a less field b;
    # a label: its value); None: `Stats.add`
    decision: Decision | None = None  # count only the outcomes of this decision
    mode: str | None = None  # and of this mode (a histogram skips a field that is None)
    label: str | None = None  # counted by this label (a `Counter` of its values); None: one number
    labels: tuple[str, ...] = ()  # the label's values, each in the snapshot from the start
    bounds: tuple[float, ...] = ()  # a histogram: its upper bounds
    metric: str | None = None  # the Prometheus family; None: not exported
    kind: str | None = None  # the value of the ``kind`` label, in a family several rows share
    help: str = ""  # the family's Prometheus help (the first row of a family gives it)
    gauge: bool = False  # a value set now (`Stats` attribute), not a count
    group: str | None = None  # nested under this snapshot key
    difference: tuple[str, str] | None = None  # derived: the first key's value minus the second's


#: Every counter and histogram besides ``requests``, in snapshot order. A new one is a row here.
# fmt: off
METRICS: tuple[Metric, ...] = (
    Metric("resends", "the `resent` requests, by reason (`stale_anchor`, `duplicate_item`, `zdr`, "
           "`chain_refused`, `chain_dropped`, `websocket_dropped`): chained, refused, sent again in full",
           field="reason", decision=Decision.RESENT, label="reason", metric="anchortrack_resends",
           help="Chained requests refused by the server and resent in full, by reason."),
    Metric("stateless", "the `stateless` requests, by reason (`no_history`, `prefix_diverged`, …): with "
           "`resends`, every [fallback](guide/reasons.md)",
           field="reason", decision=Decision.STATELESS, label="reason"),
    Metric("recorded", "anchors written to the store",
           metric="anchortrack_responses_recorded", help="Responses recorded as anchors."),
    Metric("recorded_local", "responses kept as connection-local anchors by a WebSocket (`store: false`, or "
           "zero data retention): chained from on that socket only, never written to the store",
           metric="anchortrack_responses_recorded_local", help="Responses kept as connection-local anchors "
           "by a WebSocket (store: false or ZDR), never stored."),
    Metric("not_recorded", "responses that did not become anchors, by reason: `store_false`, "
           "`not_completed`, `properties_changed` (caller-managed), `stream_abandoned` (counted when the "
           "stream's iteration stops or it is closed, not at garbage collection), "
           "`websocket_reconnect_dropped` (creates in flight when a socket reconnected), `store_unavailable` "
           "(the store failed, or was skipped during an outage, when the anchor was written)", label="reason",
           metric="anchortrack_responses_not_recorded", help="Responses not recorded as anchors, by reason."),
    Metric("store_errors", "failed store operations, by operation (`find`, `get`, `put`, `evict`)",
           label="operation", metric="anchortrack_store_errors",
           help="Failed anchor store operations, by operation."),
    Metric("anchors_rejected", "anchors the store returned whose MAC did not verify (with a secret key): "
           "treated as absent, each time with an `anchortrack.anchor_rejected` warning. Nonzero means "
           "someone else writes to the store, or a bug: see "
           "[the trust model](guide/stores.md#the-trust-model)",
           field="anchors_rejected", metric="anchortrack_anchors_rejected", help="Anchors read from the "
           "store whose MAC did not verify (secret key set), treated as absent."),
    Metric("chains_dropped", "scopes whose server answered a chained request without the anchor's context "
           "(it ignored `previous_response_id`): chaining stopped for that server in the scope, with one "
           "`anchortrack.chain_dropped` warning each. Nonzero means a server or gateway that does not "
           "chain: see [Compatibility](compatibility.md)", metric="anchortrack_chains_dropped",
           help="Scopes whose server answered a chained request without the anchor's context; chaining "
           "stopped there."),
    Metric("store_stalls", "async store operations that failed while the caller's own event loop was "
           "blocked, and were tried again (not store errors), by operation", label="operation",
           metric="anchortrack_store_stalls",
           help="Store operations retried because the caller's event loop was blocked, by operation."),
    Metric("backlog_queued", "anchor writes the store did not take in time, queued in the backlog",
           group="backlog", metric="anchortrack_backlog_queued",
           help="Anchor writes the store did not take in time, queued in the backlog."),
    Metric("backlog_written", "anchor writes written from the backlog once the store answered again",
           group="backlog", metric="anchortrack_backlog_written",
           help="Anchor writes written from the backlog once the store answered again."),
    Metric("backlog_dropped", "anchor writes dropped from the backlog, by reason", label="reason",
           labels=("overflow", "expired"), group="backlog", metric="anchortrack_backlog_dropped",
           help="Anchor writes dropped from the backlog, by reason (overflow, expired)."),
    Metric("backlog_size", "anchor writes waiting in the backlog now", gauge=True, group="backlog",
           metric="anchortrack_backlog_anchors", help="Anchor writes waiting in the backlog now."),
    Metric("items_sent", "input items sent (resends included)", field="items_sent",
           metric="anchortrack_request_items", kind="sent", help="Input items: sent (resends included), "
           "planned, and in the callers' histories (total)."),
    Metric("items_total", "input items in the callers' histories", field="items_total",
           metric="anchortrack_request_items", kind="total"),
    Metric("items_planned", "input items planned", field="items_planned",
           metric="anchortrack_request_items", kind="planned"),
    Metric("bytes_sent", "estimated input bytes (canonical JSON of the items) sent, resends included",
           field="bytes_sent", metric="anchortrack_request_bytes", kind="sent", help="Estimated input "
           "bytes: sent (resends included), planned, and what stateless requests send."),
    Metric("bytes_stateless", "estimated input bytes stateless requests would send", field="bytes_stateless",
           metric="anchortrack_request_bytes", kind="stateless"),
    Metric("bytes_planned", "estimated input bytes planned", field="bytes_planned",
           metric="anchortrack_request_bytes", kind="planned"),
    Metric("bytes_saved", "`bytes_stateless - bytes_sent`", difference=("bytes_stateless", "bytes_sent")),
    Metric("bytes_would_save", "`bytes_stateless - bytes_planned`: in shadow mode, what chaining would have "
           "saved", difference=("bytes_stateless", "bytes_planned")),
    Metric("plan_seconds", "time to fingerprint the history, look the anchors up and choose",
           field="plan_seconds", bounds=(1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1),
           metric="anchortrack_plan_seconds",
           help="Time to plan one request (fingerprint, look up, choose)."),
    Metric("delta_items", "items sent by chained requests the server accepted (mode `chained`; not a "
           "refused attempt, not a shadow would-be chain)", field="items_sent", decision=Decision.CHAINED,
           mode="chained", bounds=(1, 2, 3, 5, 10, 20, 50, 100, 500, 1000), metric="anchortrack_delta_items",
           help="Items sent by chained requests the server accepted."),
)
# fmt: on

#: The counters `Stats.add` adds to (the others count `Outcome`s); `tests/observability/test_stats.py`
#: checks that they are the rows without a field.
# fmt: off
Counted = Literal["recorded", "recorded_local", "not_recorded", "store_errors", "store_stalls",
                  "backlog_queued", "backlog_written", "backlog_dropped", "chains_dropped"]
# fmt: on


def _observer(metrics: tuple[Metric, ...]) -> Callable[[Stats, Outcome], None]:
    """`Stats.observe` for the rows with a field, as plain statements (``self.items_sent += o.items_sent``):
    it runs once per request."""
    lines = ["def observe(self, o):"]
    for m in metrics:
        if m.field is None:
            continue
        tests = [f"o.decision is Decision.{m.decision.name}"] if m.decision else []
        tests += [f"o.mode == {m.mode!r}"] if m.mode else []
        names = m.field.split(" - ")
        tests += [f"o.{name} is not None" for name in names] if m.bounds else []
        test = f"if {' and '.join(tests)}: " if tests else ""
        if m.bounds:
            lines.append(f"    {test}self.{m.key}.observe({' - '.join(f'o.{name}' for name in names)})")
        elif m.label:
            lines.append(f"    {test}self.{m.key}[o.{m.field}.value] += 1")
        else:
            lines.append(f"    {test}self.{m.key} += o.{m.field}")
    namespace: dict[str, Any] = {"Decision": Decision}
    exec("\n".join(lines), namespace)  # noqa: S102 - the code is made from the rows above, not from input
    observe: Callable[[Stats, Outcome], None] = namespace["observe"]
    return observe


def value_of(metric: Metric, snapshot: Mapping[str, Any]) -> Any:
    """The value of *metric* in *snapshot* (a `Stats.snapshot`)."""
    if metric.group is None:
        return snapshot[metric.key]
    return snapshot[metric.group][metric.key.removeprefix(metric.group + "_")]


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
    histograms are the rows of `METRICS`, attributes of the same names, each described where
    ``snapshot()`` is: docs/operations.md, "Counters in process".
    """

    backlog_size: int  # a gauge the fail-open layer sets

    def __init__(self) -> None:
        self._lock = ForkSafeLock()
        self.requests: Counter[tuple[str, str, str, str]] = Counter()
        for m in METRICS:
            if m.difference is None:
                setattr(self, m.key, Histogram(m.bounds) if m.bounds else Counter[str]() if m.label else 0)

    if TYPE_CHECKING:  # the rows of `METRICS` are attributes, set in ``__init__`` (a real one slows them)

        def __getattr__(self, name: str) -> Any: ...

    def __repr__(self) -> str:
        return f"<Stats {self}>"

    def __str__(self) -> str:
        """
        The headline counters in one line, such as ``requests 12 (chained 9, resent 1, stateless 2);
        input bytes ~5,210 sent of ~21,337 stateless (24%), saved ~16,127; recorded 12``; shadow-mode
        requests apart, by what they would have done.
        """
        snap = self.snapshot()
        live, shadow = Counter[str](), Counter[str]()
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

    def observe(self, outcome: Outcome) -> None:
        """Count one call's `Outcome`: its decision and reason, and each row of `METRICS` with a field."""
        o = outcome
        with self._lock:
            self.requests[o.mode, o.decision.value, o.reason.value, o.transport] += 1
            _observe(self, o)

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
            snap: dict[str, Any] = {"requests": _rows(self.requests)}
            for m in METRICS:
                diff = m.difference
                value = snap[diff[0]] - snap[diff[1]] if diff is not None else getattr(self, m.key)
                if isinstance(value, Histogram):
                    value = value.snapshot()
                elif m.label is not None:
                    value = {v: value[v] for v in m.labels} if m.labels else dict(sorted(value.items()))
                if m.group is None:
                    snap[m.key] = value
                else:
                    snap.setdefault(m.group, {})[m.key.removeprefix(m.group + "_")] = value
            return snap

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


_observe = _observer(METRICS)


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
    merged["requests"] = _rows(requests)
    return merged


def _rows(requests: Mapping[tuple[str, str, str, str], int]) -> list[dict[str, Any]]:
    return [dict(zip(_REQUEST_KEY, key, strict=True), count=n) for key, n in sorted(requests.items())]


def _add(a: Any, b: Any) -> Any:
    if isinstance(a, Mapping):
        keys = sorted({*a, *b}, key=str) if "+Inf" not in a else list(a)
        return {k: _add(a.get(k, 0), b.get(k, 0)) for k in keys}
    return a + b
