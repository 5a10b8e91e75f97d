"""Builders shared by the store tests."""

from __future__ import annotations

import hashlib

from anchortrack.stores import Anchor


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
) -> Anchor:
    """Return an anchor for view *label*, recorded at *now*, living *ttl* seconds."""
    rid = response_id if response_id is not None else f"resp_{view(label).hex()[:25]}"
    return Anchor(view(label, size), rid, count, now, now + ttl)
