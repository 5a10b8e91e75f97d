"""
anchortrack's record of a call, its `Outcome`, on the active OpenTelemetry span (the ``otel`` extra).

A span the caller (or a tracer above anchortrack) opened around the call gets the attributes
when the plan is made and once the decision is final; a tracer below anchortrack (openinference,
whose span starts when the request is sent) gets them on its own span when the response arrives.
The attributes are the outcome's fields, under their names, as in stats, events and metrics.
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
from anchortrack._outcome import Outcome, fields
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
    """First call stateless, the next chained: the anchor, items and bytes sent of the history's."""
    outcomes: list[Outcome] = []
    anchortrack.tracker(client).subscribe(outcomes.append)
    _turns(client, provider, 2)

    first, second = (_ours(span) for span in exporter.get_finished_spans())
    assert {key: value for key, value in first.items() if "bytes" not in key and "seconds" not in key} == {
        "anchortrack.mode": "chained",
        "anchortrack.transport": "http",
        "anchortrack.decision": "stateless",
        "anchortrack.reason": "no_history",
        "anchortrack.items_total": 1,
        "anchortrack.items_sent": 1,
        "anchortrack.items_planned": 1,
        "anchortrack.anchors_rejected": 0,
        "anchortrack.response_id": outcomes[0].response_id,
    }
    assert first["anchortrack.bytes_sent"] == first["anchortrack.bytes_stateless"] > 0
    assert second["anchortrack.decision"] == "chained"
    assert second["anchortrack.reason"] == "chained"
    assert second["anchortrack.anchor_id"] == sent(wire)["previous_response_id"]
    assert (second["anchortrack.items_sent"], second["anchortrack.items_total"]) == (1, 3)
    assert second["anchortrack.bytes_sent"] < second["anchortrack.bytes_stateless"]
    # One vocabulary: each span's attributes are its call's outcome, field for field.
    assert [first, second] == [_attributes(outcome) for outcome in outcomes]


def _attributes(outcome: Outcome) -> dict[str, Any]:
    """The attributes *outcome* should give a span: each field with a value, ``anchortrack.``-prefixed."""
    return {f"anchortrack.{key}": value for key, value in fields(outcome).items() if value is not None}


def test_a_resend_shows_the_fallback(
    client: openai.OpenAI, server: ResponsesServer, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """
    A forgotten anchor: the span says what stats and the outcome say, in the same words — resent after
    stale_anchor, from the refused anchor, both requests' items counted — never chained.
    """
    history = _turns(client, provider, 1)
    last = client.responses.create(model="scripted", input=[*history, user("x")])
    server.state.drop(last.id)
    exporter.clear()
    outcomes: list[Outcome] = []
    tracker = anchortrack.tracker(client)
    tracker.subscribe(outcomes.append)

    with provider.get_tracer("app").start_as_current_span("resend"):
        client.responses.create(model="scripted", input=[*history, user("x"), *last.output, user("y")])

    (span,) = exporter.get_finished_spans()
    attributes = _ours(span)
    assert attributes["anchortrack.decision"] == "resent"
    assert attributes["anchortrack.reason"] == "stale_anchor"
    assert attributes["anchortrack.anchor_id"] == last.id  # the refused anchor, as the outcome names it
    assert (attributes["anchortrack.items_total"], attributes["anchortrack.items_sent"]) == (5, 6)
    assert not [key for key in attributes if "previous_response_id" in key or "fallback" in key]
    assert [_attributes(outcomes[0])] == [attributes]
    assert 1 == tracker.stats.count("resent", "stale_anchor")


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
    assert _ours(spans[1])["anchortrack.anchor_id"] == sent(wire)["previous_response_id"]
