"""
Pure helpers shared by the store backends: validation, the value codec and
the Redis key schema.

Nothing here does I/O, so every backend encodes, decodes and checks anchors
the same way, and the sync and async paths of one backend share it too.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from ._base import Anchor


#: Version tag at the start of every encoded value (see `encode_value`).
VALUE_VERSION = "1"

#: Longest accepted scope, in characters.
MAX_SCOPE_LENGTH = 128

_FORBIDDEN_SCOPE_CHARS = frozenset("{}")


def _filled(value: object, kind: type[object]) -> bool:
    """Whether *value* is a non-empty instance of *kind* (for untyped callers)."""
    return isinstance(value, kind) and bool(value)


def check_scope(scope: str) -> str:
    """
    Return *scope* if it can namespace store keys, else raise `ValueError`.

    A scope is a short printable string (the tracker uses 16 hex digits).
    Braces are refused because Redis keys wrap the scope in a hash tag.
    """
    if not _filled(scope, str):
        raise ValueError(f"scope must be a non-empty str, got {scope!r}")
    if scope.isascii() and scope.isalnum() and len(scope) <= MAX_SCOPE_LENGTH:
        return scope  # the common case (hex digits), checked fast
    if (
        len(scope) > MAX_SCOPE_LENGTH
        or not scope.isprintable()
        or any(c.isspace() or c in _FORBIDDEN_SCOPE_CHARS for c in scope)
    ):
        raise ValueError(f"scope must be short and printable, without spaces or braces: {scope!r}")
    return scope


def check_anchor(anchor: Anchor) -> Anchor:
    """Return *anchor* if a store can record it, else raise `ValueError`."""
    if not _filled(anchor.view, bytes):
        raise ValueError(f"anchor.view must be non-empty bytes, got {anchor.view!r}")
    if not _filled(anchor.response_id, str):
        raise ValueError(f"anchor.response_id must be a non-empty str: {anchor.response_id!r}")
    if not 0 <= anchor.count < 2**32:
        raise ValueError(f"anchor.count out of range: {anchor.count!r}")
    if not (math.isfinite(anchor.created_at) and math.isfinite(anchor.expires_at)):
        raise ValueError(f"anchor times must be finite: {anchor!r}")
    return anchor


def check_response_id(response_id: str) -> str:
    """Return *response_id* if it is a non-empty str, else raise `ValueError`."""
    if not _filled(response_id, str):
        raise ValueError(f"response_id must be a non-empty str, got {response_id!r}")
    return response_id


def unique_views(views: Iterable[bytes]) -> list[bytes]:
    """Return *views* without duplicates, in their first order."""
    return list(dict.fromkeys(views))


def encode_value(anchor: Anchor) -> str:
    """
    Encode everything but the view (which is in the key) as a short string.

    The format is ``1|count|created_at|expires_at|response_id``: a version
    tag, the count in decimal, both times as the shortest ``repr`` that
    round-trips, and the response id last so it may hold any character.
    It is ASCII for ASCII ids, so it survives clients that decode responses.
    """
    return f"{VALUE_VERSION}|{anchor.count}|{anchor.created_at!r}|{anchor.expires_at!r}|{anchor.response_id}"


def decode_value(view: bytes, raw: bytes | str) -> Anchor | None:
    """
    Decode a value written by `encode_value`; `None` if it is not one.

    Values of an unknown version (written by a newer anchortrack) are
    treated as absent rather than guessed at.
    """
    text = raw.decode() if isinstance(raw, bytes) else raw
    parts = text.split("|", 4)
    if len(parts) != 5 or parts[0] != VALUE_VERSION:
        return None
    try:
        count, created_at, expires_at = int(parts[1]), float(parts[2]), float(parts[3])
    except ValueError:
        return None
    return Anchor(view, parts[4], count, created_at, expires_at)


def expiry_ms(anchor: Anchor) -> int:
    """Return when the anchor's keys expire, in Unix milliseconds (at least 1)."""
    return max(1, math.ceil(anchor.expires_at * 1000))


def live(anchors: Iterable[Anchor | None], now: float) -> dict[bytes, Anchor]:
    """Return the live anchors among *anchors*, keyed by view."""
    return {a.view: a for a in anchors if a is not None and a.is_live(now)}


class KeySchema:
    """
    Key names for key-value backends (Redis).

    ``{prefix}:{{{scope}}}:v:{view hex}`` holds the encoded anchor, and
    ``{prefix}:{{{scope}}}:r:{response id}`` holds the view in hex.
    The scope sits in a hash tag, so all keys of one scope share a Redis
    Cluster slot and multi-key commands and scripts stay legal there.
    """

    def __init__(self, prefix: str) -> None:
        if not prefix or any(c.isspace() or c in _FORBIDDEN_SCOPE_CHARS for c in prefix):
            raise ValueError(f"prefix must be non-empty, without spaces or braces: {prefix!r}")
        self.prefix = prefix

    def base(self, scope: str) -> str:
        """Return the common start of every key of *scope*."""
        return f"{self.prefix}:{{{check_scope(scope)}}}:"

    def view_prefix(self, scope: str) -> str:
        """Return the start of view keys of *scope* (a view's hex follows)."""
        return self.base(scope) + "v:"

    def response_prefix(self, scope: str) -> str:
        """Return the start of reverse keys of *scope* (a response id follows)."""
        return self.base(scope) + "r:"

    def view_keys(self, scope: str, views: Sequence[bytes]) -> list[str]:
        """Return the view keys of *views* in *scope*."""
        start = self.view_prefix(scope)
        return [start + v.hex() for v in views]

    def response_key(self, scope: str, response_id: str) -> str:
        """Return the reverse key of *response_id* in *scope*."""
        return self.response_prefix(scope) + response_id
