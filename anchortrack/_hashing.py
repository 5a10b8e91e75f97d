"""
Fingerprints, prefix hashes and scopes (pure).

``f(item)`` is a 128-bit BLAKE2b digest of the item's canonical bytes.
``h(0)`` is a digest of the scheme version, the scope and the optional secret
key; ``h(i) = digest(h(i-1) || f(item i))``.
So ``h(i)`` names the exact item sequence ``items[:i]`` within one scope, and
the same bytes come out in every process, on every host, for every library
version that shares `SCHEME`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import Any

import attrs

from ._canonical import CANONICAL_VERSION, canonical_and_plain, canonical_bytes, dump_canonical
from ._seal import fit_key


#: Version of the whole digest scheme (canonical form + hashing).
SCHEME = f"anchortrack/{CANONICAL_VERSION}.1"
DIGEST_SIZE = 16

_blake2b = hashlib.blake2b


def fingerprint(item: object) -> bytes:
    """Return the 16-byte fingerprint of one item."""
    return _blake2b(canonical_bytes(item), digest_size=DIGEST_SIZE).digest()


@attrs.frozen
class Scope:
    """
    Where a response id is valid: anchors never cross scopes.

    Attributes:
        base_url: The API base URL, normalised without a trailing slash.
        organization: The OpenAI organization, if the client sets one.
        project: The OpenAI project, if the client sets one.
        namespace: An optional extra partition chosen by the user.
        api_key_digest: A keyed digest of the client's API key (see
            `api_key_digest`; never the key itself), so that clients with
            different keys never share anchors; None leaves the key out.
    """

    base_url: str
    organization: str | None = None
    project: str | None = None
    namespace: str | None = None
    api_key_digest: str | None = None

    @property
    def key(self) -> str:
        """A short printable digest of the scope, used to namespace stores without a secret key."""
        return self.store_key(None)

    def store_key(self, secret_key: bytes | None) -> str:
        """
        The short printable digest that namespaces this scope's anchors in a store.

        Keyed by *secret_key* when given, so a store's keys tell a reader
        without the key nothing about the scope (base URL, organization,
        project, namespace or API key) they belong to.
        """
        key = fit_key(secret_key) if secret_key else b""
        return _blake2b(self._identity(), digest_size=8, key=key).hexdigest()

    def _identity(self) -> bytes:
        parts = [
            self.base_url.rstrip("/"),
            self.organization or "",
            self.project or "",
            self.namespace or "",
        ]
        if self.api_key_digest is not None:
            parts.append(self.api_key_digest)
        return "\x1f".join(parts).encode()

    def root(self, secret_key: bytes | None) -> bytes:
        """Return ``h(0)`` for this scope, keyed by *secret_key* if given."""
        key = fit_key(secret_key) if secret_key else b""
        return _blake2b(
            SCHEME.encode() + b"\x00" + self._identity(), digest_size=DIGEST_SIZE, key=key
        ).digest()


_API_KEY_DOMAIN = b"anchortrack/api-key/1"


def api_key_digest(api_key: str, secret_key: bytes | None = None) -> str:
    """
    A keyed digest naming an API key in a `Scope`, never the key itself.

    Keyed by *secret_key* when given (else by a fixed domain key): API keys
    are long random strings, so the digest cannot be turned back into one.
    """
    key = fit_key(secret_key) if secret_key else _API_KEY_DOMAIN
    return _blake2b(api_key.encode(), digest_size=16, key=key).hexdigest()


def extend(prefix: bytes, fingerprints: Iterable[bytes]) -> bytes:
    """Continue the prefix hash *prefix* over *fingerprints*; return the last."""
    for fp in fingerprints:
        prefix = _blake2b(prefix + fp, digest_size=DIGEST_SIZE).digest()
    return prefix


def prefix_hashes(root: bytes, fingerprints: Sequence[bytes]) -> list[bytes]:
    """Return ``[h(1), …, h(n)]`` for *fingerprints* starting from *root*."""
    out: list[bytes] = []
    append = out.append
    h = root
    for fp in fingerprints:
        h = _blake2b(h + fp, digest_size=DIGEST_SIZE).digest()
        append(h)
    return out


MODEL_ITEM_TYPES = frozenset(
    {
        "function_call",
        "custom_tool_call",
        "reasoning",
        "compaction",
        "file_search_call",
        "web_search_call",
        "computer_call",
        "code_interpreter_call",
        "image_generation_call",
        "local_shell_call",
        "shell_call",
        "apply_patch_call",
        "mcp_call",
        "mcp_list_tools",
        "mcp_approval_request",
        "tool_search_call",
    }
)


class Memo:
    """
    Remembers fingerprints of items seen before — by value, never trusting identity.

    Two ways in, both exact:

    * A plain dict whose leaves are all strings is remembered with a private
      copy of its containers (sharing the leaf strings). When the same object
      comes back, ``item == copy`` (a pointer-fast C comparison) proves its
      value is unchanged — in-place edits by middleware are caught — and only
      then is its fingerprint reused. With string leaves only, ``==`` is exact
      (no ``1 == True == 1.0`` aliasing).
    * Any other dict, or an SDK model, is keyed by a digest of its ``repr`` /
      JSON serialization, which names its value exactly.

    Bounded: when full it starts over.
    """

    def __init__(self, max_entries: int = 65_536) -> None:
        self.max_entries = max_entries
        self._entries: dict[bytes, tuple[bytes, int, bool]] = {}
        self._objects: dict[int, tuple[object, tuple[bytes, int, bool]]] = {}

    def get(self, key: bytes) -> tuple[bytes, int, bool] | None:
        """Return what was remembered under *key*."""
        return self._entries.get(key)

    def put(self, key: bytes, value: tuple[bytes, int, bool]) -> None:
        """Remember *value* under *key*."""
        if len(self._entries) >= self.max_entries:
            self._entries.clear()
        self._entries[key] = value

    def lookup_object(self, item: dict[str, Any]) -> tuple[bytes, int, bool] | None:
        """Return the remembered fingerprint of *item* if its value is unchanged."""
        entry = self._objects.get(id(item))
        if entry is not None and entry[0] == item:
            return entry[1]
        return None

    def remember_object(self, item: dict[str, Any], value: tuple[bytes, int, bool]) -> bool:
        """Remember *item* by a copy of its value; False if it is not all-string."""
        copy = _freeze(item)
        if copy is None:
            return False
        if len(self._objects) >= self.max_entries:
            self._objects.clear()
        self._objects[id(item)] = (copy, value)
        return True


def _freeze(value: object) -> object | None:
    """
    Copy dict/list containers, sharing str and None leaves.

    Returns None (meaning "cannot remember by identity") if any leaf is another
    type: ``==`` would equate ``1``, ``1.0`` and ``True``, whose JSON differs.
    """
    kind = type(value)
    if kind is str:
        return value
    if value is None:
        return _NONE
    if kind is dict:
        out = {}
        for key, item in value.items():  # type: ignore[attr-defined]
            frozen = _freeze(item)
            if frozen is None:
                return None
            out[key] = None if frozen is _NONE else frozen
        return out
    if kind is list:
        items = []
        for item in value:  # type: ignore[attr-defined]
            frozen = _freeze(item)
            if frozen is None:
                return None
            items.append(None if frozen is _NONE else frozen)
        return items
    return None


_NONE = object()


def _memo_key(item: object) -> bytes | None:
    """A digest naming *item*'s value exactly, or None when none is cheap."""
    if type(item) is dict:
        return _blake2b(b"d" + repr(item).encode(), digest_size=DIGEST_SIZE).digest()
    serializer = getattr(item, "__pydantic_serializer__", None)
    if serializer is not None:
        data: bytes = serializer.to_json(item, exclude_unset=True)
        return _blake2b(
            b"m" + type(item).__name__.encode() + b"\x00" + data, digest_size=DIGEST_SIZE
        ).digest()
    return None


#: The type and role (if a message) of one item, from its canonical form.
Kind = tuple[str, str | None]


def _fingerprint_one(item: object, kinds: list[Kind] | None) -> tuple[tuple[bytes, int, bool], bool]:
    canon, plain = canonical_and_plain(item)
    kind = canon.get("type")
    role = canon.get("role")
    is_tool_or_reasoning = isinstance(kind, str) and kind in MODEL_ITEM_TYPES
    is_model = (kind == "message" and role == "assistant") or is_tool_or_reasoning
    if kinds is not None:
        kinds.append((str(canon.get("type", "?")), role if isinstance(role, str) else None))
    data = dump_canonical(canon)
    return (_blake2b(data, digest_size=DIGEST_SIZE).digest(), len(data), is_model), plain


def fingerprint_items(
    items: Sequence[object], memo: Memo | None = None, *, kinds: list[Kind] | None = None
) -> tuple[list[bytes], list[int], bool]:
    """
    Fingerprint a history in one pass.

    Args:
        items: The history.
        memo: Fingerprints remembered from earlier calls.
        kinds: If given, the type and role of each item are appended to it
            (from the same canonical form; the memo is not used then).

    Returns:
        The fingerprints, the canonical byte sizes, and whether any item is
        model output (an assistant message, a tool call, reasoning, …).

    Raises:
        ItemError: an item has no Responses API shape.
    """
    fps: list[bytes] = []
    sizes: list[int] = []
    has_model = False
    if kinds is not None:
        memo = None
    for item in items:
        known = None
        is_dict = type(item) is dict
        if memo is not None and is_dict:
            known = memo.lookup_object(item)  # type: ignore[arg-type]
        if known is None:
            key = _memo_key(item) if memo is not None else None
            known = memo.get(key) if memo is not None and key is not None else None
            if known is None:
                known, plain = _fingerprint_one(item, kinds)
                if memo is not None and key is not None and (plain or not is_dict):
                    memo.put(key, known)
                    if is_dict:
                        # First sighting of this value: loops pass this very object again.
                        memo.remember_object(item, known)  # type: ignore[arg-type]
        fps.append(known[0])
        sizes.append(known[1])
        has_model = has_model or known[2]
    return fps, sizes, has_model
