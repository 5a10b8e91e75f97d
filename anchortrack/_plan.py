"""Choosing the anchor, and building the anchor a response becomes (pure: no network, store or SDK calls). The
anchor is the recorded view that is the *longest* prefix of the caller's history while leaving at least one
item to send."""

from __future__ import annotations

import enum
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from ._canonical import as_received
from ._fork import ForkSafeLock
from ._hashing import Memo, fingerprint_items, prefix_hashes
from ._properties import ANY, announced, matches
from ._seal import seal
from .stores._base import Anchor


class Reason(str, enum.Enum):
    """Why a request went out the way it did, or why a response was not recorded.

    Members are plain strings, so ``reason == "prefix_diverged"`` works too.
    `REASON_TEXT` says in one line what each one means.
    """

    CHAINED = "chained"
    NO_HISTORY = "no_history"
    PREFIX_DIVERGED = "prefix_diverged"
    UNKNOWN_HISTORY = "unknown_history"
    NOTHING_NEW = "nothing_new"
    MODE_OFF = "mode_off"
    CALLER_MANAGED = "caller_managed"
    STALE_ANCHOR = "stale_anchor"
    DUPLICATE_ITEM = "duplicate_item"
    ZDR = "zdr"
    STORE_UNAVAILABLE = "store_unavailable"
    INTERNAL_ERROR = "internal_error"
    STORE_FALSE = "store_false"
    NOT_COMPLETED = "not_completed"
    STREAM_ABANDONED = "stream_abandoned"
    PROPERTIES_CHANGED = "properties_changed"
    WEBSOCKET_DROPPED = "websocket_reconnect_dropped"
    CHAIN_REFUSED = "chain_refused"
    CHAIN_DROPPED = "chain_dropped"


# fmt: off
#: What each `Reason` means, in one line.
REASON_TEXT: Mapping[Reason, str] = {
    Reason.CHAINED: "a recorded response's view is a prefix of the history",
    Reason.NO_HISTORY: "the history holds no model output yet, so no recorded response can be its prefix",
    Reason.PREFIX_DIVERGED: "no recorded response's view is a prefix of the history: an earlier item was "
                            "edited, removed or inserted (or the anchor of a recorded prefix is gone)",
    Reason.UNKNOWN_HISTORY: "no response this process recorded or the store holds shares even the first "
                            "item of the history: the process restarted with a memory store, the anchors "
                            "are in another store or scope, or the first item changed",
    Reason.NOTHING_NEW: "the history ends exactly where a recorded response's view ends: a chained request "
                        "carries at least one new item, and no shorter view is a prefix",
    Reason.MODE_OFF: "ANCHORTRACK_MODE=off: requests pass through untouched",
    Reason.CALLER_MANAGED: "the caller set previous_response_id or conversation, so the request is sent as "
                           "given",
    Reason.STALE_ANCHOR: "the server no longer had the anchor: it was evicted and the call resent in full, "
                         "once",
    Reason.DUPLICATE_ITEM: "the delta named an item (by id) that the anchor's context already holds, which "
                           "the server refuses as a duplicate: the call was resent in full, once, and the "
                           "anchor kept",
    Reason.ZDR: "the organization refuses previous_response_id (zero data retention): chaining stopped in "
                "this scope",
    Reason.STORE_UNAVAILABLE: "the anchor store did not answer, so the request went out in full",
    Reason.INTERNAL_ERROR: "an item anchortrack cannot fingerprint, so the request went out as given",
    Reason.STORE_FALSE: "the request said store=false, so its response cannot be an anchor",
    Reason.NOT_COMPLETED: "the response did not complete (failed, cancelled, queued, in progress, or "
                          "incomplete without record_incomplete), so it cannot be an anchor",
    Reason.STREAM_ABANDONED: "the stream ended before its terminal event, so the response was not recorded",
    Reason.PROPERTIES_CHANGED: "the recorded responses that hold a prefix of the history were made with "
                               "other tools, tool_choice, text, reasoning or truncation settings, which "
                               "some servers carry over a chain",
    Reason.WEBSOCKET_DROPPED: "the WebSocket closed or reconnected before the response's terminal event, so "
                              "it was not recorded",
    Reason.CHAIN_REFUSED: "the server refused the chained request with an error anchortrack does not "
                          "recognise, and the same call in full succeeded: the anchor was evicted",
    Reason.CHAIN_DROPPED: "the server answered a chained request without the anchor's context (it ignored "
                          "previous_response_id): chaining stopped for that server in this scope",
}
# fmt: on


@attrs.frozen
class Plan:
    """What to send for one request.

    Attributes:
        reason: `Reason.CHAINED`, or why the request goes out stateless.
        total: How many items the caller's history holds.
        skip: How many leading items the anchor covers (0 when stateless).
        anchor: The anchor to chain from, if any.
        diverged_at: For `Reason.PREFIX_DIVERGED`, the index of the first item
            that differs from the closest view this process has seen, if known
            (None when that whole view is still a prefix: its anchor is gone).
        bytes_stateless: Estimated JSON bytes of the whole history.
        bytes_planned: Estimated JSON bytes of the items this plan sends.
        rejected: The response ids of anchors the store returned whose MAC
            did not verify (so they were treated as absent).
    """

    reason: Reason
    total: int
    skip: int = 0
    anchor: Anchor | None = None
    diverged_at: int | None = None
    bytes_stateless: int = 0
    bytes_planned: int = 0
    rejected: tuple[str, ...] = ()

    def __repr__(self) -> str:
        if self.anchor is not None:
            head = f"chained from {self.anchor.response_id}"
        elif self.reason in (Reason.CALLER_MANAGED, Reason.MODE_OFF):
            head = f"passthrough ({self.reason.value})"
        else:
            head = f"stateless ({self.reason.value})"
        text = f"<Plan {head}: send {self.sent} of {self.total} items"
        if self.bytes_stateless:
            text += f", ~{self.bytes_planned:,} of ~{self.bytes_stateless:,} bytes"
        if self.diverged_at is not None:
            text += f", diverged at item {self.diverged_at}"
        if self.rejected:
            text += f", {len(self.rejected)} anchor(s) rejected"
        return text + ">"

    @property
    def chained(self) -> bool:
        """Whether the request chains from an anchor."""
        return self.anchor is not None

    @property
    def sent(self) -> int:
        """How many items go out in ``input``."""
        return self.total - self.skip


_ABSENT = object()


def _attribute(obj: object, name: str) -> Any:
    """``getattr(obj, name, None)``, also for a model's extra field (``store`` is one), without raising."""
    fields = getattr(obj, "__dict__", None)
    if fields is not None and name in fields:
        return fields[name]
    extra = getattr(obj, "__pydantic_extra__", _ABSENT)
    if extra is _ABSENT:
        return getattr(obj, name, None)
    return extra.get(name) if isinstance(extra, dict) else None


def unrecordable(
    response: object, *, record_incomplete: bool, connection_local: bool = False
) -> Reason | None:
    """Why *response* must not become an anchor (not completed, no id, ``store: false``), or None if it may. A
    *connection_local* one (kept in a WebSocket's memory) may have ``store: false``."""
    if _attribute(response, "store") is False and not connection_local:
        return Reason.STORE_FALSE
    status = getattr(response, "status", None)
    completed = status == "completed" or (status == "incomplete" and record_incomplete)
    return None if completed and isinstance(getattr(response, "id", None), str) else Reason.NOT_COMPLETED


def new_anchor(
    response_id: str,
    *,
    base: bytes,
    count: int,
    hashes: Sequence[bytes],
    now: float,
    ttl: float,
    chain_expires_at: float | None = None,
    properties: bytes = b"",
    scope: str = "",
    mac_key: bytes | None = None,
    parent: str | None = None,
) -> Anchor:
    """The anchor a recorded response becomes, sealed for *scope* with *mac_key*: its view continues *base*
    (of *count* items) with *hashes*; never outliving *chain_expires_at* (the server resolves ancestors)."""
    anchor = Anchor(
        view=hashes[-1] if hashes else base,
        response_id=response_id,
        count=count + len(hashes),
        created_at=now,
        expires_at=now + ttl if chain_expires_at is None else min(now + ttl, chain_expires_at),
        properties=properties,
        parent=parent,
    )
    return seal(anchor, scope, mac_key)


def anchor_of(
    response: Any,
    output: Sequence[Any],
    *,
    base: bytes,
    properties: bytes,
    memo: Memo | None = None,
    **rest: Any,
) -> tuple[Anchor, list[bytes]]:
    """The anchor *response* becomes (`new_anchor`, with *rest*) and its output's prefix hashes: its *output*
    in the server's own form (which a chain replays) continues *base*; a response that announces its
    properties chains whatever a request carries (`ANY`)."""
    hashes = prefix_hashes(base, fingerprint_items([as_received(item) for item in output], memo)[0])
    properties = ANY if announced(response) else properties
    return new_anchor(response.id, base=base, hashes=hashes, properties=properties, **rest), hashes


def answers(anchor: Anchor, *, view: bytes | None = None, response_id: str | None = None) -> bool:
    """Whether *anchor*'s own view and id are those asked for (a MAC alone passes another chain's copy)."""
    if view is not None and anchor.view != view:
        return False
    return response_id is None or anchor.response_id == response_id


def sizes_total(sizes: Sequence[int]) -> int:
    """Estimated JSON bytes of a list of items of the given canonical sizes."""
    return sum(sizes) + max(len(sizes) - 1, 0) + 2


def with_sizes(plan: Plan, sizes: Sequence[int]) -> Plan:
    """Return *plan* with its byte estimates, from the canonical *sizes* of the history."""
    stateless = sizes_total(sizes)
    planned = sizes_total(sizes[plan.skip :]) if plan.anchor else stateless
    # Built directly: attrs.evolve costs a few microseconds a plan, and this runs on every one.
    return Plan(
        plan.reason, plan.total, plan.skip, plan.anchor, plan.diverged_at, stateless, planned, plan.rejected
    )


def holds(
    anchor: Anchor, view: bytes, count: int, now: float, authentic: Callable[[Anchor], bool] | None
) -> bool | None:
    """Whether *anchor*, found for the prefix *view* of *count* items, records it: live, its own view, of
    that count, authentic (its MAC). None: live, but another view's or not authentic (rejected)."""
    if not anchor.is_live(now):
        return False
    if not answers(anchor, view=view) or (authentic is not None and not authentic(anchor)):
        return None
    return anchor.count == count


def choose(
    hashes: Sequence[bytes],
    found: Mapping[bytes, Anchor],
    now: float,
    *,
    has_model_items: bool,
    recent: RecentViews | None = None,
    properties: bytes = b"",
    authentic: Callable[[Anchor], bool] | None = None,
    shortest: int = 1,
) -> Plan:
    """Pick the longest usable anchor among *found* for a history of prefix hashes *hashes*: its view is that
    prefix (same digest and count), live at *now*, made with the same carried-over *properties*, *authentic*
    (its MAC), and leaving at least one item to send (else `Reason.NOTHING_NEW`). One found under a view not
    its own, or not authentic, is absent and listed in ``Plan.rejected``. *has_model_items* tells a first turn
    from a diverged history; *recent* (a tracker's memory) locates a divergence, and tells it from a history
    nothing known shares a first item with (`Reason.UNKNOWN_HISTORY`); *shortest*: the fewest items looked at.
    """
    n = len(hashes)
    rejected: list[str] = []
    changed = exact = False
    if found:
        for i in range(n, max(shortest, 1) - 1, -1):  # longest first
            view = hashes[i - 1]  # h(i), the view of the history's first i items
            anchor = found.get(view)
            if anchor is None:
                continue
            usable = holds(anchor, view, i, now, authentic)
            if not usable:
                if usable is None:
                    rejected.append(anchor.response_id)
                continue
            if i == n:  # the whole history: nothing would be left to send after it
                exact = True
                continue
            if not matches(anchor.properties, properties):
                changed = True
                continue
            return Plan(Reason.CHAINED, total=n, skip=i, anchor=anchor, rejected=tuple(rejected))
    if changed:
        return Plan(Reason.PROPERTIES_CHANGED, total=n, rejected=tuple(rejected))
    if exact:
        return Plan(Reason.NOTHING_NEW, total=n, rejected=tuple(rejected))
    if not has_model_items:
        return Plan(Reason.NO_HISTORY, total=n, rejected=tuple(rejected))
    if recent is None:  # no memory of what was recorded: an edit and an unknown history look alike
        return Plan(Reason.PREFIX_DIVERGED, total=n, rejected=tuple(rejected))
    best, whole = recent.closest(hashes)
    if not best and not found:  # nothing known shares even the first item: not an edit anyone saw
        return Plan(Reason.UNKNOWN_HISTORY, total=n, rejected=tuple(rejected))
    diverged = best if 0 < best < n and not whole else None
    return Plan(Reason.PREFIX_DIVERGED, total=n, diverged_at=diverged, rejected=tuple(rejected))


class RecentViews:
    """The prefix hashes of views recorded lately (bounded, digests only), to locate a divergence."""

    def __init__(self, max_views: int = 128, max_hashes: int = 262_144) -> None:
        # A view is the two sequences it was given (never changed after), not copied.
        self._views: OrderedDict[bytes, tuple[Sequence[bytes], Sequence[bytes]]] = OrderedDict()
        self._max_views, self._max_hashes, self._size = max_views, max_hashes, 0
        self._lock = ForkSafeLock()

    def add(self, hashes: Sequence[bytes], more: Sequence[bytes] = ()) -> None:
        """Remember a recorded view by its prefix hashes ``[h(1), …, h(m)]`` (*hashes* then *more*)."""
        size = len(hashes) + len(more)
        if not size or size > self._max_hashes:
            return
        key = more[-1] if more else hashes[-1]
        with self._lock:
            old = self._views.pop(key, None)
            if old is not None:
                self._size -= len(old[0]) + len(old[1])
            self._views[key] = (hashes, more)
            self._size += size
            while len(self._views) > self._max_views or self._size > self._max_hashes:
                _, (first, rest) = self._views.popitem(last=False)
                self._size -= len(first) + len(rest)

    def diverged_at(self, hashes: Sequence[bytes]) -> int | None:
        """The index of the first item of *hashes* that leaves the closest view; None: not even the first
        item is in a view, or the closest view is a whole prefix of the history (its anchor is gone)."""
        best, whole = self.closest(hashes)
        return best if 0 < best < len(hashes) and not whole else None

    def closest(self, hashes: Sequence[bytes]) -> tuple[int, bool]:
        """How many leading items of *hashes* the closest view shares (0: not even the first), and whether
        that view is a whole prefix of the history."""
        with self._lock:
            views = list(self._views.values())
        best, whole = 0, False
        for first, rest in views:
            view = [*first, *rest]
            m = len(view)
            if m <= len(hashes) and view[-1] == hashes[m - 1]:  # the whole view is a prefix
                if m >= best:
                    best, whole = m, True
                continue
            # The longest common prefix, by binary search: prefix hashes equal at i are equal before it.
            lo, hi = best, min(m, len(hashes))
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if view[mid - 1] == hashes[mid - 1]:
                    lo = mid
                else:
                    hi = mid - 1
            if lo > best:
                best, whole = lo, False
        return best, whole
