"""
Prometheus exposition of anchortrack's counters and histograms (the ``prometheus`` extra:
``pip install 'anchortrack[prometheus]'``).

Nothing is counted twice: the collector reads each tracker's `Stats` at scrape time, so it costs
nothing between scrapes. Several clients registered on one registry add up into one set of series;
the metric names and labels are listed in ``docs/operations.md``. For example:

```python
import anchortrack.metrics
from prometheus_client import start_http_server

client = anchortrack.wrap(OpenAI())
anchortrack.metrics.register(client)     # on prometheus_client.REGISTRY
start_http_server(9464)
```
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator, Mapping
from typing import Any


try:
    from prometheus_client import REGISTRY, CollectorRegistry
    from prometheus_client.metrics_core import (
        CounterMetricFamily,
        GaugeMetricFamily,
        HistogramMetricFamily,
        Metric,
    )
    from prometheus_client.registry import Collector
except ModuleNotFoundError as _error:  # pragma: no cover - exercised in a subprocess
    if _error.name is None or _error.name.split(".")[0] != "prometheus_client":
        raise
    raise ImportError(
        "anchortrack.metrics needs the prometheus extra (prometheus_client is missing): "
        "pip install 'anchortrack[prometheus]'",
        name=_error.name,
    ) from _error

from . import _client
from ._fork import ForkSafeLock
from ._stats import HISTOGRAMS, merge_snapshots
from ._tracker import Tracker


__all__ = ["AnchortrackCollector", "register"]


class AnchortrackCollector(Collector):
    """
    A Prometheus collector that reads the `Stats` of *sources* (trackers, or clients made by
    `anchortrack.wrap`) at scrape time: ``registry.register(AnchortrackCollector(client))``.
    """

    def __init__(self, *sources: object) -> None:
        self._trackers: list[Tracker] = []
        self._lock = ForkSafeLock()
        for source in sources:
            self.add(source)

    def add(self, source: object) -> None:
        """Also report *source* (a tracker or a wrapped client); adding one twice is a no-op."""
        tracker = _tracker(source)
        with self._lock:
            if all(t is not tracker for t in self._trackers):
                self._trackers.append(tracker)

    def describe(self) -> list[Metric]:
        """Return the metric families without values (lets the registry check names)."""
        return list(_families(merge_snapshots([])))

    def collect(self) -> Iterator[Metric]:
        """Return the current values of every metric family."""
        with self._lock:
            trackers = list(self._trackers)
        yield from _families(merge_snapshots(t.stats.snapshot() for t in trackers))


_collectors: weakref.WeakKeyDictionary[CollectorRegistry, AnchortrackCollector] = weakref.WeakKeyDictionary()
_collectors_lock = ForkSafeLock()


def register(source: object, registry: CollectorRegistry | None = None) -> AnchortrackCollector:
    """
    Report *source* (a wrapped client or a tracker) on *registry* (default:
    ``prometheus_client.REGISTRY``); return the registry's `AnchortrackCollector`, which every
    source registered there shares, so that their series add up instead of clashing.

    Raises:
        TypeError: *source* is neither a tracker nor a wrapped client.
    """
    registry = REGISTRY if registry is None else registry
    tracker = _tracker(source)
    with _collectors_lock:
        collector = _collectors.get(registry)
        if collector is None:
            collector = AnchortrackCollector()
            registry.register(collector)
            _collectors[registry] = collector
    collector.add(tracker)
    return collector


def _tracker(source: object) -> Tracker:
    return source if isinstance(source, Tracker) else _client.tracker(source)


# fmt: off
#: The series after ``anchortrack_requests``, in order: family, name, label (None: one series), the
#: key of its value (or values by label) in the snapshot as `_families` flattens it, and help.
_SERIES: tuple[tuple[type[CounterMetricFamily | GaugeMetricFamily], str, str | None, str, str], ...] = (
    (CounterMetricFamily, "anchortrack_resends", "reason", "resends",
     "Chained requests refused by the server and resent in full, by reason."),
    (CounterMetricFamily, "anchortrack_responses_recorded", None, "recorded",
     "Responses recorded as anchors."),
    (CounterMetricFamily, "anchortrack_responses_recorded_local", None, "recorded_local",
     "Responses kept as connection-local anchors by a WebSocket (store: false or ZDR), never stored."),
    (CounterMetricFamily, "anchortrack_responses_not_recorded", "reason", "not_recorded",
     "Responses not recorded as anchors, by reason."),
    (CounterMetricFamily, "anchortrack_store_errors", "operation", "store_errors",
     "Failed anchor store operations, by operation."),
    (CounterMetricFamily, "anchortrack_anchors_rejected", None, "anchors_rejected",
     "Anchors read from the store whose MAC did not verify (secret key set), treated as absent."),
    (CounterMetricFamily, "anchortrack_chains_dropped", None, "chains_dropped",
     "Scopes whose server answered a chained request without the anchor's context; chaining stopped there."),
    (CounterMetricFamily, "anchortrack_store_stalls", "operation", "store_stalls",
     "Store operations retried because the caller's event loop was blocked, by operation."),
    (CounterMetricFamily, "anchortrack_backlog_queued", None, "backlog_queued",
     "Anchor writes the store did not take in time, queued in the backlog."),
    (CounterMetricFamily, "anchortrack_backlog_written", None, "backlog_written",
     "Anchor writes written from the backlog once the store answered again."),
    (CounterMetricFamily, "anchortrack_backlog_dropped", "reason", "backlog_dropped",
     "Anchor writes dropped from the backlog, by reason (overflow, expired)."),
    (GaugeMetricFamily, "anchortrack_backlog_anchors", None, "backlog_size",
     "Anchor writes waiting in the backlog now."),
    (CounterMetricFamily, "anchortrack_request_items", "kind", "items",
     "Input items: sent (resends included), planned, and in the callers' histories (total)."),
    (CounterMetricFamily, "anchortrack_request_bytes", "kind", "bytes",
     "Estimated input bytes: sent (resends included), planned, and what stateless requests send."),
)
# fmt: on


def _families(snap: Mapping[str, Any]) -> Iterator[Metric]:
    """Turn a (merged) `Stats` snapshot into Prometheus metric families."""
    requests = CounterMetricFamily(
        "anchortrack_requests",
        "Responses API requests by mode, decision (chained, resent, stateless, passthrough), reason"
        " and transport (http, websocket).",
        labels=["mode", "decision", "reason", "transport"],
    )
    for row in snap["requests"]:
        requests.add_metric([row["mode"], row["decision"], row["reason"], row["transport"]], row["count"])
    yield requests
    flat = {**snap, **{f"backlog_{key}": value for key, value in snap["backlog"].items()}}
    flat["items"] = {kind: snap[f"items_{kind}"] for kind in ("sent", "planned", "total")}
    flat["bytes"] = {kind: snap[f"bytes_{kind}"] for kind in ("sent", "planned", "stateless")}
    for family, name, label, key, documentation in _SERIES:
        if label is None:
            yield family(name, documentation, value=flat[key])
            continue
        series = family(name, documentation, labels=[label])
        for label_value, value in flat[key].items():
            series.add_metric([label_value], value)
        yield series
    for key, (_, documentation) in HISTOGRAMS.items():  # after the series
        buckets = [(b if b == "+Inf" else repr(float(b)), n) for b, n in snap[key]["buckets"].items()]
        name = f"anchortrack_{key}"
        yield HistogramMetricFamily(name, documentation, buckets=buckets, sum_value=snap[key]["sum"])
