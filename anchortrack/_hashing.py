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
import marshal
from collections.abc import Iterable, Sequence
from typing import Any

import attrs

from ._canonical import CANONICAL_VERSION, canonical_bytes, canonical_item, dump_canonical
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
    for fp in fingerprints:
        root = _blake2b(root + fp, digest_size=DIGEST_SIZE).digest()
        out.append(root)
    return out


#: Item types that only the model produces (besides assistant messages).
# fmt: off
MODEL_ITEM_TYPES = frozenset((
    "function_call", "custom_tool_call", "reasoning", "compaction", "file_search_call", "web_search_call",
    "computer_call", "code_interpreter_call", "image_generation_call", "local_shell_call", "shell_call",
    "apply_patch_call", "mcp_call", "mcp_list_tools", "mcp_approval_request", "tool_search_call",
))
# fmt: on

#: (fingerprint, canonical size, is model output)
Known = tuple[bytes, int, bool]
#: The type and role (if a message) of one item, from its canonical form.
Kind = tuple[str, str | None]

#: The longest history whose fingerprints and prefix hashes the memo keeps for the next call.
_LAST_MAX_ITEMS = 16_384
#: Counted cost of one memo entry besides the data it holds: its key, its value and a dict slot.
_ENTRY_BYTES = 240
_MAX_DEPTH = 64


class Memo:
    """
    Remembers the fingerprints of items seen before, reusing one only on an exact proof.

    No proof calls a method of a user type, so a ``str`` subclass with its own
    ``__eq__``/``__hash__`` (a log-masking string, say) cannot pass an edited
    item off as the old one, and an item edited in place is fingerprinted
    afresh.

    * By value: an item is remembered under its type and the bytes of its
      exact value (`exact_value`); they serve the object a loop passes again
      and an equal copy a framework rebuilt alike.
    * By identity, the loop's common case: an item seen for the first time
      whose data is all strings (a message, a tool output, an SDK tool call)
      is also remembered under ``id(item)`` with a copy of its containers.
      When an object with that id comes back, its data is checked to be
      exact strings again and then compared with the copy: with exact
      strings only, ``==`` calls no user code and cannot equate ``1``,
      ``1.0`` and ``True``. This spares serializing and hashing the value on
      every call of a loop.

    Bounded by bytes: each entry is counted (the data it holds plus a fixed
    overhead) against *max_bytes* (24 MiB: about 10,000 items of a tool loop
    with 1.5 KB outputs), half for each table, oldest first out. An item whose
    value takes more than *max_item_bytes* is remembered by a digest of its
    value only, so the memo never keeps a large text alive after the caller
    dropped it.
    """

    def __init__(self, max_bytes: int = 24 << 20, max_item_bytes: int = 64 << 10) -> None:
        self.max_bytes = max_bytes
        self.max_item_bytes = max_item_bytes
        self.nbytes = 0
        self._known: dict[tuple[type, bytes], Known] = {}
        #: id(item) -> (its exact type, a copy of its data, what it is known as, bytes counted)
        self._seen: dict[int, tuple[type, object, Known, int]] = {}
        self._sizes = [0, 0]  # bytes counted for _known, _seen
        #: The last history: its root, fingerprints and prefix hashes (read and replaced whole).
        self._last: tuple[bytes, Sequence[bytes], list[bytes]] = (b"", [], [])

    def known(self, item: object) -> Known:
        """
        The fingerprint, canonical size and model-output flag of *item*.

        Raises:
            ItemError: the item has no Responses API shape.
        """
        seen = self._seen.get(id(item))
        if seen is not None and type(item) is seen[0] and _strings_view(item) == seen[1]:
            return seen[2]
        value = exact_value(item)
        if value is None:
            return _fingerprint_one(item)
        small = len(value) <= self.max_item_bytes
        key = (type(item), value if small else _blake2b(value, digest_size=DIGEST_SIZE).digest())
        known = self._known.get(key)
        if known is not None:
            return known
        known = self._known[key] = _fingerprint_one(item)
        self._count(0, len(key[1]) + _ENTRY_BYTES)
        view = _strings_view(item) if small else None
        if view is not None:  # a value seen for the first time: a loop passes this very object again
            size = len(value) + _ENTRY_BYTES
            old = self._seen.pop(id(item), None)
            self._seen[id(item)] = (type(item), _copy(view), known, size)
            self._count(1, size - (old[3] if old is not None else 0))
        return known

    def last_fingerprints(self) -> Sequence[bytes]:
        """The fingerprints of the last history whose prefix hashes were taken."""
        return self._last[1]

    def prefix_hashes(self, root: bytes, fingerprints: Sequence[bytes]) -> list[bytes]:
        """
        `prefix_hashes`, continuing the last history's when this one extends it.

        A loop's history is the last one plus new items: when the root is the
        same and the first fingerprints equal the last call's, their prefix
        hashes are the same values, so only the new items are hashed.
        """
        last_root, last_fps, last_hashes = self._last  # one read: safe across threads
        k = len(last_fps)
        if k and root == last_root and len(fingerprints) >= k and fingerprints[:k] == last_fps:
            hashes = [*last_hashes, *prefix_hashes(last_hashes[-1], fingerprints[k:])]
        else:
            hashes = prefix_hashes(root, fingerprints)
        # Bounded; neither list is changed after this call (the planner owns both).
        kept = fingerprints if type(fingerprints) is list else list(fingerprints)
        self._last = (root, kept, hashes) if len(hashes) <= _LAST_MAX_ITEMS else (b"", [], [])
        return hashes

    def clear(self) -> None:
        """Forget everything."""
        self._known.clear()
        self._seen.clear()
        self._last = (b"", [], [])
        self._sizes = [0, 0]
        self.nbytes = 0

    def _count(self, table: int, size: int) -> None:
        """Count *size* more bytes against *table*; past its half of the budget, drop its oldest entries."""
        self._sizes[table] += size
        budget = self.max_bytes // 2
        if self._sizes[table] > budget:
            # Down to 7/8 of the half in one pass: removing one entry at a time
            # rescans the deleted slots at the dict's front every time.
            entries: dict[Any, Any] = self._known if table == 0 else self._seen
            dropped = []
            for key, value in list(entries.items()):  # a snapshot: other threads may add entries
                if self._sizes[table] <= budget * 7 // 8:
                    break
                self._sizes[table] -= len(key[1]) + _ENTRY_BYTES if table == 0 else value[3]
                dropped.append(key)
            for key in dropped:
                entries.pop(key, None)
        self.nbytes = self._sizes[0] + self._sizes[1]


def exact_value(item: object) -> bytes | None:
    """
    Bytes that name *item*'s value exactly, or None when there are none the memo can trust.

    An exact ``dict`` or ``str``: its `marshal` form (version 2, no
    back-references), which raises for subclasses of the built-in types and
    for anything that is not plain data, so equal bytes mean an equal value of
    exactly the same types. An SDK model of a class of the ``openai``
    package: the JSON its own serializer writes with ``exclude_unset``, the
    body the SDK sends (without warnings: a value the SDK types otherwise is
    written as it is). Anything else (a user's Mapping or model class, whose
    own methods may decide what it holds) has none.
    """
    kind = type(item)
    if kind is dict or kind is str:
        try:
            return marshal.dumps(item, 2)  # type: ignore[arg-type]
        except ValueError:  # a subclass or a non-JSON type inside, or nested too deep
            return None
    serializer = getattr(kind, "__pydantic_serializer__", None)
    if serializer is None or not kind.__module__.startswith("openai."):
        return None
    try:
        return serializer.to_json(item, exclude_unset=True, warnings=False)  # type: ignore[no-any-return]
    except Exception:  # noqa: BLE001 - a value its serializer cannot write: no key
        return None


def _strings(value: object, depth: int = 0) -> bool:
    """True if every node is an exact dict (of exact str keys), list or str, or None; no deeper than 64."""
    kind = type(value)
    if kind is str or value is None:
        return True
    if depth > _MAX_DEPTH:
        return False
    if kind is dict:
        for key, item in value.items():  # type: ignore[attr-defined]
            if type(key) is not str or (type(item) is not str and not _strings(item, depth + 1)):
                return False
        return True
    if kind is list:
        for item in value:  # type: ignore[attr-defined]  # noqa: SIM110 - a loop: no generator per node
            if type(item) is not str and not _strings(item, depth + 1):
                return False
        return True
    return False


def _strings_view(item: Any) -> object | None:
    """
    The data of *item* that ``==`` may compare exactly, or None.

    An exact str, or an exact dict of strings (`_strings`): the item itself.
    An SDK model (of a class `exact_value` accepts) whose fields and extra
    fields are flat strings (a tool call): its fields, extra fields and the
    set of names set, which is all its serializer reads (``_strings`` at
    depth 64 accepts no nested container).
    """
    kind = type(item)
    if kind is dict or kind is str:
        return item if _strings(item) else None
    fields, extra, names = item.__dict__, item.__pydantic_extra__, item.__pydantic_fields_set__
    if type(fields) is not dict or type(names) is not set or not _strings(list(names), _MAX_DEPTH):
        return None
    if _strings(fields, _MAX_DEPTH) and (
        extra is None or (type(extra) is dict and _strings(extra, _MAX_DEPTH))
    ):
        return fields, extra, names
    return None


def _copy(value: Any) -> Any:
    """A copy of the containers of a `_strings_view` (sets frozen); the strings are shared."""
    kind = type(value)
    if kind is dict:
        return {key: _copy(item) for key, item in value.items()}
    if kind is list or kind is tuple:
        return kind(_copy(item) for item in value)
    return frozenset(value) if kind is set else value


def _fingerprint_one(item: object, kinds: list[Kind] | None = None) -> Known:
    canon = canonical_item(item)
    kind, role = canon.get("type"), canon.get("role")
    if kinds is not None:
        kinds.append((str(canon.get("type", "?")), role if isinstance(role, str) else None))
    data = dump_canonical(canon)
    is_model = isinstance(kind, str) and (
        (kind == "message" and role == "assistant") or kind in MODEL_ITEM_TYPES
    )
    return _blake2b(data, digest_size=DIGEST_SIZE).digest(), len(data), is_model


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
    known = memo.known if memo is not None and kinds is None else lambda item: _fingerprint_one(item, kinds)
    fps: list[bytes] = []
    sizes: list[int] = []
    has_model = False
    for item in items:
        fp, size, is_model = known(item)
        fps.append(fp)
        sizes.append(size)
        has_model = has_model or is_model
    return fps, sizes, has_model


def fingerprint_history(items: Sequence[object], memo: Memo) -> tuple[list[bytes], list[int], bool, int]:
    """
    `fingerprint_items` of a loop's history, and how many leading items the memo's last history shares.

    The views a loop chains from end at or after those shared items.
    """
    fps, sizes, has_model = fingerprint_items(items, memo)
    last = memo.last_fingerprints()
    shared = min(len(last), len(fps))
    if fps[:shared] != last[:shared]:
        shared = next(i for i, (a, b) in enumerate(zip(fps, last, strict=False)) if a != b)
    return fps, sizes, has_model, shared
