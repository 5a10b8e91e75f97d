"""
The Redis store's data format (no I/O): the value of a view key, and the key names.

`encode_value` writes what the Lua scripts in `anchortrack.stores._lua` parse;
`KeySchema` names the keys they touch.
"""

from __future__ import annotations

from collections.abc import Sequence

from ._base import Anchor
from ._checks import FORBIDDEN_KEY_CHARS, check_scope


#: Version tag at the start of every encoded value; version 1 values (without
#: the properties digest and the MAC) are treated as absent.
VALUE_VERSION = "2"
#: Version tag of a value with a parent (`Anchor.parent`).
PARENT_VALUE_VERSION = "3"


def encode_value(anchor: Anchor) -> str:
    """
    Encode everything but the view (which is in the key) as a short string.

    ``2|count|created_at|expires_at|properties|mac|response_id``: the times as
    the shortest ``repr`` that round-trips, the digests in hex (the MAC empty
    when there is none), the response id last so it may hold any character.
    With a parent, ``3|…|mac|n|<parent><response_id>``, where *n* is the
    parent's length in UTF-8 bytes. ASCII for ASCII ids, so it survives
    clients that decode responses.
    """
    mac = anchor.mac.hex() if anchor.mac is not None else ""
    head = f"{anchor.count}|{anchor.created_at!r}|{anchor.expires_at!r}|{anchor.properties.hex()}|{mac}"
    if anchor.parent is None:
        return f"{VALUE_VERSION}|{head}|{anchor.response_id}"
    size = len(anchor.parent.encode())
    return f"{PARENT_VALUE_VERSION}|{head}|{size}|{anchor.parent}{anchor.response_id}"


def decode_value(view: bytes, raw: bytes | str) -> Anchor | None:
    """Decode a value written by `encode_value`; None if it is not one (of another version, say)."""
    data = raw.encode() if isinstance(raw, str) else raw
    parts = data.split(b"|", 7)
    parent: str | None = None
    try:
        if parts[0] == VALUE_VERSION.encode() and len(parts) >= 7:
            response_id = b"|".join(parts[6:]).decode()
        elif parts[0] == PARENT_VALUE_VERSION.encode() and len(parts) == 8:
            size = int(parts[6])
            if not 0 < size < len(parts[7]):
                return None
            parent, response_id = parts[7][:size].decode(), parts[7][size:].decode()
        else:
            return None
        count, created_at, expires_at = int(parts[1]), float(parts[2]), float(parts[3])
        properties, mac = bytes.fromhex(parts[4].decode()), bytes.fromhex(parts[5].decode())
    except (ValueError, UnicodeDecodeError):
        return None
    return Anchor(view, response_id, count, created_at, expires_at, properties, mac or None, parent)


class KeySchema:
    """
    Key names for the Redis store (see `anchortrack.stores.redis`).

    The scope is the tracker's scope key, a digest (keyed by the secret key
    when there is one), so key names tell a reader without the key nothing
    about where they belong. It sits in a hash tag, so all keys of one scope
    share a Redis Cluster slot, where multi-key scripts stay legal.
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
