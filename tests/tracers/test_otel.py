"""
anchortrack's decision on the active OpenTelemetry span (the ``otel`` extra).

A span the caller (or a tracer above anchortrack) opened around the call gets the attributes
when the plan is made; a tracer below anchortrack (openinference, whose span starts when the
request is sent) gets them on its own span when the response arrives.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import anchortrack
from anchortrack.server import ResponsesServer, WireTap

from ..helpers import sent, user
from .helpers import Tracer, openinference_tracer


@pytest.fixture(name="exporter")
def _exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture(name="provider")
def _provider(exporter: InMemorySpanExporter) -> TracerProvider:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider


def _ours(span: ReadableSpan) -> dict[str, Any]:
    return {key: value for key, value in (span.attributes or {}).items() if key.startswith("anchortrack.")}


def _turns(client: openai.OpenAI, provider: TracerProvider, count: int) -> list[Any]:
    tracer = provider.get_tracer("app")
    history: list[Any] = []
    for turn in range(count):
        history.append(user(f"turn {turn}"))
        with tracer.start_as_current_span(f"turn {turn}"):
            reply = client.responses.create(model="scripted", input=history)
        history.extend(reply.output)
    return history


def test_the_callers_span_shows_the_decision(
    client: openai.OpenAI, provider: TracerProvider, exporter: InMemorySpanExporter, wire: WireTap
) -> None:
    """First call stateless, the next chained: the anchor, items sent of passed, bytes saved."""
    _turns(client, provider, 2)

    first, second = (_ours(span) for span in exporter.get_finished_spans())
    assert first == {
        "anchortrack.mode": "chained",
        "anchortrack.decision": "stateless",
        "anchortrack.reason": "no_history",
        "anchortrack.request.items_sent": 1,
        "anchortrack.request.items_passed": 1,
        "anchortrack.request.bytes_saved": 0,
    }
    assert second["anchortrack.decision"] == "chained"
    assert second["anchortrack.reason"] == "chained"
    assert second["anchortrack.request.previous_response_id"] == sent(wire)["previous_response_id"]
    assert (second["anchortrack.request.items_sent"], second["anchortrack.request.items_passed"]) == (1, 3)
    assert second["anchortrack.request.bytes_saved"] > 0


def test_a_resend_shows_the_fallback(
    client: openai.OpenAI, server: ResponsesServer, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """A forgotten anchor: the span says the call went out in full, and why."""
    history = _turns(client, provider, 1)
    last = client.responses.create(model="scripted", input=[*history, user("x")])
    server.state.drop(last.id)
    exporter.clear()

    with provider.get_tracer("app").start_as_current_span("resend"):
        client.responses.create(model="scripted", input=[*history, user("x"), *last.output, user("y")])

    (span,) = exporter.get_finished_spans()
    attributes = _ours(span)
    assert attributes["anchortrack.decision"] == "stateless"
    assert attributes["anchortrack.fallback.reason"] == "stale_anchor"
    assert attributes["anchortrack.request.items_sent"] == attributes["anchortrack.request.items_passed"] == 5
    assert attributes["anchortrack.request.previous_response_id"] == last.id  # the refused request's


@pytest.fixture(name="instrumented")
def _instrumented() -> Iterator[Tracer]:
    with openinference_tracer() as tracer:
        yield tracer


@pytest.mark.parametrize("order", ["tracer_first", "wrap_first"])
def test_a_tracer_below_gets_the_attributes_on_its_own_span(
    raw_client: openai.OpenAI, instrumented: Tracer, order: str, wire: WireTap
) -> None:
    """openinference's LLM span (it starts when the request is sent) carries the decision too."""
    assert instrumented.install is not None
    if order == "tracer_first":
        instrumented.install()
        client = anchortrack.wrap(raw_client)
    else:
        client = anchortrack.wrap(raw_client)
        instrumented.install()
    first = client.responses.create(model="scripted", input=[user("one")])
    client.responses.create(model="scripted", input=[user("one"), *first.output, user("two")])

    spans = instrumented.extra["exporter"].get_finished_spans()
    decisions = [_ours(span).get("anchortrack.decision") for span in spans]
    assert decisions == ["stateless", "chained"]
    assert _ours(spans[1])["anchortrack.request.previous_response_id"] == sent(wire)["previous_response_id"]
