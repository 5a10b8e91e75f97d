"""The anchor store contract every backend shares: view hashes to response ids, counts and times (and, with a
secret key, a MAC), never item content. Stores raise on failure; the tracker fails open around them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

import attrs

from .._settings import SECRET_KEY


DEFAULT_TTL: float = 30 * 24 * 3600.0
"""Seconds an anchor lives by default: 30 days, as OpenAI keeps stored responses."""


@attrs.frozen(weakref_slot=False)
class Anchor:
    """
    One recorded response, addressed by the digest of its server-side view.

    Attributes:
        view: Digest of the exact item sequence the server holds for the response (its full input
            followed by its output items), keyed by scope and optional secret key.
        response_id: The response id to send as ``previous_response_id``.
        count: How many items the view holds.
        created_at: Unix time the response was recorded.
        expires_at: Unix time after which the anchor must not be used.
        properties: Digest of the request properties a server could carry over a chain (``tools``,
            ``tool_choice``, ``text``, …); empty when the request set none. A request chains from
            the anchor only when its own digest is equal.
        mac: With a secret key, a MAC over the scope, view, response id, count, expiry and
            properties (see `anchortrack._seal`); stores keep it as given and the tracker checks it
            on every read.
        parent: The response id this response was chained from, or None when it was sent in full.
            A server that lost a response lost every response chained through it, so
            `AnchorStore.evict` forgets those descendants too. (Not covered by the MAC: a forged
            parent can only make an eviction forget more, which costs full requests, never a wrong one.)
    """

    view: bytes
    response_id: str
    count: int
    created_at: float
    expires_at: float
    properties: bytes = b""
    mac: bytes | None = None
    parent: str | None = None

    def is_live(self, now: float) -> bool:
        """Whether the anchor may still be used at *now*."""
        return now < self.expires_at


@runtime_checkable
class AnchorStore(Protocol):
    """
    What every anchor store provides: four sync methods, used by sync and async clients alike.

    *scope* is a short, printable digest (hex) of where response ids are valid (base URL,
    organization, project, optional namespace). Backends use it to namespace keys; anchors never
    cross scopes. An async client runs these methods in a worker thread, under the store deadline
    (inline if the store declares ``never_blocks = True``, see `runs_inline`). A store with a native
    async client may add async twins (``afind``, ``aget``, ``aput``, ``aevict``, as `RedisStore`
    does), which async clients then await instead.
    """

    #: Seconds an anchor lives after it is recorded.
    ttl: float
    #: Optional secret that turns view digests into keyed digests.
    secret_key: bytes | None

    def find(self, scope: str, views: Sequence[bytes]) -> Mapping[bytes, Anchor]:
        """Return the live anchors recorded for any of *views*, in one lookup."""

    def get(self, scope: str, response_id: str) -> Anchor | None:
        """Return the live anchor recorded for *response_id*, if any."""

    def put(self, scope: str, anchor: Anchor) -> None:
        """Record *anchor* (last writer wins for a view; a response id names one view: recording it under
        another replaces the older entry)."""

    def evict(self, scope: str, response_id: str) -> None:
        """Forget *response_id*, its view, and its descendants (recorded with it as their `Anchor.parent`, and
        theirs, and so on: the server resolves them through it). A view now naming another response stays."""


def resolve_secret_key(secret_key: bytes | str | None) -> bytes | None:
    """Return the secret key to use: the given one, else the variable's (`SECRET_KEY`); empty means none."""
    return SECRET_KEY.from_env() if secret_key is None else SECRET_KEY.check(secret_key, "", "secret_key")


#: The methods a store may be called through; a class that replaces one of them vouches for it anew.
STORE_METHODS = ("find", "get", "put", "evict", "afind", "aget", "aput", "aevict")


def runs_inline(store: object) -> bool:
    """Whether the tracker may call *store* inline, with no deadline: only when the class declaring
    ``never_blocks = True`` (as `MemoryStore` does) also provides every store method the object uses. A
    subclass or instance that overrides one (say, to add I/O) must declare the promise anew."""
    mro = type(store).__mro__
    declaring = next((cls for cls in mro if "never_blocks" in vars(cls)), None)
    if declaring is None or vars(declaring)["never_blocks"] is not True:
        return False
    below = mro[: mro.index(declaring)]
    own = getattr(store, "__dict__", {})
    return not any(name in own or any(name in vars(cls) for cls in below) for name in STORE_METHODS)
