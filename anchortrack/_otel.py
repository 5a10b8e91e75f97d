"""
anchortrack's decision as ``anchortrack.*`` attributes (docs/guide/observability.md) on the active
OpenTelemetry span, if ``opentelemetry-api`` is installed and the span records (none is ever started).
They are set on the span current when the plan is made (a tracer above anchortrack, or the caller's own)
and again when the SDK hands back the response (a tracer below, whose span starts with the request).
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

from ._outcome import decision_for


trace: Any
try:
    from opentelemetry import trace
except ImportError:  # the optional extra is not installed
    trace = None


PREFIX = "anchortrack."

#: The call being made: its plan, mode, and fallback if any (attributes are built only when a span records).
_current: ContextVar[tuple[Any, str, str | None] | None] = ContextVar("anchortrack_otel", default=None)


def planned(plan: Any, mode: str) -> None:
    """A plan was made (an `anchortrack._plan.Plan`, in *mode*): annotate the current span."""
    if trace is not None:
        _annotate((plan, mode, None))


def fell_back(failure: str) -> None:
    """The anchor was refused (*failure*); the call is resent in full."""
    call = _current.get()
    if call is not None:
        _annotate((call[0], call[1], failure))


def sent() -> None:
    """The SDK has the response: annotate the span current now, too."""
    call = _current.get()
    if call is not None:
        _annotate(call)


def attributes(plan: Any, mode: str, failure: str | None = None) -> dict[str, Any]:
    """The span attributes for *plan* in *mode*, resent in full after *failure* if given."""
    reason = plan.reason.value
    applied = mode == "chained" and failure is None
    decision = decision_for(chained=plan.chained, reason=reason) if failure is None else "stateless"
    out: dict[str, Any] = {
        PREFIX + "mode": mode,
        PREFIX + "decision": decision,
        PREFIX + "reason": reason,
        PREFIX + "request.items_sent": plan.sent if applied else plan.total,
        PREFIX + "request.items_passed": plan.total,
        PREFIX + "request.bytes_saved": max(0, plan.bytes_stateless - plan.bytes_planned) if applied else 0,
    }
    if plan.chained and mode == "chained":
        out[PREFIX + "request.previous_response_id"] = plan.anchor.response_id
    if failure is not None:
        out[PREFIX + "fallback.reason"] = failure
    return out


def _annotate(call: tuple[Any, str, str | None]) -> None:
    """Remember *call* for `sent` and set its attributes on the current span, if it records."""
    _current.set(call)
    span = trace.get_current_span()
    if span.is_recording():
        span.set_attributes(attributes(*call))
