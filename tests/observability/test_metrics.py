"""Prometheus exposition of the tracker's stats (the ``prometheus`` extra)."""

from __future__ import annotations

import re
from pathlib import Path

import openai
import pytest
from prometheus_client import CollectorRegistry, generate_latest

import anchortrack
import anchortrack.metrics
from anchortrack.metrics import AnchortrackCollector
from anchortrack.server import ResponsesServer

from ..helpers import ask


ROOT = Path(__file__).parents[2]


def _scrape(registry: CollectorRegistry) -> list[str]:
    return generate_latest(registry).decode().splitlines()


def _requests(decision: str, mode: str, reason: str, count: int, transport: str = "http") -> str:
    """The exposition line of one ``anchortrack_requests_total`` series."""
    labels = f'decision="{decision}",mode="{mode}",reason="{reason}",transport="{transport}"'
    return f"anchortrack_requests_total{{{labels}}} {float(count)}"


def _conversation(server: ResponsesServer, client: openai.OpenAI) -> None:
    """no_history, chained (delta 1), stale anchor (evicted, resent), store=false."""
    history, _ = ask(client, [], "one")
    history, second = ask(client, history, "two")
    server.state.drop(second.id)
    ask(client, history, "three")
    ask(client, [], "four", store=False)


def test_exposition_has_every_family_with_the_tracker_values(
    server: ResponsesServer, client: openai.OpenAI
) -> None:
    """Counters by label, items and bytes by kind, and both histograms, read at scrape time."""
    _conversation(server, client)
    registry = CollectorRegistry()
    registry.register(AnchortrackCollector(client))
    snap = anchortrack.tracker(client).stats.snapshot()

    lines = _scrape(registry)

    for expected in [
        "# TYPE anchortrack_requests_total counter",
        _requests("chained", "chained", "chained", 1),
        _requests("resent", "chained", "stale_anchor", 1),
        _requests("stateless", "chained", "no_history", 2),
        'anchortrack_resends_total{reason="stale_anchor"} 1.0',
        "anchortrack_responses_recorded_total 3.0",
        'anchortrack_responses_not_recorded_total{reason="store_false"} 1.0',
        "# TYPE anchortrack_store_errors_total counter",
        f'anchortrack_request_items_total{{kind="sent"}} {float(snap["items_sent"])}',
        f'anchortrack_request_items_total{{kind="total"}} {float(snap["items_total"])}',
        f'anchortrack_request_bytes_total{{kind="sent"}} {float(snap["bytes_sent"])}',
        f'anchortrack_request_bytes_total{{kind="stateless"}} {float(snap["bytes_stateless"])}',
        f'anchortrack_request_bytes_total{{kind="planned"}} {float(snap["bytes_planned"])}',
        "# TYPE anchortrack_plan_seconds histogram",
        'anchortrack_plan_seconds_bucket{le="+Inf"} 4.0',
        "anchortrack_plan_seconds_count 4.0",
        "# TYPE anchortrack_delta_items histogram",
        # the chained request the server accepted; not the one it refused (counted as resent)
        'anchortrack_delta_items_bucket{le="1.0"} 1.0',
        'anchortrack_delta_items_bucket{le="+Inf"} 1.0',
        "anchortrack_delta_items_sum 1.0",
    ]:
        assert expected in lines
    assert not [line for line in lines if line.startswith("anchortrack_store_errors_total")]


def test_values_are_read_at_scrape_time(server: ResponsesServer, client: openai.OpenAI) -> None:
    """A second scrape shows the calls made since the first."""
    registry = CollectorRegistry()
    anchortrack.metrics.register(client, registry)
    ask(client, [], "one")
    first = _scrape(registry)

    ask(client, [], "two")

    assert _requests("stateless", "chained", "no_history", 1) in first
    assert _requests("stateless", "chained", "no_history", 2) in _scrape(registry)


def test_register_adds_clients_up_on_one_registry(raw_client: openai.OpenAI) -> None:
    """register() shares one collector per registry; clients add up; registering twice is a no-op."""
    registry = CollectorRegistry()
    a, b = anchortrack.wrap(raw_client), anchortrack.wrap(raw_client, mode="shadow")
    ca = anchortrack.metrics.register(a, registry)
    cb = anchortrack.metrics.register(b, registry)
    anchortrack.metrics.register(anchortrack.tracker(a), registry)
    ask(a, [], "one")
    ask(b, [], "two")

    lines = _scrape(registry)

    assert ca is cb
    assert _requests("stateless", "chained", "no_history", 1) in lines
    assert _requests("stateless", "shadow", "no_history", 1) in lines
    assert "anchortrack_responses_recorded_total 2.0" in lines


def test_register_refuses_what_is_not_tracked(raw_client: openai.OpenAI) -> None:
    """An unwrapped client cannot be registered."""
    with pytest.raises(TypeError, match="not tracked"):
        anchortrack.metrics.register(raw_client, CollectorRegistry())


def test_optional_dependencies_are_imported_only_in_their_modules() -> None:
    """prometheus_client only in anchortrack/metrics.py; matplotlib nowhere in the package."""
    pattern = re.compile(r"^\s*(?:import|from)\s+(prometheus_client|matplotlib)\b", re.M)
    offenders = {
        str(path.relative_to(ROOT)): pattern.findall(path.read_text(encoding="utf-8"))
        for path in (ROOT / "anchortrack").rglob("*.py")
    }
    assert {"anchortrack/metrics.py": ["prometheus_client"] * 4} == {k: v for k, v in offenders.items() if v}
