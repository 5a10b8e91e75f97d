"""Helpers of the store tests: scopes, anchors, and one store driven through either half of its protocol."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

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

    async def _call(self, name: str, *args: object) -> Any:
        """The sync method *name*, or its native async twin (a worker thread runs a store without one)."""
        if self.mode == "sync":
            return getattr(self.store, name)(*args)
        native = getattr(self.store, "a" + name, None)
        if native is None:
            return await asyncio.to_thread(getattr(self.store, name), *args)
        return await native(*args)

    async def find(self, scope: str, views: Sequence[bytes]) -> Mapping[bytes, Anchor]:
        found: Mapping[bytes, Anchor] = await self._call("find", scope, views)
        return found

    async def get(self, scope: str, response_id: str) -> Anchor | None:
        anchor: Anchor | None = await self._call("get", scope, response_id)
        return anchor

    async def put(self, scope: str, anchor: Anchor) -> None:
        await self._call("put", scope, anchor)

    async def evict(self, scope: str, response_id: str) -> None:
        await self._call("evict", scope, response_id)
