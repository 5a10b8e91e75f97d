"""One ``responses.create`` call as a generator of effects (pure): every decision, written once; `drive` and
`adrive` perform the effects, and what a send raised comes back in."""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Awaitable, Callable, Generator, Iterator, Mapping, Sequence
from typing import Any, Generic, TypeVar

import attrs

from ._canonical import ItemError
from ._hashing import Memo, extend, fingerprint_history, fingerprint_items, prefix_hashes
from ._mode import Mode
from ._plan import Plan, Reason, RecentViews, answers, choose, with_sizes
from ._properties import matches
from ._refusal import classify, resendable
from ._request import Request, chained_body
from ._seal import authentic as _authentic
from .stores._base import Anchor


R = TypeVar("R")


class Unavailable:
    """The answer to a store effect the store could not perform (`UNAVAILABLE`)."""

    def __repr__(self) -> str:
        return "UNAVAILABLE"


UNAVAILABLE = Unavailable()
#: The effect that writes the anchors recorded (`Tracker.flush`), answered with None.
FLUSH = object()


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
    """What is needed to record the response to one request: *base* is ``h(n)``, the digest of the *count*
    items sent; *hashes* ``[h(1), …, h(n)]`` if known (to explain fallbacks); *expires_at* the expiry of the
    chain it hangs from, which the response cannot outlive; *parent* the response chained from."""

    scope: str
    base: bytes
    count: int
    hashes: Sequence[bytes] | None = None
    skip_reason: Reason | None = None
    expires_at: float | None = None
    properties: bytes = b""
    parent: str | None = None


@attrs.frozen
class Send:
    """Call the SDK with *body* (keyword arguments); record the response with *ticket*. With *anchor_id*
    (chained), a refusal that shows as a stream's first event is raised into the flow like an HTTP one."""

    body: Mapping[str, Any]
    ticket: Ticket | None
    anchor_id: str | None = None


@attrs.frozen
class Planned:
    """A plan was made, in *seconds* (None when planning was cut short), for a history of *hashes*."""

    plan: Plan
    seconds: float | None
    hashes: Sequence[bytes] = ()


@attrs.frozen
class FellBack:
    """A chained request was refused (stale anchor, duplicate item, or ZDR: chaining stops in the scope)."""

    reason: Reason
    anchor: Anchor


@attrs.frozen
class Log:
    """Emit the structlog event *event* at *level* with *fields*."""

    level: str
    event: str
    fields: Mapping[str, Any] = attrs.field(factory=dict)


Flow = Generator[Find | Get | Evict | Send | Planned | FellBack | Log, Any, Any]


@attrs.frozen
class CallContext:
    """Everything the flow knows about its call besides the request (data only): *root* is the scope's
    ``h(0)``; with *mac_key*, anchors read without a valid MAC are absent; *local_store*: the store answers in
    this process (see `plan_history`)."""

    scope_key: str
    root: bytes
    mode: Mode = Mode.CHAINED
    zdr_disabled: bool = False
    chain_dropped: bool = False
    now: float = attrs.field(factory=time.time)
    memo: Memo | None = None
    recent: RecentViews | None = None
    timer: Callable[[], float] = time.perf_counter
    mac_key: bytes | None = None
    local_store: bool = False

    def authentic(self, anchor: Anchor) -> bool:
        """Whether *anchor*, read from this context's scope, carries a valid MAC."""
        return _authentic(anchor, self.scope_key, self.mac_key)


@attrs.define(eq=False)
class CallState:
    """What the performer of one call's effects keeps: its context, its plan, its send and answer."""

    context: CallContext
    transport: str  # ``http`` or ``websocket``
    plan: Plan | None = None
    seconds: float | None = None
    refused: Reason | None = None
    published: bool = False  # the outcome was published (once, when the decision is final)
    answered: bool = False
    response: Any = None
    sdk_error: BaseException | None = None


@attrs.frozen
class History:
    """A history fingerprinted (with each item's JSON size) and hashed from the context's root; *proven*:
    how many leading items are the memo's last history, proven unchanged (0 without a memo)."""

    fingerprints: list[bytes]
    sizes: list[int]
    has_model: bool
    hashes: list[bytes]
    proven: int = 0


def read_history(ctx: CallContext, items: Sequence[object]) -> History:
    """Fingerprint *items* and hash their prefixes from the context's root (`ItemError`: not an item)."""
    memo = ctx.memo
    if memo is None:
        fps, sizes, has_model = fingerprint_items(items)
        return History(fps, sizes, has_model, prefix_hashes(ctx.root, fps))
    fps, sizes, has_model, proven = fingerprint_history(items, memo)
    return History(fps, sizes, has_model, memo.prefix_hashes(ctx.root, fps), proven)


def plan_history(
    ctx: CallContext, history: History, *, properties: bytes = b""
) -> Generator[Find, Any, Plan]:
    """Plan a request for *history* made with the carried-over *properties*: look the candidates up, choose.
    With a store in this process, a history extending the memo's last one first looks up only the views after
    its proven prefix, where a loop chains from: the plan is the same."""
    hashes = history.hashes
    n = len(hashes)
    if ctx.zdr_disabled or ctx.chain_dropped:
        reason = Reason.ZDR if ctx.zdr_disabled else Reason.CHAIN_DROPPED
        return with_sizes(Plan(reason, total=n), history.sizes)
    authentic = ctx.authentic if ctx.mac_key is not None else None
    pick = functools.partial(choose, hashes, now=ctx.now, properties=properties, authentic=authentic)
    start = history.proven if ctx.local_store else 0
    if 1 < start < n:
        # h(n-1) down to h(start), longest first (hashes[i - 1] is h(i), the view of items[:i])
        found = yield Find(ctx.scope_key, hashes[n - 2 : start - 2 : -1])
        if not isinstance(found, Unavailable):
            plan = pick(found, has_model_items=True, shortest=start)  # taken only if it has an anchor
            if plan.anchor is not None:
                return with_sizes(plan, history.sizes)
    # Every view that could be an anchor (h(1) to h(n-1)), longest first, and the whole history's (h(n)),
    # which tells a history with nothing new from a diverged one.
    found = (yield Find(ctx.scope_key, hashes[::-1])) if n >= 2 else {}
    if isinstance(found, Unavailable):
        return with_sizes(Plan(Reason.STORE_UNAVAILABLE, total=n), history.sizes)
    return with_sizes(pick(found, has_model_items=history.has_model, recent=ctx.recent), history.sizes)


def call_flow(ctx: CallContext, request: Request) -> Flow:
    """The decisions for one call: plan its history, send the delta after the plan's anchor (or all of it:
    shadow mode, no anchor, an item that cannot be read), and recover if the anchor is refused."""
    if request.caller_managed:
        return (yield from _caller_managed(ctx, request))
    n = len(request.items)
    started = ctx.timer()
    try:
        history = read_history(ctx, request.items)
    except ItemError as error:
        yield Log("warning", "anchortrack.item_unsupported", {"error": str(error), "fallback": "stateless"})
        yield from _planned(ctx, Plan(Reason.INTERNAL_ERROR, total=n))
        return (yield Send(request.body, None))
    hashes = history.hashes
    plan = yield from plan_history(ctx, history, properties=request.properties)
    yield from _planned(ctx, plan, ctx.timer() - started, hashes)
    base = hashes[-1] if hashes else ctx.root
    skip = None if request.store else Reason.STORE_FALSE
    ticket = Ticket(ctx.scope_key, base, n, hashes, skip, properties=request.properties)
    anchor = plan.anchor
    if ctx.mode is Mode.SHADOW or anchor is None:
        return (yield Send(request.body, ticket))
    try:
        chained = attrs.evolve(ticket, expires_at=anchor.expires_at, parent=anchor.response_id)
        body = chained_body(request, plan.skip, anchor.response_id)
        return (yield Send(body, chained, anchor_id=anchor.response_id))
    except Exception as error:  # noqa: BLE001 - what the send raised, thrown in here by `drive` / `relay`
        return (yield from refused_flow(ctx, request, anchor, ticket, error))


def refused_flow(
    ctx: CallContext, request: Request, anchor: Anchor, ticket: Ticket, error: Exception
) -> Flow:
    """A request chained to *anchor* was refused with *error*: evict a stale anchor, stop chaining in the
    scope (ZDR) or keep the anchor (a duplicate item, a dropped chain), and resend in full once with *ticket*.
    Another client error is resent in full once too: the caller gets what that request gets (an error, the
    anchor kept; a response, the anchor evicted); any other error is raised again, unchanged."""
    refusal = classify(error, anchor.response_id)
    if refusal is None:
        if not resendable(error):
            raise error
        return (yield from _unrecognised(ctx, request, anchor, ticket, error))
    fields = {"reason": refusal.value, "anchor_id": anchor.response_id}
    if refusal is Reason.STALE_ANCHOR:
        yield Evict(ctx.scope_key, anchor.response_id)
    yield FellBack(refusal, anchor)
    if refusal is Reason.ZDR:
        yield Log("warning", "anchortrack.scope_disabled", {**fields, "scope": ctx.scope_key})
    elif refusal is Reason.STALE_ANCHOR:
        yield Log("warning", "anchortrack.anchor_evicted", fields)
    else:
        yield Log("warning", "anchortrack.anchor_refused", fields)
    return (yield Send(request.body, ticket))


def _unrecognised(
    ctx: CallContext, request: Request, anchor: Anchor, ticket: Ticket, error: Exception
) -> Flow:
    """A chained request refused with a client error `classify` does not know: resend in full, once."""
    status = getattr(error, "status_code", None)
    response = yield Send(request.body, ticket)  # its error is the caller's, as the unwrapped client's
    yield Evict(ctx.scope_key, anchor.response_id)
    yield FellBack(Reason.CHAIN_REFUSED, anchor)
    fields = {"reason": Reason.CHAIN_REFUSED.value, "anchor_id": anchor.response_id, "status": status}
    yield Log("warning", "anchortrack.anchor_evicted", fields)
    return response


def _caller_managed(ctx: CallContext, request: Request) -> Flow:
    """Send exactly as given; record the child if the parent's view is known."""
    parent_id = request.previous_response_id
    parent: Any = None
    if parent_id is not None and not request.conversation and not ctx.zdr_disabled:
        parent = yield Get(ctx.scope_key, parent_id)
    rejected: tuple[str, ...] = ()
    fps = None
    if isinstance(parent, Anchor):
        if not (answers(parent, response_id=parent_id) and ctx.authentic(parent)):
            rejected = (parent.response_id,)
        else:
            with contextlib.suppress(ItemError):
                fps = fingerprint_items(request.items, ctx.memo)[0]
    ticket = None
    if fps is not None:
        held = parent.count
        if 0 < held <= len(fps) and prefix_hashes(ctx.root, fps[:held])[-1] == parent.view:
            # The request repeats what its own previous_response_id holds (400 Duplicate item).
            event = "anchortrack.hint_duplicate_items"
            fields = {"previous_response_id": parent_id, "items_held": held, "hint": HINTS[event]}
            yield Log("warning", event, fields)
        skip = None if request.store else Reason.STORE_FALSE
        if skip is None and not matches(parent.properties, request.properties):
            # A server may have carried the parent's properties over to
            # this response: what it was made with is not what was sent.
            skip = Reason.PROPERTIES_CHANGED
        base, n = extend(parent.view, fps), parent.count + len(fps)
        ticket = Ticket(
            ctx.scope_key, base, n, skip_reason=skip, expires_at=parent.expires_at,
            properties=request.properties, parent=parent_id,
        )  # fmt: skip
    yield from _planned(ctx, Plan(Reason.CALLER_MANAGED, total=len(request.items), rejected=rejected))
    if parent_id is not None:
        event = "anchortrack.hint_caller_managed"
        yield Log("warning", event, {"previous_response_id": parent_id, "hint": HINTS[event]})
    if ticket is None:
        fields = {"previous_response_id": parent_id, "conversation": request.conversation}
        yield Log("debug", "anchortrack.parent_unknown", fields)
    return (yield Send(request.body, ticket))


#: What to do about each hint (`anchortrack.hint_*` events, logged once per tracker).
# fmt: off
HINTS = {
    "anchortrack.hint_duplicate_items":
        "previous_response_id already holds these items: pass only the items after that response (or leave "
        "previous_response_id out and let anchortrack chain)",
    "anchortrack.hint_caller_managed":
        "the caller set previous_response_id (a framework's own chaining does), so anchortrack sends such "
        "calls as given and stands aside: to let anchortrack chain, pass the whole history as input and "
        "leave previous_response_id out",
    "anchortrack.hint_output_missing":
        "the history grows but never holds a response's output: append it (history += response.output) so "
        "the next call can chain",
}
# fmt: on


def _planned(
    ctx: CallContext, plan: Plan, seconds: float | None = None, hashes: Sequence[bytes] = ()
) -> Flow:
    """Report *plan* (its event is the call's outcome's, once published), and rejected anchors."""
    yield Planned(plan, seconds, hashes)
    if plan.rejected:
        fields = {"rejected": len(plan.rejected), "anchor_ids": list(plan.rejected), "scope": ctx.scope_key}
        yield Log("warning", "anchortrack.anchor_rejected", fields)


# -- drivers: the only places where sync and async differ in the flow ---------


class _Steps(Generic[R]):
    """A flow's effects, one at a time: `answer` one, or raise inside ``with steps:`` (into the flow)."""

    def __init__(self, flow: Generator[Any, Any, R]) -> None:
        self._flow = flow
        self._resume: Callable[[Any], Any] = flow.send
        self._answer: Any = None

    def __iter__(self) -> Iterator[Any]:
        try:
            while True:
                yield self._resume(self._answer)
        except StopIteration as stop:
            self.result: R = stop.value

    def answer(self, value: Any) -> None:
        self._resume, self._answer = self._flow.send, value

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, error: BaseException | None, trace: object) -> bool:
        if not isinstance(error, Exception):
            return False
        self._resume, self._answer = self._flow.throw, error
        return True


def drive(flow: Generator[Any, Any, R], run: Callable[[Any], Any]) -> R:
    """Run *flow* to completion, performing each effect with *run* (sync); what *run* raises goes in."""
    steps = _Steps(flow)
    for effect in steps:
        with steps:
            steps.answer(run(effect))
    return steps.result


async def adrive(flow: Generator[Any, Any, R], run: Callable[[Any], Awaitable[Any]]) -> R:
    """Run *flow* to completion, performing each effect with *run* (async): the twin of `drive`."""
    steps = _Steps(flow)
    for effect in steps:
        with steps:
            steps.answer(await run(effect))
    return steps.result


def relay(
    flow: Generator[Any, Any, R], step: Callable[[Any], Generator[Any, Any, Any]]
) -> Generator[Any, Any, R]:
    """Run *flow* inside a flow: *step* turns each effect into a sub-flow, whose outcome goes back in."""
    steps = _Steps(flow)
    for effect in steps:
        with steps:
            steps.answer((yield from step(effect)))
    return steps.result
