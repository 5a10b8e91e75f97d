"""`Outcome`: what one call did, the one record `Stats`, the metrics, the events, the span, the demo and every
`Tracker.subscribe` callback read once the decision is final."""

from __future__ import annotations

import enum
from typing import Any

import attrs

from ._mode import Mode
from ._plan import Plan, Reason


class Decision(str, enum.Enum):
    """What went out (in shadow mode, what *would* have; never ``resent``): see `Stats` (``requests``)."""

    CHAINED = "chained"
    RESENT = "resent"
    STATELESS = "stateless"
    PASSTHROUGH = "passthrough"


def decision_for(*, chained: bool, reason: str) -> str:
    """The decision of a request planned for *reason*, before any refusal: chained, stateless, passthrough."""
    if chained:
        return Decision.CHAINED.value
    passthrough = reason in (Reason.MODE_OFF, Reason.CALLER_MANAGED)  # sent exactly as the caller built it
    return Decision.PASSTHROUGH.value if passthrough else Decision.STATELESS.value


def stateless_share(sent: int, stateless: int) -> float | None:
    """The share of the stateless input bytes a run sent (None if nothing went stateless)."""
    return sent / stateless if stateless else None


@attrs.frozen
class Outcome:
    """One call, once its decision is final.

    Attributes:
        mode: ``chained``, ``shadow`` or ``off``.
        transport: ``http``, or ``websocket`` (``client.responses.connect()``).
        decision: What went out (`Decision`).
        reason: Why (`Reason`); for ``resent``, the refusal.
        anchor_id: The ``previous_response_id`` chaining sent (for ``resent``: the refused one; in
            shadow mode: the one it would have sent).
        diverged_at: Where the history first differs from the closest view recorded lately, when a
            divergence is the reason.
        items_total: Items in the caller's history (0 for a request not read).
        items_sent: Items that went out, a resend included.
        items_planned: Items the plan sends (in shadow mode: would send).
        bytes_stateless: Estimated input bytes of the full history.
        bytes_sent: Estimated input bytes that went out, a resend included.
        bytes_planned: Estimated input bytes of the plan.
        anchors_rejected: Anchors the store returned whose MAC did not verify.
        plan_seconds: How long planning took, when it ran to the end.
        response_id: The id of the response the call returned, when it returned one at once (not a
            stream, not a socket).
    """

    mode: str
    transport: str
    decision: Decision
    reason: Reason
    anchor_id: str | None = None
    diverged_at: int | None = None
    items_total: int = 0
    items_sent: int = 0
    items_planned: int = 0
    bytes_stateless: int = 0
    bytes_sent: int = 0
    bytes_planned: int = 0
    anchors_rejected: int = 0
    plan_seconds: float | None = None
    response_id: str | None = None


def outcome_of(
    mode: Mode,
    transport: str,
    plan: Plan,
    *,
    refused: Reason | None = None,
    attempted: bool = True,
    seconds: float | None = None,
    response_id: str | None = None,
) -> Outcome:
    """The outcome of a call planned as *plan*, or resent in full after a refusal (*refused*)."""
    shadow = mode is Mode.SHADOW
    full = refused is not None  # the full history went out, after the chained attempt if *attempted*
    decision = Decision.RESENT if full else Decision(decision_for(chained=plan.chained, reason=plan.reason))
    chained = not full or attempted
    items_sent = (plan.sent if chained else 0) + (plan.total if full else 0)
    bytes_sent = (plan.bytes_planned if chained else 0) + (plan.bytes_stateless if full else 0)
    return Outcome(
        mode=mode.value,
        transport=transport,
        decision=decision,
        reason=refused or plan.reason,
        anchor_id=plan.anchor.response_id if plan.anchor is not None else None,
        diverged_at=plan.diverged_at,
        items_total=plan.total,
        items_sent=plan.total if shadow else items_sent,
        items_planned=plan.sent,
        bytes_stateless=plan.bytes_stateless,
        bytes_sent=plan.bytes_stateless if shadow else bytes_sent,
        bytes_planned=plan.bytes_planned,
        anchors_rejected=len(plan.rejected),
        plan_seconds=seconds,
        response_id=response_id,
    )


def passed_through(mode: Mode, reason: Reason, transport: str) -> Outcome:
    """The outcome of a call sent exactly as given, without reading it (mode ``off``, a fault)."""
    return Outcome(mode=mode.value, transport=transport, decision=Decision.PASSTHROUGH, reason=reason)


def fields(outcome: Outcome) -> dict[str, Any]:
    """*outcome* as flat key/values, each named as its field: what events and span attributes carry."""
    out = attrs.asdict(outcome, recurse=False)
    out["decision"], out["reason"] = outcome.decision.value, outcome.reason.value
    return out


def event(outcome: Outcome) -> tuple[str, str, dict[str, Any]]:
    """The level, name and keys of the event that reports *outcome*: ``anchortrack.request_chained``,
    ``request_resent``, ``request_stateless`` or ``request_passed_through`` (debug), or in shadow mode
    ``anchortrack.shadow_planned`` (info); its keys are the outcome's `fields` that have a value (as the
    span's attributes), ``transport`` only when it is not ``http``."""
    keys = {key: value for key, value in fields(outcome).items() if value is not None}
    if keys["transport"] == "http":
        del keys["transport"]
    if outcome.mode == Mode.SHADOW.value:
        return "info", "anchortrack.shadow_planned", keys
    return "debug", _EVENTS[outcome.decision], keys


#: The event of each decision (events are named in the past tense).
# fmt: off
_EVENTS = {Decision.CHAINED: "anchortrack.request_chained", Decision.RESENT: "anchortrack.request_resent",
           Decision.STATELESS: "anchortrack.request_stateless",
           Decision.PASSTHROUGH: "anchortrack.request_passed_through"}
# fmt: on
