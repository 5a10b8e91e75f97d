"""The do-it-yourself API for people writing their own Responses loop: the wrapped client's planning and
anchor builder, with the scope and the store passed in (nothing else is shared or remembered)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from ._flow import CallContext, drive, plan_history, read_history
from ._hashing import Scope, fingerprint_items, prefix_hashes
from ._plan import Plan, RecentViews, anchor_of, unrecordable
from ._properties import properties_digest
from ._seal import mac_key
from .stores._base import Anchor, AnchorStore


def plan_request(
    history: Sequence[Any], *, scope: Scope, store: AnchorStore, params: Mapping[str, Any] | None = None
) -> Plan:
    """Plan a request for *history* (SDK models, dicts or a string's items).

    Args:
        history: The full history the request is for.
        scope: The scope anchors are recorded under.
        store: The store they are in.
        params: The request's other ``create`` arguments (``tools``, ``tool_choice``, ``text``, …): only
            anchors recorded with the same carried-over properties are chosen. Pass the same to
            `record_response`.

    Returns:
        The `Plan`: chain from ``plan.anchor`` sending ``history[plan.skip:]``,
        or send everything when ``plan.anchor`` is None.

    Raises:
        TypeError: an item has no Responses API shape.
        Exception: whatever *store* raises.
    """
    context = store_context(scope, store)
    history_read = read_history(context, list(history))
    planning = plan_history(context, history_read, properties=properties_digest(params or {}, scope.base_url))
    return drive(planning, lambda find: store.find(find.scope, find.views))


def record_response(
    history: Sequence[Any],
    response: Any,
    *,
    scope: Scope,
    store: AnchorStore,
    record_incomplete: bool = False,
    params: Mapping[str, Any] | None = None,
) -> Anchor | None:
    """Record *response*, the answer to a request whose full context was *history*.

    *params* are that request's other ``create`` arguments (see `plan_request`).

    Returns:
        The recorded anchor, or None when the response must not be an anchor
        (not completed, or ``store`` false).
    """
    if unrecordable(response, record_incomplete=record_incomplete) is not None:
        return None
    context = store_context(scope, store)
    sent = prefix_hashes(context.root, fingerprint_items(list(history))[0])
    parent = getattr(response, "previous_response_id", None)
    anchor, _ = anchor_of(
        response,
        response.output,
        base=sent[-1] if sent else context.root,
        count=len(sent),
        properties=properties_digest(params or {}, scope.base_url),
        now=context.now,
        ttl=store.ttl,
        scope=context.scope_key,
        mac_key=context.mac_key,
        parent=parent if isinstance(parent, str) and parent else None,
    )
    store.put(context.scope_key, anchor)
    return anchor


def store_context(
    scope: Scope, store: AnchorStore, now: float | None = None, recent: RecentViews | None = None
) -> CallContext:
    """The context of a call planned in *scope* outside a tracker: *store*'s secret key seals its anchors."""
    secret = store.secret_key
    return CallContext(
        scope_key=scope.store_key(secret),
        root=scope.root(secret),
        now=time.time() if now is None else now,
        recent=recent,
        mac_key=mac_key(secret),
    )
