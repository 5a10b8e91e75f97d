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


def _api() -> Any:
    try:
        from opentelemetry import trace
    except ImportError:  # the optional extra is not installed
        return None
    return trace


trace: Any = _api()


PREFIX = "anchortrack."

#: The attributes of the call being made, for the span current when its response arrives.
_current: ContextVar[dict[str, Any] | None] = ContextVar("anchortrack_otel", default=None)

_PASSTHROUGH = frozenset({"caller_managed", "mode_off"})


def planned(plan: Any, mode: str) -> None:
    """Set the plan's attributes on the current span (a `anchortrack._plan.Plan` in *mode*)."""
    if trace is None:
        return
    reason = plan.reason.value
    applied = mode == "chained"
    decision = "chained" if plan.chained else "passthrough" if reason in _PASSTHROUGH else "stateless"
    attributes: dict[str, Any] = {
        PREFIX + "mode": mode,
        PREFIX + "decision": decision,
        PREFIX + "reason": reason,
        PREFIX + "request.items_sent": plan.sent if applied else plan.total,
        PREFIX + "request.items_passed": plan.total,
        PREFIX + "request.bytes_saved": max(0, plan.bytes_stateless - plan.bytes_planned) if applied else 0,
    }
    if plan.chained and applied:
        attributes[PREFIX + "request.previous_response_id"] = plan.anchor.response_id
    _current.set(attributes)
    _annotate(attributes)


def fell_back(failure: str, items: int) -> None:
    """The anchor was refused (*failure*); the call is resent in full (*items* items)."""
    if trace is None:
        return
    attributes = dict(_current.get() or {})
    attributes.update(
        {
            PREFIX + "decision": "stateless",
            PREFIX + "fallback.reason": failure,
            PREFIX + "request.items_sent": items,
            PREFIX + "request.bytes_saved": 0,
        }
    )
    _current.set(attributes)
    _annotate(attributes)


def sent() -> None:
    """The SDK has the response: set the call's attributes on the span current now, too."""
    if trace is None:
        return
    attributes = _current.get()
    if attributes:
        _annotate(attributes)


def _annotate(attributes: dict[str, Any]) -> None:
    span = trace.get_current_span()
    if span.is_recording():
        span.set_attributes(attributes)
