"""
The Redis store's data format: the value of a view key and the key names.

`encode_value` writes what the Lua scripts in `anchortrack.stores._lua`
parse (``1|count|created_at|expires_at|response_id``, or with a parent
``2|count|created_at|expires_at|<parent bytes>|<parent><response_id>``);
`KeySchema` names the keys they touch.
Pure: nothing here does I/O, so the sync and async halves of `RedisStore`
share it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from ._base import Anchor
from ._checks import FORBIDDEN_KEY_CHARS, check_scope


#: Version tag of a value without a parent (see `encode_value`).
VALUE_VERSION = "1"
#: Version tag of a value with a parent.
PARENT_VALUE_VERSION = "2"


def encode_value(anchor: Anchor) -> str:
    """
    Encode everything but the view (which is in the key) as a short string.

    Without a parent the format is ``1|count|created_at|expires_at|response_id``:
    a version tag, the count in decimal, both times as the shortest ``repr``
    that round-trips, and the response id last so it may hold any character.
    With a parent it is ``2|count|created_at|expires_at|n|<parent><response_id>``,
    where *n* is the parent's length in UTF-8 bytes.
    (Older anchortrack versions read only version 1 and treat version 2
    values as absent: their calls go out in full, never wrong.)
    It is ASCII for ASCII ids, so it survives clients that decode responses.
    """
    head = f"{anchor.count}|{anchor.created_at!r}|{anchor.expires_at!r}"
    if anchor.parent is None:
        return f"{VALUE_VERSION}|{head}|{anchor.response_id}"
    size = len(anchor.parent.encode())
    return f"{PARENT_VALUE_VERSION}|{head}|{size}|{anchor.parent}{anchor.response_id}"


def decode_value(view: bytes, raw: bytes | str) -> Anchor | None:
    """
    Decode a value written by `encode_value`; `None` if it is not one.

    Values of an unknown version (written by a newer anchortrack) are
    treated as absent rather than guessed at.
    """
    data = raw.encode() if isinstance(raw, str) else raw
    parts = data.split(b"|", 5)
    version = parts[0].decode(errors="replace")
    parent: str | None = None
    try:
        if version == VALUE_VERSION and len(parts) >= 5:
            response_id = b"|".join(parts[4:]).decode()
        elif version == PARENT_VALUE_VERSION and len(parts) == 6:
            size = int(parts[4])
            if not 0 < size < len(parts[5]):
                return None
            parent, response_id = parts[5][:size].decode(), parts[5][size:].decode()
        else:
            return None
        count, created_at, expires_at = int(parts[1]), float(parts[2]), float(parts[3])
    except (ValueError, UnicodeDecodeError):
        return None
    return Anchor(view, response_id, count, created_at, expires_at, parent)


def expiry_ms(anchor: Anchor) -> int:
    """Return when the anchor's keys expire, in Unix milliseconds (at least 1)."""
    return max(1, math.ceil(anchor.expires_at * 1000))


def live(anchors: Iterable[Anchor | None], now: float) -> dict[bytes, Anchor]:
    """Return the live anchors among *anchors*, keyed by view."""
    return {a.view: a for a in anchors if a is not None and a.is_live(now)}


class KeySchema:
    """
    Key names for key-value backends (Redis).

    ``{prefix}:{{{scope}}}:v:{view hex}`` holds the encoded anchor,
    ``{prefix}:{{{scope}}}:r:{response id}`` holds the view in hex, and
    ``{prefix}:{{{scope}}}:c:{response id}`` is the set of the response ids
    recorded as chained from that response.
    The scope sits in a hash tag, so all keys of one scope share a Redis
    Cluster slot and multi-key commands and scripts stay legal there.
    """

    def __init__(self, prefix: str) -> None:
        if not prefix or any(c.isspace() or c in FORBIDDEN_KEY_CHARS for c in prefix):
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

    def children_prefix(self, scope: str) -> str:
        """Return the start of children keys of *scope* (a parent's response id follows)."""
        return self.base(scope) + "c:"
