"""The argument checks every store backend shares (no I/O), so all refuse the same input alike."""

from __future__ import annotations

import math

from .._settings import checked_seconds as checked_seconds  # the stores' ttl: a seconds setting's check
from ._base import Anchor


#: Longest accepted scope, in characters.
MAX_SCOPE_LENGTH = 128
#: Longest accepted properties digest and MAC, in bytes.
MAX_DIGEST_SIZE = 64
#: Characters refused in scopes and key prefixes (Redis hash tags use them).
FORBIDDEN_KEY_CHARS = frozenset("{}")


def _filled(value: object, kind: type[object]) -> bool:
    return isinstance(value, kind) and bool(value)


def check_scope(scope: str) -> str:
    """Return *scope* if it is short and printable, without spaces or braces; else raise `ValueError`."""
    if not _filled(scope, str):
        raise ValueError(f"scope must be a non-empty str, got {scope!r}")
    if scope.isascii() and scope.isalnum() and len(scope) <= MAX_SCOPE_LENGTH:
        return scope  # the common case (hex digits), checked fast
    if (
        len(scope) > MAX_SCOPE_LENGTH
        or not scope.isprintable()
        or any(c.isspace() or c in FORBIDDEN_KEY_CHARS for c in scope)
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
    if anchor.parent is not None and not _filled(anchor.parent, str):
        raise ValueError(f"anchor.parent must be None or a non-empty str: {anchor.parent!r}")
    if not (math.isfinite(anchor.created_at) and math.isfinite(anchor.expires_at)):
        raise ValueError(f"anchor times must be finite: {anchor!r}")
    properties: object = anchor.properties
    if not isinstance(properties, bytes) or len(properties) > MAX_DIGEST_SIZE:
        raise ValueError(f"anchor.properties must be at most {MAX_DIGEST_SIZE} bytes: {properties!r}")
    if anchor.mac is not None and not (_filled(anchor.mac, bytes) and len(anchor.mac) <= MAX_DIGEST_SIZE):
        raise ValueError(f"anchor.mac must be None or 1 to {MAX_DIGEST_SIZE} bytes: {anchor.mac!r}")
    return anchor


def check_response_id(response_id: str) -> str:
    """Return *response_id* if it is a non-empty str, else raise `ValueError`."""
    if not _filled(response_id, str):
        raise ValueError(f"response_id must be a non-empty str, got {response_id!r}")
    return response_id
