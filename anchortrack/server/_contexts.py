"""`ContextCache`: the resolved chain of recently saved responses, so a chained request costs its own items.

An entry (its parent's plus the response's own items, and their `Facts`) is used only while its whole chain
is live, chainable, one owner's and unchanged: known without a read while the store's generation is the one
it was checked at and its oldest response is within retention, else by one batched read of the heads.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, replace

from anchortrack.server._chain import chain_items
from anchortrack.server._facts import EMPTY_FACTS, Facts
from anchortrack.server._records import ChainLink, Head, Item, ResponseStore


#: Most responses whose resolved chain is kept (about 40 MB for 1,024 chains of 1,000 shared items).
CONTEXT_CACHE_LIMIT = 1024


@dataclass(frozen=True)
class Ancestry:
    """A chain's responses (oldest first) as `Head` s, with every item they stored, as of the store's
    *generation* (read before the chain was walked or checked)."""

    heads: tuple[Head, ...]
    items: tuple[Item, ...]
    generation: object = None
    owners: frozenset[str] = frozenset()
    oldest: float = math.inf  # the earliest creation time of the chain
    facts: Facts = EMPTY_FACTS  # the facts of items

    @staticmethod
    def of(chain: Sequence[ChainLink], generation: object) -> Ancestry:
        heads = tuple(link.head for link in chain)
        items = tuple(chain_items(chain))
        owners = frozenset(head.owner for head in heads)
        oldest = min((h.created_at for h in heads), default=math.inf)
        return Ancestry(heads, items, generation, owners, oldest, Facts.of(items))


EMPTY = Ancestry((), ())


class ContextCache:
    """The `Ancestry` of the latest saved responses, by id (thread-safe)."""

    def __init__(self, limit: int = CONTEXT_CACHE_LIMIT) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, Ancestry] = OrderedDict()

    def lookup(self, response_id: str, owner: str | None, store: ResponseStore) -> Ancestry | None:
        """*response_id*'s ancestry while its whole chain is live, chainable and *owner*'s (any, for None)."""
        with self._lock:
            entry = self._entries.get(response_id)
            if entry is not None:
                self._entries.move_to_end(response_id)
        if entry is None or (owner is not None and entry.owners != {owner}):
            return None
        generation = store.generation()
        if generation == entry.generation and store.now() < entry.oldest + store.retention:
            return entry  # nothing was removed since it was checked, and nothing of it expired
        live = store.heads([head.id for head in entry.heads])
        fresh = all(live.get(head.id) == head for head in entry.heads)
        with self._lock:
            if fresh:
                entry = self._entries[response_id] = replace(entry, generation=generation)
            else:
                self._entries.pop(response_id, None)
        return entry if fresh else None

    def add(self, saved: Head, parent: Ancestry, items: Sequence[Item], facts: Facts) -> None:
        """Keep *saved*'s ancestry: *parent*'s as checked when the request was resolved (its generation stays
        the entry's), then *items*; *facts* are of them all."""
        oldest, owners = min(parent.oldest, saved.created_at), parent.owners | {saved.owner}
        entry = Ancestry(
            (*parent.heads, saved), (*parent.items, *items), parent.generation, owners, oldest, facts
        )
        with self._lock:
            self._entries[saved.id] = entry
            self._entries.move_to_end(saved.id)
            while len(self._entries) > self.limit:
                self._entries.popitem(last=False)
