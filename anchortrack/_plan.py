"""
Choosing the anchor (pure).

The anchor is the recorded view that is the *longest* prefix of the caller's
history while leaving at least one item to send.
Nothing here does I/O: the caller looks the candidate views up in a store and
hands the answers in.
"""

from __future__ import annotations

import enum
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence

import attrs

from ._stats import sizes_total
from .stores._base import Anchor


class Reason(str, enum.Enum):
    """
    Why a request went out the way it did, or why a response was not recorded.

    Members are plain strings, so ``reason == "prefix_diverged"`` works too.
    """

    #: Sent ``previous_response_id`` plus the delta.
    CHAINED = "chained"
    #: The history holds no model output yet (a first turn).
    NO_HISTORY = "no_history"
    #: The history has model output, but no recorded view is a prefix of it.
    PREFIX_DIVERGED = "prefix_diverged"
    #: Mode ``off`` (kill switch): pure passthrough.
    MODE_OFF = "mode_off"
    #: The caller passed ``previous_response_id`` or ``conversation`` itself.
    CALLER_MANAGED = "caller_managed"
    #: The server forgot the anchor; it was evicted and the call resent in full.
    STALE_ANCHOR = "stale_anchor"
    #: The organization refuses ``previous_response_id`` (zero data retention).
    ZDR = "zdr"
    #: The anchor store failed; the request went out in full.
    STORE_UNAVAILABLE = "store_unavailable"
    #: An item or state anchortrack could not handle; the request went out in full.
    INTERNAL_ERROR = "internal_error"
    #: Not recorded: the request said ``store=false``.
    STORE_FALSE = "store_false"
    #: Not recorded: the response did not complete (failed, cancelled, queued,
    #: in progress, or incomplete without ``record_incomplete``).
    NOT_COMPLETED = "not_completed"
    #: Not recorded: the stream ended or was abandoned before its terminal event.
    STREAM_ABANDONED = "stream_abandoned"
    #: Not recorded: a caller-managed parent whose view is unknown.
    UNKNOWN_PARENT = "unknown_parent"


@attrs.frozen
class Plan:
    """
    What to send for one request.

    Attributes:
        reason: `Reason.CHAINED`, or why the request goes out stateless.
        total: How many items the caller's history holds.
        skip: How many leading items the anchor covers (0 when stateless).
        anchor: The anchor to chain from, if any.
        diverged_at: For `Reason.PREFIX_DIVERGED`, the index of the first item
            that differs from the closest view this process has seen, if known.
        bytes_stateless: Estimated JSON bytes of the whole history.
        bytes_planned: Estimated JSON bytes of the items this plan sends.
    """

    reason: Reason
    total: int
    skip: int = 0
    anchor: Anchor | None = None
    diverged_at: int | None = None
    bytes_stateless: int = 0
    bytes_planned: int = 0

    @property
    def chained(self) -> bool:
        """Whether the request chains from an anchor."""
        return self.anchor is not None

    @property
    def sent(self) -> int:
        """How many items go out in ``input``."""
        return self.total - self.skip


def unrecordable(response: object, *, record_incomplete: bool) -> Reason | None:
    """
    Why *response* must not become an anchor, or None if it may.

    Only a completed response (optionally an incomplete one) with an id, that
    was not created with ``store: false``, is an anchor.
    """
    if getattr(response, "store", None) is False:
        return Reason.STORE_FALSE
    status = getattr(response, "status", None)
    if not (status == "completed" or (status == "incomplete" and record_incomplete)):
        return Reason.NOT_COMPLETED
    if not isinstance(getattr(response, "id", None), str):
        return Reason.NOT_COMPLETED
    return None


def with_sizes(plan: Plan, sizes: Sequence[int]) -> Plan:
    """Return *plan* with its byte estimates, from the canonical *sizes* of the history."""
    stateless = sizes_total(sizes)
    return attrs.evolve(
        plan,
        bytes_stateless=stateless,
        bytes_planned=sizes_total(sizes[plan.skip :]) if plan.anchor else stateless,
    )


def candidates(hashes: Sequence[bytes]) -> list[bytes]:
    """Return the prefix hashes that could be anchors, longest first (``i < n``)."""
    return list(reversed(hashes[:-1]))


def choose(
    hashes: Sequence[bytes],
    found: Mapping[bytes, Anchor],
    now: float,
    *,
    has_model_items: bool,
    recent: RecentViews | None = None,
) -> Plan:
    """
    Pick the longest usable anchor for a history whose prefix hashes are *hashes*.

    Args:
        hashes: ``[h(1), …, h(n)]`` of the caller's history.
        found: Anchors the store returned for (some of) those hashes.
        now: The current Unix time, to reject expired anchors.
        has_model_items: Whether the history holds model output at all (to
            tell a first turn from a diverged history).
        recent: Views this process recorded, to locate a divergence.
    """
    n = len(hashes)
    if found:
        for i in range(n - 1, 0, -1):
            anchor = found.get(hashes[i - 1])
            if anchor is not None and anchor.count == i and anchor.is_live(now):
                return Plan(Reason.CHAINED, total=n, skip=i, anchor=anchor)
    if not has_model_items:
        return Plan(Reason.NO_HISTORY, total=n)
    diverged = recent.diverged_at(hashes) if recent is not None else None
    return Plan(Reason.PREFIX_DIVERGED, total=n, diverged_at=diverged)


class RecentViews:
    """
    The prefix hashes of views this process recorded lately (bounded, in memory).

    Only used to explain a fallback: where does the history first differ from
    the closest view we know?
    Holds digests only.
    """

    def __init__(self, max_views: int = 128, max_hashes: int = 262_144) -> None:
        self._views: OrderedDict[bytes, tuple[bytes, ...]] = OrderedDict()
        self._max_views = max_views
        self._max_hashes = max_hashes
        self._size = 0
        self._lock = threading.Lock()

    def add(self, hashes: Sequence[bytes]) -> None:
        """Remember a recorded view by its prefix hashes ``[h(1), …, h(m)]``."""
        if not hashes or len(hashes) > self._max_hashes:
            return
        key = hashes[-1]
        value = tuple(hashes)
        with self._lock:
            old = self._views.pop(key, None)
            if old is not None:
                self._size -= len(old)
            self._views[key] = value
            self._size += len(value)
            while len(self._views) > self._max_views or self._size > self._max_hashes:
                _, dropped = self._views.popitem(last=False)
                self._size -= len(dropped)

    def diverged_at(self, hashes: Sequence[bytes]) -> int | None:
        """
        Return the index of the first item of *hashes* that leaves the closest view.

        ``None`` when no remembered view shares even the first item.
        """
        with self._lock:
            views = list(self._views.values())
        best = 0
        for view in views:
            best = max(best, _common_prefix(view, hashes))
        return best if best > 0 else None


def _common_prefix(a: Sequence[bytes], b: Sequence[bytes]) -> int:
    """Length of the common prefix of two prefix-hash lists (binary search).

    Prefix hashes chain, so equality at ``i`` implies equality before ``i``.
    """
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[mid - 1] == b[mid - 1]:
            lo = mid
        else:
            hi = mid - 1
    return lo
