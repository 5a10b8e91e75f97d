"""`ContextCache`: the resolved chain of recently saved responses, so a chained request costs its own items.

A request chaining from ``R`` sees every stored item of ``R``'s chain, oldest first, then its own input. The
cache keeps that list for the latest saved responses (least recently used dropped), each entry built from its
parent's entry plus the response's own items as saved: resolving a child reads and decodes no ancestor.  An
entry is used only while every response of its chain is still live, chainable, the same owner's and unchanged.
While the store's `~ResponseStore.generation` is the one the entry was checked at (no record removed, expired
or replaced since: by this process, or on SQLite by any) and its oldest response has not reached its
retention, that holds without a read; otherwise one batched read of every ancestor's parent, status, owner and
creation time checks it (`ResponseStore.heads`).  A miss (a restart, an evicted entry, a changed chain) walks
the chain as before.  An entry also keeps its items' `Facts`, so checking a child's context reads the child's
own items only.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from anchortrack.server._chain import chain_items
from anchortrack.server._facts import EMPTY_FACTS, Facts
from anchortrack.server._records import ChainLink, Head, ResponseStore


Item = dict[str, Any]

#: Most responses whose resolved chain is kept.  An entry shares its item objects with the others and holds
#: a pointer per item of its chain and its `Facts`' sets (about 40 MB for 1,024 chains of 1,000 items).
CONTEXT_CACHE_LIMIT = 1024


@dataclass(frozen=True)
class Ancestry:
    """A chain's responses (oldest first) as `Head` s, with every item they stored, oldest first, as of the
    store's *generation* (read before the chain was walked or checked).
    """

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
        """Keep the ancestry of *saved*, whose parent's is *parent* (as checked when the request was resolved:
        its generation stays the entry's), whose own items are *items* and whose chain's items have *facts*.
        """
        entry = Ancestry(
            (*parent.heads, saved),
            (*parent.items, *items),
            parent.generation,
            parent.owners | {saved.owner},
            min(parent.oldest, saved.created_at),
            facts,
        )
        with self._lock:
            self._entries[saved.id] = entry
            self._entries.move_to_end(saved.id)
            while len(self._entries) > self.limit:
                self._entries.popitem(last=False)
