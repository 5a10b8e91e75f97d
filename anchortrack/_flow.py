"""
One ``responses.create`` call as a generator of effects (no I/O).

The flow yields what it needs done — look views up, resolve a parent, evict an
anchor, send a body — and receives the answers.
Errors raised while sending are thrown back into it.
`drive` and `adrive` are the only places where sync and async differ, so the
decisions (which anchor, what to resend after a stale anchor or a ZDR refusal,
what never to retry) are written once.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from typing import Any

import attrs

from ._canonical import ItemError
from ._hashing import extend, prefix_hashes
from ._log import get_logger
from ._mode import Mode
from ._plan import Plan, Reason, candidates, with_sizes
from ._refusal import Failure, classify
from ._request import Request, chained_body
from .stores._base import Anchor


@attrs.frozen
class Find:
    """Look up which of *views* are recorded anchors."""

    scope: str
    views: Sequence[bytes]


@attrs.frozen
class Get:
    """Look up the anchor recorded for a response id."""

    scope: str
    response_id: str


@attrs.frozen
class Evict:
    """Forget a response the server no longer has."""

    scope: str
    response_id: str


@attrs.frozen
class Ticket:
    """
    What is needed to record the response to one request.

    Attributes:
        scope: The store scope key.
        base: ``h(n)``: the digest of the full context sent, before outputs.
        count: How many items that context holds.
        hashes: ``[h(1), …, h(n)]`` when known, to explain later fallbacks.
        skip_reason: Why the response must not be recorded, if so.
        expires_at: When the response's chain expires, if it is chained: a
            response cannot outlive the ancestors the server resolves it through.
    """

    scope: str
    base: bytes
    count: int
    hashes: Sequence[bytes] | None = None
    skip_reason: Reason | None = None
    expires_at: float | None = None


@attrs.frozen
class Send:
    """Call the SDK with *body* (keyword arguments); record the response with *ticket*."""

    body: Mapping[str, Any]
    ticket: Ticket | None


Effect = Find | Get | Evict | Send
Flow = Generator[Effect, Any, Any]


class Context:
    """What the flow needs from its tracker (implemented by `Tracker`)."""

    scope_key: str
    root: bytes
    mode: Mode
    zdr_disabled: bool

    def fingerprints(self, items: Sequence[object]) -> tuple[list[bytes], list[int], bool]:
        """Return fingerprints, canonical sizes and whether model output is present."""
        raise NotImplementedError

    def planned(self, request: Request, plan: Plan, seconds: float | None) -> None:
        """Report a plan (log and count)."""
        raise NotImplementedError

    def fell_back(self, failure: Failure, anchor: Anchor) -> None:
        """Report a resend after a refused chained request."""
        raise NotImplementedError

    def choose(self, hashes: Sequence[bytes], found: Mapping[bytes, Anchor], *, has_model: bool) -> Plan:
        """Pick the anchor (pure, with the tracker's clock and recent views)."""
        raise NotImplementedError


def call_flow(ctx: Context, request: Request, unavailable: object) -> Flow:
    """
    The decisions for one call, as a generator of effects.

    *unavailable* is the sentinel the drivers answer with when the store failed.
    """
    if request.caller_managed:
        return (yield from _caller_managed(ctx, request, unavailable))
    items = request.items
    n = len(items)
    started = time.perf_counter()
    try:
        fps, sizes, has_model = ctx.fingerprints(items)
    except ItemError as error:
        get_logger().warning("anchortrack.item_unsupported", error=str(error), fallback="stateless")
        ctx.planned(request, Plan(Reason.INTERNAL_ERROR, total=n), None)
        return (yield Send(request.body, None))
    hashes = prefix_hashes(ctx.root, fps)
    ticket = Ticket(
        scope=ctx.scope_key,
        base=hashes[-1] if hashes else ctx.root,
        count=n,
        hashes=hashes,
        skip_reason=None if request.store else Reason.STORE_FALSE,
    )
    if ctx.zdr_disabled:
        plan = Plan(Reason.ZDR, total=n)
    elif n < 2:
        plan = ctx.choose(hashes, {}, has_model=has_model)
    else:
        found = yield Find(ctx.scope_key, candidates(hashes))
        if found is unavailable:
            plan = Plan(Reason.STORE_UNAVAILABLE, total=n)
        else:
            plan = ctx.choose(hashes, found, has_model=has_model)
    plan = with_sizes(plan, sizes)
    ctx.planned(request, plan, time.perf_counter() - started)
    if ctx.mode is Mode.SHADOW or plan.anchor is None:
        return (yield Send(request.body, ticket))
    anchor = plan.anchor
    try:
        chained_ticket = attrs.evolve(ticket, expires_at=anchor.expires_at)
        return (yield Send(chained_body(request, plan.skip, anchor.response_id), chained_ticket))
    except Exception as error:
        failure = classify(error, anchor.response_id)
        if failure is Failure.OTHER:
            raise
        if failure is Failure.STALE_ANCHOR:
            yield Evict(ctx.scope_key, anchor.response_id)
        ctx.fell_back(failure, anchor)
        return (yield Send(request.body, ticket))


def _caller_managed(ctx: Context, request: Request, unavailable: object) -> Flow:
    """Send exactly as given; record the child if the parent's view is known."""
    ticket = None
    parent_id = request.previous_response_id
    if parent_id is not None and not request.conversation and not ctx.zdr_disabled:
        parent = yield Get(ctx.scope_key, parent_id)
        if isinstance(parent, Anchor):
            try:
                fps, _, _ = ctx.fingerprints(request.items)
            except ItemError:
                fps = None
            if fps is not None:
                ticket = Ticket(
                    scope=ctx.scope_key,
                    base=extend(parent.view, fps),
                    count=parent.count + len(fps),
                    skip_reason=None if request.store else Reason.STORE_FALSE,
                    expires_at=parent.expires_at,
                )
    ctx.planned(request, Plan(Reason.CALLER_MANAGED, total=len(request.items)), None)
    if ticket is None:
        get_logger().debug(
            "anchortrack.parent_unknown",
            previous_response_id=parent_id,
            conversation=request.conversation,
        )
    return (yield Send(request.body, ticket))


def drive(flow: Flow, run: Callable[[Effect], Any]) -> Any:
    """Run *flow* to completion, performing each effect with *run* (sync)."""
    value: Any = None
    error: BaseException | None = None
    while True:
        try:
            effect = flow.throw(error) if error is not None else flow.send(value)
        except StopIteration as stop:
            return stop.value
        error = None
        try:
            value = run(effect)
        except Exception as exc:  # noqa: BLE001 - handed to the flow to decide
            value, error = None, exc


async def adrive(flow: Flow, run: Callable[[Effect], Awaitable[Any]]) -> Any:
    """Run *flow* to completion, performing each effect with *run* (async)."""
    value: Any = None
    error: BaseException | None = None
    while True:
        try:
            effect = flow.throw(error) if error is not None else flow.send(value)
        except StopIteration as stop:
            return stop.value
        error = None
        try:
            value = await run(effect)
        except Exception as exc:  # noqa: BLE001 - handed to the flow to decide
            value, error = None, exc
