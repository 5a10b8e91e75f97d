"""
anchortrack's decision on the active OpenTelemetry span of each call.

Optional: it does something only when ``opentelemetry-api`` is installed
(``pip install 'anchortrack[otel]'``) and a span is recording; anchortrack
never starts a span of its own. Attributes follow the OpenTelemetry GenAI
naming style under an ``anchortrack.`` prefix:

* ``anchortrack.mode``: ``chained``, ``shadow`` (or ``off``: nothing is set);
* ``anchortrack.decision``: ``chained``, ``stateless`` or ``passthrough``;
* ``anchortrack.reason``: the reason code (``chained``, ``prefix_diverged``, …);
* ``anchortrack.request.previous_response_id``: the anchor the request chained from;
* ``anchortrack.request.items_sent`` / ``anchortrack.request.items_passed``:
  the items on the wire, of the items the caller passed;
* ``anchortrack.request.bytes_saved``: estimated request bytes not sent;
* after a refused anchor, ``anchortrack.fallback.reason`` (``stale_anchor``, …)
  and ``anchortrack.decision`` ``stateless``: the call was resent in full.

They are set twice per call, on whichever span is current: when the plan is
made (a tracer applied above anchortrack, or the caller's own span) and when
the SDK hands back the response (a tracer below anchortrack, whose span only
starts when the request is sent). The same values land on both.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

from ._outcome import decision_for


def _api() -> Any:
    try:
        from opentelemetry import trace
    except ImportError:  # the optional extra is not installed
        return None
    return trace


trace: Any = _api()


PREFIX = "anchortrack."

#: The call being made (its plan, mode, and fallback if any), for the span current when its
#: response arrives; attributes are built only when a span records.
_current: ContextVar[tuple[Any, str, str | None] | None] = ContextVar("anchortrack_otel", default=None)

def planned(plan: Any, mode: str) -> None:
    """A plan was made (an `anchortrack._plan.Plan`, in *mode*): annotate the current span."""
    if trace is None:
        return
    call = (plan, mode, None)
    _current.set(call)
    _annotate(call)


def fell_back(failure: str) -> None:
    """The anchor was refused (*failure*); the call is resent in full."""
    if trace is None:
        return
    call = _current.get()
    if call is None:
        return
    call = (call[0], call[1], failure)
    _current.set(call)
    _annotate(call)


def sent() -> None:
    """The SDK has the response: annotate the span current now, too."""
    if trace is None:
        return
    call = _current.get()
    if call is not None:
        _annotate(call)


def attributes(plan: Any, mode: str, failure: str | None = None) -> dict[str, Any]:
    """The span attributes for *plan* in *mode*, resent in full after *failure* if given."""
    reason = plan.reason.value
    applied = mode == "chained"
    decision = decision_for(chained=plan.chained, reason=reason)
    out: dict[str, Any] = {
        PREFIX + "mode": mode,
        PREFIX + "decision": decision,
        PREFIX + "reason": reason,
        PREFIX + "request.items_sent": plan.sent if applied else plan.total,
        PREFIX + "request.items_passed": plan.total,
        PREFIX + "request.bytes_saved": max(0, plan.bytes_stateless - plan.bytes_planned) if applied else 0,
    }
    if plan.chained and applied:
        out[PREFIX + "request.previous_response_id"] = plan.anchor.response_id
    if failure is not None:
        out[PREFIX + "decision"] = "stateless"
        out[PREFIX + "fallback.reason"] = failure
        out[PREFIX + "request.items_sent"] = plan.total
        out[PREFIX + "request.bytes_saved"] = 0
    return out


def _annotate(call: tuple[Any, str, str | None]) -> None:
    span = trace.get_current_span()
    if span.is_recording():
        span.set_attributes(attributes(*call))
