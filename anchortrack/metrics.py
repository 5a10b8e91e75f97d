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

from . import _client, _stats
from ._fork import ForkSafeLock
from ._stats import merge_snapshots
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


def _families(snap: Mapping[str, Any]) -> Iterator[Metric]:
    """Turn a (merged) `Stats` snapshot into Prometheus metric families: ``requests``, then `METRICS`."""
    requests = CounterMetricFamily(
        "anchortrack_requests",
        "Responses API requests by mode, decision (chained, resent, stateless, passthrough), reason"
        " and transport (http, websocket).",
        labels=["mode", "decision", "reason", "transport"],
    )
    for row in snap["requests"]:
        requests.add_metric([row["mode"], row["decision"], row["reason"], row["transport"]], row["count"])
    yield requests
    families: dict[str, list[_stats.Metric]] = {}
    for row in _stats.METRICS:
        if row.metric is not None:
            families.setdefault(row.metric, []).append(row)
    for name, rows in families.items():
        first, value = rows[0], _stats.value_of(rows[0], snap)
        if first.bounds:
            buckets = [(b if b == "+Inf" else repr(float(b)), n) for b, n in value["buckets"].items()]
            yield HistogramMetricFamily(name, first.help, buckets=buckets, sum_value=value["sum"])
            continue
        family = GaugeMetricFamily if first.gauge else CounterMetricFamily
        if first.kind is None and first.label is None:
            yield family(name, first.help, value=value)
            continue
        series = family(name, first.help, labels=["kind" if first.kind else str(first.label)])
        for row in rows:
            value = _stats.value_of(row, snap)
            for label_value, n in value.items() if row.kind is None else [(row.kind, value)]:
                series.add_metric([label_value], n)
        yield series
