"""
The pure core as functions, for people building their own engines.

``plan_request`` answers "what would anchortrack send for this history?" and
``record_response`` records a response so later histories can chain from it.
Both take the scope and store explicitly and do no network I/O besides the
store.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from ._hashing import Scope, extend, fingerprint_items, prefix_hashes
from ._plan import Plan, candidates, choose, unrecordable, with_sizes
from .stores._base import Anchor, AnchorStore


def plan_request(history: Sequence[Any], *, scope: Scope, store: AnchorStore) -> Plan:
    """
    Plan a request for *history* (SDK models, dicts or a string's items).

    Returns:
        The `Plan`: chain from ``plan.anchor`` sending ``history[plan.skip:]``,
        or send everything when ``plan.anchor`` is None.
    """
    fps, sizes, has_model = fingerprint_items(list(history))
    hashes = prefix_hashes(scope.root(store.secret_key), fps)
    found = store.find(scope.key, candidates(hashes)) if len(hashes) > 1 else {}
    plan = choose(hashes, found, time.time(), has_model_items=has_model)
    return with_sizes(plan, sizes)


def record_response(
    history: Sequence[Any],
    response: Any,
    *,
    scope: Scope,
    store: AnchorStore,
    record_incomplete: bool = False,
) -> Anchor | None:
    """
    Record *response*, the answer to a request whose full context was *history*.

    Returns:
        The recorded anchor, or None when the response must not be an anchor
        (not completed, or ``store`` false).
    """
    if unrecordable(response, record_incomplete=record_incomplete) is not None:
        return None
    fps, _, _ = fingerprint_items(list(history))
    outputs, _, _ = fingerprint_items(list(response.output))
    view = extend(scope.root(store.secret_key), [*fps, *outputs])
    now = time.time()
    anchor = Anchor(
        view=view,
        response_id=response.id,
        count=len(fps) + len(outputs),
        created_at=now,
        expires_at=now + store.ttl,
    )
    store.put(scope.key, anchor)
    return anchor
