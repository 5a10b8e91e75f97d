"""Chain resolution and context checks (pure), with OpenAI's semantics.

A chain's context is its ancestors' inputs and outputs, never their ``instructions``; only ``completed`` and
``incomplete`` ancestors chain."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from anchortrack.server._errors import APIError, bad_request, previous_response_not_found
from anchortrack.server._facts import Facts, is_reference
from anchortrack.server._records import ChainLink, Item


DEFAULT_MAX_DEPTH = 10_000
"""Default maximum number of stored responses in one chain."""

#: Statuses a parent may have.
CHAINABLE_STATUSES = frozenset({"completed", "incomplete"})


def resolve_chain(
    previous_response_id: str, get: Callable[[str], ChainLink | None], *, max_depth: int = DEFAULT_MAX_DEPTH
) -> list[ChainLink]:
    """Return the chain ending at *previous_response_id*, oldest first; *get* is a store's ``link``.

    Raises:
        APIError: 400 naming a missing or unchainable ancestor, a chain too long, or a cycle.
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
    return [item for link in chain for item in [*link.input_items, *link.output]]


def resolve_context(context: Sequence[Item], lookup: Callable[[str], Item | None]) -> list[Item]:
    """Return the context the model sees: every item an id stands for resolved (`resolve_items`), every
    MCP approval response and local shell call output checked for its request or call (APIError 400)."""
    out = resolve_items((), context, lookup)
    Facts.of(out).check(pairs=False)
    return out


def resolve_items(
    earlier: Sequence[Item], items: Sequence[Item], lookup: Callable[[str], Item | None]
) -> list[Item]:
    """*items* (following the resolved *earlier* ones) with each reference, and each ``reasoning`` item
    without ``encrypted_content``, replaced by the item its id names: an earlier one, else *lookup*'s
    (APIError 404)."""
    seen: dict[str, Item] = {}
    out: list[Item] = []
    for item in items:
        by_id = item.get("type") == "reasoning" and not item.get("encrypted_content")
        if is_reference(item) or (by_id and isinstance(item.get("id"), str)):
            item_id = item["id"]
            found = next((i for i in earlier if i.get("id") == item_id), None) or seen.get(item_id)
            found = found or lookup(item_id)
            if found is None or is_reference(found) or (by_id and found.get("type") != "reasoning"):
                message = f"Item with id '{item_id}' not found. Items are not persisted when `store` is set "
                message += "to false. Try again with `store` set to true, or remove this item from your "
                raise APIError(404, message + "input.", param="input")
            item = found
        if isinstance(item_id := item.get("id"), str):
            seen.setdefault(item_id, item)
        out.append(item)
    return out
