"""A call's `Outcome` as ``anchortrack.<field>`` attributes on the current OpenTelemetry span, if
``opentelemetry-api`` is installed and the span records: when the plan is made, when the SDK hands back the
response (a tracer below starts its span with the request), and once the decision is final."""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

from ._outcome import Outcome, fields


trace: Any
try:
    from opentelemetry import trace
except ImportError:  # the optional extra is not installed
    trace = None


PREFIX = "anchortrack."

#: The outcome of the call being made, as it stands (for `sent`).
_current: ContextVar[Outcome | None] = ContextVar("anchortrack_otel", default=None)


def enabled() -> bool:
    """Whether spans can be annotated (``opentelemetry-api`` is installed)."""
    return trace is not None


def annotate(outcome: Outcome) -> None:
    """Remember *outcome* for `sent` and set its attributes on the current span, if it records."""
    if trace is None:
        return
    _current.set(outcome)
    span = trace.get_current_span()
    if span.is_recording():
        span.set_attributes(attributes(outcome))


def sent() -> None:
    """The SDK has the response: annotate the span current now, too."""
    outcome = _current.get()
    if outcome is not None:
        annotate(outcome)


def attributes(outcome: Outcome) -> dict[str, Any]:
    """The span attributes of *outcome*: ``anchortrack.<field>`` for each field that has a value."""
    return {PREFIX + key: value for key, value in fields(outcome).items() if value is not None}
