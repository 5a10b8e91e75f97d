"""Chain resolution and context checks (pure), with OpenAI's semantics.

`resolve_chain` walks ``previous_response_id`` pointers and `chain_items` flattens the ancestors into the
context the model sees: their inputs and outputs, never their ``instructions``.  An ancestor that is unknown,
expired, deleted, unstored, ``failed`` or still ``in_progress`` gives ``previous_response_not_found``
(``incomplete`` ones chain, as on OpenAI). `resolve_context` replaces the items named by id;
`_facts.check_context` refuses what the real API refuses.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from anchortrack.server._errors import APIError, bad_request, previous_response_not_found
from anchortrack.server._facts import Facts, is_reference
from anchortrack.server._records import ChainLink


Item = dict[str, Any]

DEFAULT_MAX_DEPTH = 10_000
"""Default maximum number of stored responses in one chain."""

#: Statuses a parent may have.
CHAINABLE_STATUSES = frozenset({"completed", "incomplete"})


def resolve_chain(
    previous_response_id: str,
    get: Callable[[str], ChainLink | None],
    *,
    max_depth: int = DEFAULT_MAX_DEPTH,
) -> list[ChainLink]:
    """Return the chain ending at *previous_response_id*, oldest first; *get* is a store's ``link``.

    Raises:
        APIError: 400 ``previous_response_not_found`` naming a missing or unchainable ancestor,
            ``previous_response_chain_too_long`` beyond *max_depth*, ``previous_response_chain_cycle`` for a
            cycle.
    """
    chain: list[ChainLink] = []
    seen: set[str] = set()
    current: str | None = previous_response_id
    while current is not None:
        chain_of = f"The chain of previous response '{previous_response_id}'"
        if len(chain) >= max_depth:
            message = f"{chain_of} holds more than {max_depth} responses."
            raise bad_request("previous_response_id", "previous_response_chain_too_long", message)
        if current in seen:
            message = f"{chain_of} contains a cycle at '{current}'."
            raise bad_request("previous_response_id", "previous_response_chain_cycle", message)
        seen.add(current)
        record = get(current)
        if record is None or record.status not in CHAINABLE_STATUSES:
            raise previous_response_not_found(current)
        chain.append(record)
        current = record.previous_response_id
    chain.reverse()
    return chain


def chain_items(chain: Sequence[ChainLink]) -> list[Item]:
    """Every input and output item of *chain* (oldest first), without instructions."""
    return [item for link in chain for item in [*link.input_items, *link.output]]


# -- id resolution, as OpenAI does it ------------------------------------------------------------


def resolve_context(context: Sequence[Item], lookup: Callable[[str], Item | None]) -> list[Item]:
    """Return the context the model sees: every item an id stands for, resolved.

    An item reference becomes the item it names; a ``reasoning`` item without ``encrypted_content`` becomes
    the stored reasoning item with its id.  An id is looked up among the earlier items first, then by *lookup*
    (items of stored responses).  Then an ``mcp_approval_response`` must name an ``mcp_approval_request`` of
    the context, and a ``local_shell_call_output`` a ``local_shell_call``.

    Raises:
        APIError: 404 ``param: input`` for an id that names no item (or a reasoning id that names no reasoning
            item); 400 ``param: input`` for an answer without its request or call.
    """
    out = resolve_items((), context, lookup)
    Facts.of(out).check(pairs=False)
    return out


def resolve_items(
    earlier: Sequence[Item], items: Sequence[Item], lookup: Callable[[str], Item | None]
) -> list[Item]:
    """*items* (following the resolved *earlier* ones, read only for an id to resolve) with every item an id
    stands for resolved, as `resolve_context` does; no answer checks.

    Raises:
        APIError: 404 ``param: input`` for an id that names no item.
    """
    seen: dict[str, Item] = {}
    out: list[Item] = []
    for item in items:
        by_id = item.get("type") == "reasoning" and not item.get("encrypted_content")
        if is_reference(item) or (by_id and isinstance(item.get("id"), str)):
            item_id = item["id"]
            found = next((i for i in earlier if i.get("id") == item_id), None) or seen.get(item_id)
            found = found or lookup(item_id)
            if found is None or is_reference(found) or (by_id and found.get("type") != "reasoning"):
                message = (
                    f"Item with id '{item_id}' not found. Items are not persisted when `store` is set to "
                    "false. Try again with `store` set to true, or remove this item from your input."
                )
                raise APIError(404, message, param="input")
            item = found
        if isinstance(item_id := item.get("id"), str):
            seen.setdefault(item_id, item)
        out.append(item)
    return out
