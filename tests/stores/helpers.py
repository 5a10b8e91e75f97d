"""Helpers of the store tests: scopes, anchors, and one store driven through either half of its protocol."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence

from anchortrack.stores import Anchor, AnchorStore


SCOPE = "0123456789abcdef"
OTHER_SCOPE = "fedcba9876543210"

#: Builds a store of the backend under test (the ``make_store`` fixture).
StoreFactory = Callable[..., AnchorStore]


def view(label: str | int, size: int = 16) -> bytes:
    """Return a realistic view digest for *label*."""
    return hashlib.blake2b(str(label).encode(), digest_size=size).digest()


def make_anchor(
    label: str | int,
    now: float,
    *,
    response_id: str | None = None,
    count: int = 3,
    ttl: float = 3600.0,
    size: int = 16,
    properties: bytes = b"",
    mac: bytes | None = None,
    parent: str | None = None,
) -> Anchor:
    """Return an anchor for view *label*, recorded at *now*, living *ttl* seconds, chained from *parent*."""
    rid = response_id if response_id is not None else f"resp_{view(label).hex()[:25]}"
    return Anchor(view(label, size), rid, count, now, now + ttl, properties, mac, parent)


class Api:
    """
    One store driven through its sync or its async methods.

    Tests call ``await api.find(...)`` either way, so each scenario is
    written once and runs against both halves of the protocol.
    """

    def __init__(self, store: AnchorStore, mode: str) -> None:
        self.store = store
        self.mode = mode

    async def find(self, scope: str, views: Sequence[bytes]) -> Mapping[bytes, Anchor]:
        if self.mode == "sync":
            return self.store.find(scope, views)
        return await self.store.afind(scope, views)

    async def get(self, scope: str, response_id: str) -> Anchor | None:
        if self.mode == "sync":
            return self.store.get(scope, response_id)
        return await self.store.aget(scope, response_id)

    async def put(self, scope: str, anchor: Anchor) -> None:
        if self.mode == "sync":
            self.store.put(scope, anchor)
        else:
            await self.store.aput(scope, anchor)

    async def evict(self, scope: str, response_id: str) -> None:
        if self.mode == "sync":
            self.store.evict(scope, response_id)
        else:
            await self.store.aevict(scope, response_id)
