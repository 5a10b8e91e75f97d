"""MACs over stored anchors (pure), so whoever can write a shared store cannot steer another tenant's
requests: one whose MAC does not verify is absent. Deletions (a larger request) and an older anchor of the
same view put back (still an equivalent chain) are not prevented."""

from __future__ import annotations

import functools
import hashlib
import hmac
import struct

import attrs

from .stores._base import Anchor


#: Bytes in one MAC.
MAC_SIZE = 16

_DOMAIN = b"anchortrack/anchor-mac/1"
_TAIL = struct.Struct("<Qd")  # count, expires_at


def fit_key(secret_key: bytes) -> bytes:
    """A BLAKE2b key from *secret_key* (longer keys are hashed down to 64 bytes)."""
    return secret_key if len(secret_key) <= 64 else hashlib.blake2b(secret_key).digest()


@functools.lru_cache(maxsize=8)
def mac_key(secret_key: bytes | None) -> bytes | None:
    """The key anchors are sealed with, derived from the store's secret key (None without one)."""
    if not secret_key:
        return None
    return hashlib.blake2b(_DOMAIN, key=fit_key(secret_key), digest_size=32).digest()


def anchor_mac(key: bytes, scope: str, anchor: Anchor) -> bytes:
    """The MAC of *anchor* recorded in *scope*."""
    h = hashlib.blake2b(key=key, digest_size=MAC_SIZE)
    for part in (scope.encode(), anchor.view, anchor.response_id.encode(), anchor.properties):
        h.update(len(part).to_bytes(4, "little"))
        h.update(part)
    h.update(_TAIL.pack(anchor.count, anchor.expires_at))
    return h.digest()


def seal(anchor: Anchor, scope: str, key: bytes | None) -> Anchor:
    """Return *anchor* with its MAC for *scope* (unchanged without a key)."""
    if key is None:
        return anchor
    return attrs.evolve(anchor, mac=anchor_mac(key, scope, anchor))


def authentic(anchor: Anchor, scope: str, key: bytes | None) -> bool:
    """Whether *anchor*, read from *scope*, carries a valid MAC (always True without a key)."""
    if key is None:
        return True
    mac = anchor.mac
    if not isinstance(mac, bytes):
        return False
    try:
        expected = anchor_mac(key, scope, anchor)
    except (TypeError, ValueError, AttributeError, struct.error):  # fields of the wrong type
        return False
    return hmac.compare_digest(mac, expected)
