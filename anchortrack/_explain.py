"""``anchortrack.explain``: what anchortrack would send for a history, and why (the wrapped client's planning,
one store read, nothing written)."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from ._api import store_context
from ._canonical import ItemError, canonical_item
from ._flow import UNAVAILABLE, CallContext, History, drive, plan_history, read_history
from ._hashing import Kind, Scope, kind_of
from ._log import short
from ._mode import Mode
from ._outcome import decision_for, fields, outcome_of
from ._plan import REASON_TEXT, Plan, Reason, RecentViews, holds, with_sizes
from ._properties import properties_digest
from ._request import Request, read_request
from .stores._base import Anchor, AnchorStore


#: The `Outcome` fields an explanation holds (under the same names).
# fmt: off
_OUTCOME_KEYS = ("anchor_id", "diverged_at", "items_total", "items_sent", "items_planned", "bytes_stateless",
                 "bytes_sent", "bytes_planned")
# fmt: on


@attrs.frozen
class ItemRow:
    """One item of an explained history.

    Attributes:
        index: Position in the history (0-based).
        type: The item's ``type`` (``message``, ``function_call``, …).
        role: The message role, if a message.
        fingerprint: The first 12 hex digits of the item's fingerprint (None if it cannot be fingerprinted).
        held_by: The recorded response whose view first holds this item (the shortest recorded view that
            is a prefix of the history and covers it), if any.
        in_delta: Whether the item goes out in ``input``.
    """

    index: int
    type: str
    role: str | None
    fingerprint: str | None
    held_by: str | None
    in_delta: bool


@attrs.frozen
class Explanation:
    """What anchortrack would send for one history, and why.

    Attributes:
        items: One row per item.
        plan: The plan the wrapped client would make.
        scope: The scope the anchors were looked up in.
        previous_response_id: Set by the caller in the request body, if so.
        store_false: The request body says ``store: false``.
        closest: The response whose recorded view is the longest prefix of the history, if any.
        detail: The error behind ``store_unavailable`` or ``internal_error``.
    """

    items: tuple[ItemRow, ...]
    plan: Plan
    scope: Scope
    previous_response_id: str | None = None
    store_false: bool = False
    closest: Anchor | None = None
    detail: str | None = None

    @property
    def reason(self) -> Reason:
        """Why the request would chain or go out in full."""
        return self.plan.reason

    @property
    def decision(self) -> str:
        """``chained``, ``stateless`` or ``passthrough``."""
        return decision_for(chained=self.plan.chained, reason=self.plan.reason.value)

    @property
    def summary(self) -> str:
        """One line: the decision, the reason code and why."""
        plan = self.plan
        label = "chained" if plan.chained else f"{self.decision} ({plan.reason.value})"
        line = f"{label}: {self._why()}"
        if self.store_false:
            line += "; the response will not be recorded (store=false)"
        return line

    def _why(self) -> str:
        plan, reason = self.plan, self.plan.reason
        if plan.anchor is not None:
            saved = 1 - plan.bytes_planned / plan.bytes_stateless if plan.bytes_stateless else 0.0
            return (
                f"sends {plan.sent} of {plan.total} items after {plan.anchor.response_id} "
                f"(its view is items 0-{plan.skip - 1}): ~{plan.bytes_planned:,} of "
                f"~{plan.bytes_stateless:,} input bytes ({saved:.0%} less)"
            )
        if reason is Reason.NO_HISTORY and plan.total == 0:
            return "the history is empty"
        if reason is Reason.NOTHING_NEW and self.closest is not None:
            return (
                f"the history ends exactly where {self.closest.response_id}'s view ends, "
                "so there is nothing new to send after it"
            )
        if reason is Reason.PREFIX_DIVERGED and plan.diverged_at is not None:
            return (
                f"item {plan.diverged_at} is the first that differs from the closest recorded view; "
                "no recorded response's view is a prefix of the history"
            )
        if reason is Reason.CALLER_MANAGED and self.previous_response_id is not None:
            return (
                f"the request sets previous_response_id={self.previous_response_id} itself, "
                "so it is sent as given"
            )
        text = REASON_TEXT[reason]
        return f"{text} ({self.detail})" if self.detail else text

    def to_dict(self) -> dict[str, Any]:
        """Return the explanation as JSON data (``anchortrack explain --json``): the call's `Outcome` fields
        under their names, were it sent now in mode ``chained``, and what explains them."""
        plan = self.plan
        outcome = fields(outcome_of(Mode.CHAINED, "http", plan))
        return {
            "decision": self.decision,
            "reason": plan.reason.value,
            "summary": self.summary,
            "anchor": _anchor_dict(plan.anchor),
            "closest": _anchor_dict(self.closest),
            **{key: outcome[key] for key in _OUTCOME_KEYS},
            "items_skipped": plan.skip,
            "previous_response_id": self.previous_response_id,
            "store_false": self.store_false,
            "scope": {  # its fields but the API key's digest
                **attrs.asdict(self.scope, filter=lambda field, _: field.name != "api_key_digest"),
                "key": self.scope.key,
            },
            "items": [attrs.asdict(row) for row in self.items],
        }

    def table(self) -> list[str]:
        """The items, one row each: the anchor marked, the items sent in ``input`` with ``+``."""
        lines = [f"  {'#':>4}  {'type':<22} {'role':<10} {'fingerprint':<12}  held by"]
        anchor = self.plan.anchor
        for row in self.items:
            if anchor is not None and row.index == self.plan.skip:
                lines.append(f"  ── anchor {anchor.response_id} ──")
            mark = "+" if row.in_delta else " "
            held = row.held_by or "-"
            lines.append(
                f"{mark} {row.index:>4}  {row.type:<22} {row.role or '-':<10} "
                f"{row.fingerprint or '?':<12}  {held if len(held) <= 16 else held[:14] + '…'}"
            )
        if not self.items:
            lines.append("  (no items)")
        lines.append("  + = sent in input")
        return lines

    def render(self) -> str:
        """Return the explanation as text: the `table`, then the summary wrapped to 80 columns."""
        summary = textwrap.fill(self.summary, 80, subsequent_indent="  ", break_long_words=False)
        return "\n".join([*self.table(), summary])


def explain(
    history_or_body: object,
    *,
    store: AnchorStore,
    scope: Scope,
    recent: RecentViews | None = None,
    now: float | None = None,
    params: Mapping[str, Any] | None = None,
) -> Explanation:
    """Explain what the wrapped client would send for *history_or_body*.

    Args:
        history_or_body: A history (a list of items, or a string: one user message), or a
            ``POST /responses`` body (a mapping with ``input``; its ``previous_response_id``,
            ``conversation`` and ``store`` are taken into account).
        store: The store the anchors are in.
        scope: The scope they were recorded under: for a wrapped client,
            ``anchortrack.tracker(client).scope_for(client)``.
        recent: The views a live tracker recorded lately (``anchortrack.tracker(client).recent``), to
            locate where a diverged history first differs (``Plan.diverged_at``).
        now: Unix time for anchor expiry (default: now).
        params: For a history, the request's other ``create`` arguments (``tools``, ``text``, …), whose
            carried-over properties must match an anchor's; a body carries its own.

    Raises:
        TypeError: A body's ``input`` is neither a string nor a list.
    """
    if isinstance(history_or_body, Mapping):
        request = read_request(history_or_body, scope.base_url)
    elif isinstance(history_or_body, (str, Sequence)):
        items = [history_or_body] if isinstance(history_or_body, str) else list(history_or_body)
        request = Request({}, items, properties=properties_digest(params or {}, scope.base_url))
    else:
        raise TypeError(
            f"explain() takes a history (list) or a request body (dict), not {type(history_or_body).__name__}"
        )
    n = len(request.items)
    kinds = [_kind(item) for item in request.items]
    asked = (scope, request.previous_response_id, not request.store)
    context = store_context(scope, store, now, recent)
    try:
        history = read_history(context, request.items)
    except ItemError as error:
        plan = Plan(Reason.CALLER_MANAGED if request.caller_managed else Reason.INTERNAL_ERROR, total=n)
        return Explanation(_rows(kinds, None, {}, plan), plan, *asked, detail=str(error))
    views: dict[int, Anchor] = {}
    detail = None
    if request.caller_managed:
        plan = with_sizes(Plan(Reason.CALLER_MANAGED, total=n), history.sizes)
    else:
        # One lookup of every prefix view: the ones the planner asks for.
        found: object
        try:
            found = store.find(context.scope_key, history.hashes) if history.hashes else {}
        except Exception as error:  # noqa: BLE001 - reported as store_unavailable, like the client does
            found, detail = UNAVAILABLE, type(error).__name__
        plan = drive(plan_history(context, history, properties=request.properties), lambda effect: found)
        if isinstance(found, Mapping):
            views = _views(history, found, context)
        elif plan.reason is not Reason.STORE_UNAVAILABLE:  # the planner looked nothing up
            detail = None
    rows = _rows(kinds, history.fingerprints, views, plan)
    return Explanation(rows, plan, *asked, views[max(views)] if views else None, detail)


def _views(history: History, found: Mapping[bytes, Anchor], context: CallContext) -> dict[int, Anchor]:
    """The recorded (and, with a secret key, authentic) views that are prefixes of the history, by length."""
    hashes = enumerate(history.hashes, start=1)
    return {i: a for i, h in hashes if (a := found.get(h)) and holds(a, h, i, context.now, context.authentic)}


def _kind(item: object) -> Kind:
    try:
        return kind_of(canonical_item(item))
    except ItemError:
        return type(item).__name__, None


def _rows(
    kinds: Sequence[Kind], fps: Sequence[bytes] | None, views: Mapping[int, Anchor], plan: Plan
) -> tuple[ItemRow, ...]:
    lengths = sorted(views)
    first = plan.skip if plan.anchor is not None else 0
    return tuple(
        ItemRow(
            index=index,
            type=kind,
            role=role,
            fingerprint=short(fps[index]) if fps is not None else None,
            held_by=next((views[n].response_id for n in lengths if n > index), None),
            in_delta=index >= first,
        )
        for index, (kind, role) in enumerate(kinds)
    )


def _anchor_dict(anchor: Anchor | None) -> dict[str, Any] | None:
    if anchor is None:
        return None
    return {"response_id": anchor.response_id, "items": anchor.count, "view": short(anchor.view)}
