"""
Fingerprints, prefix hashes and scopes (pure).

``f(item)`` is the first 128 bits of the SHA-256 of the item's canonical bytes (faster than BLAKE2b on
CPUs with SHA instructions, and a screenshot is hashed once, when it is new); ``h(0)`` a BLAKE2b digest
of the scheme version, the scope and the optional secret key; ``h(i) = digest(h(i-1) || f(item i))``.
So ``h(i)`` names the exact item sequence ``items[:i]`` within one scope, with the same bytes in
every process, on every host, for every library version that shares `SCHEME`.
"""

from __future__ import annotations

import hashlib
import marshal
import sys
from collections.abc import Iterable, Sequence
from typing import Any

import attrs

from ._canonical import CANONICAL_VERSION, ITEM_TYPES, canonical_chunks, canonical_item
from ._seal import fit_key


#: Version of the whole digest scheme (canonical form + hashing).
SCHEME = f"anchortrack/{CANONICAL_VERSION}.2"
DIGEST_SIZE = 16

_blake2b = hashlib.blake2b
_sha256 = hashlib.sha256


def fingerprint(item: object) -> bytes:
    """Return the 16-byte fingerprint of one item."""
    return _fingerprint_one(item)[0]


@attrs.frozen
class Scope:
    """
    Where a response id is valid: anchors never cross scopes.

    Attributes:
        base_url: The API base URL, normalised without a trailing slash.
        organization: The OpenAI organization, if the client sets one.
        project: The OpenAI project, if the client sets one.
        namespace: An optional extra partition chosen by the user.
        api_key_digest: A keyed digest of the client's API key (`api_key_digest`, never the key
            itself), so that clients with different keys never share anchors; None leaves it out.
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
        """The digest that namespaces this scope in a store, keyed by *secret_key* (if any) to hide it."""
        return self._digest(secret_key, 8).hex()

    def root(self, secret_key: bytes | None) -> bytes:
        """Return ``h(0)`` for this scope, keyed by *secret_key* if given."""
        return self._digest(secret_key, DIGEST_SIZE, SCHEME.encode() + b"\x00")

    def _digest(self, secret_key: bytes | None, size: int, prefix: bytes = b"") -> bytes:
        parts = [self.base_url.rstrip("/"), self.organization or "", self.project or "", self.namespace or ""]
        if self.api_key_digest is not None:
            parts.append(self.api_key_digest)
        key = fit_key(secret_key) if secret_key else b""
        return _blake2b(prefix + "\x1f".join(parts).encode(), digest_size=size, key=key).digest()


def api_key_digest(api_key: str, secret_key: bytes | None = None) -> str:
    """A digest naming an API key in a `Scope`, keyed by *secret_key* (else a fixed key); not reversible."""
    key = fit_key(secret_key) if secret_key else b"anchortrack/api-key/1"
    return _blake2b(api_key.encode(), digest_size=16, key=key).hexdigest()


def extend(prefix: bytes, fingerprints: Iterable[bytes]) -> bytes:
    """Continue the prefix hash *prefix* over *fingerprints*; return the last."""
    return (prefix_hashes(prefix, fingerprints) or [prefix])[-1]


def prefix_hashes(root: bytes, fingerprints: Iterable[bytes]) -> list[bytes]:
    """Return ``[h(1), …, h(n)]`` for *fingerprints* starting from *root*."""
    out: list[bytes] = []
    for fp in fingerprints:
        root = _blake2b(root + fp, digest_size=DIGEST_SIZE).digest()
        out.append(root)
    return out


#: (fingerprint, canonical size, is model output)
Known = tuple[bytes, int, bool]
#: The type and role (if a message) of one item, from its canonical form.
Kind = tuple[str, str | None]

#: The longest history whose fingerprints and prefix hashes the memo keeps for the next call.
_LAST_MAX_ITEMS = 16_384
#: Counted cost of one memo entry besides the data it holds: its key, its value and a dict slot.
_ENTRY_BYTES = 240
#: Counted cost of one dict or list in a copy (its object and slots, roughly).
_NODE_BYTES = 72
_MAX_DEPTH = 64


class _Table(dict[Any, tuple[Any, ...]]):
    """A dict whose entries end with the bytes they are counted as; `put` keeps the count under a budget."""

    counted = 0

    def put(self, key: Any, entry: tuple[Any, ...], budget: int) -> None:
        """Remember *entry* under *key*; past *budget*, drop the oldest entries down to 7/8 of it."""
        old = self.pop(key, None)
        self[key] = entry
        counted = self.counted + entry[-1] - (old[-1] if old is not None else 0)
        if counted > budget:
            for oldest in list(self):  # a snapshot: other threads may add entries
                if counted <= budget * 7 // 8:
                    break
                dropped = self.pop(oldest, None)
                counted -= dropped[-1] if dropped is not None else 0
        self.counted = counted


class _Seen(dict[int, list[Any]]):
    """
    ``id(item) -> [exact type, copy, known, longest str, call, bytes counted]``: the items proven by
    identity, counted by the leaves their copies keep alive. `put` keeps the count under a budget: it
    drops the entries whose longest string nothing but the entry holds (the caller dropped the item: no
    object can match them again), then the oldest entries the current call did not use; if the current
    call's items alone fill the budget, the new entry is not kept. So a history larger than the budget
    costs the hashing of its newest items on each call, never a cascade that re-hashes all of it.
    """

    counted = 0
    swept = 0  # `counted` after the last sweep of every entry
    full = -1  # the call whose items alone filled the budget

    def __init__(self) -> None:
        super().__init__()
        self.large: set[int] = set()  # the keys of large entries (maybe stale): swept at each large entry

    def put(self, key: int, entry: list[Any], budget: int, large: bool) -> None:
        """Remember *entry* under *key*; sweep the large entries on a *large* one, all every budget/16."""
        if self.full == entry[4]:
            return
        old = self.pop(key, None)
        self[key] = entry
        counted = self.counted + entry[-1] - (old[-1] if old is not None else 0)
        if large:
            self.large.add(key)
        if counted > budget or counted - self.swept > budget // 16:
            counted -= self._sweep(list(self), entry[4])  # a snapshot: other threads may add entries
            self.swept = counted
        elif large:
            counted -= self._sweep(list(self.large), entry[4])
        if counted > budget:
            for oldest in list(self):
                if counted <= budget * 7 // 8:
                    break
                dropped = self.get(oldest)
                if dropped is not None and dropped[4] != entry[4]:
                    counted -= self.pop(oldest, dropped)[-1]
            if counted > budget:
                counted -= self.pop(key, entry)[-1]
                self.full = entry[4]
        self.counted = counted

    def _sweep(self, keys: list[int], call: int) -> int:
        """Drop the entries of *keys* not used by *call* whose item the caller dropped; the bytes freed."""
        freed = 0
        for key in keys:
            entry = self.get(key)
            if entry is None:
                self.large.discard(key)
            elif entry[4] != call and _held_by_memo_only(entry) and self.pop(key, None) is entry:
                self.large.discard(key)
                freed += entry[-1]
        return freed


def _references(entry: list[Any]) -> int:
    return sys.getrefcount(entry[3])


def _held_by_memo_only(entry: list[Any]) -> bool:
    """Whether the longest string of *entry* has no reference but its entry's (CPython's count)."""
    return type(entry[3]) is str and _references(entry) <= _UNHELD


def _calibrate() -> int:
    """What `_references` reads of a string that only an entry (and its copy) holds; 0 without refcounts."""
    if not hasattr(sys, "getrefcount"):
        return 0
    copied = _copied({"text": "".join(("anchortrack ", "calibration"))})
    assert copied is not None
    copy, _, longest = copied
    entry = [dict, copy, None, longest, 0, 0]
    del copied, copy, longest
    return _references(entry)


class Memo:
    """
    The fingerprints of items seen before, reused only on an exact proof that calls no method of a user
    type (an item edited in place, or a ``str`` subclass's ``__eq__``, cannot pass for the old one):
    for plain data (`_strings`) of any size, by ``id(item)`` and a copy of its dicts and lists sharing its
    strings, compared by ``==`` (it costs the item's structure, not its size, while the item holds the
    same strings); else by exact type and value (`exact_value`: it costs the item's size). Bounded by
    *max_bytes*: a quarter for values (one over *max_item_bytes* keyed by its digest), three quarters for
    the strings the copies keep alive (the caller's own while it holds them; let go once it drops them:
    see `_Seen`).
    """

    def __init__(self, max_bytes: int = 64 << 20, max_item_bytes: int = 64 << 10) -> None:
        self.max_bytes = max_bytes
        self.max_item_bytes = max_item_bytes
        #: (exact type, exact value or its digest) -> (what it is known as, bytes counted)
        self._known = _Table()
        #: id(item) -> its copy and what it is known as (`_Seen`)
        self._seen = _Seen()
        #: The number of the current call of `many`: its items are the last the memo lets go of.
        self._call = 0
        #: The last history: its root, fingerprints and prefix hashes (read and replaced whole).
        self._last: tuple[bytes, Sequence[bytes], list[bytes]] = (b"", [], [])

    @property
    def nbytes(self) -> int:
        """The bytes counted against *max_bytes*."""
        return self._known.counted + self._seen.counted

    def many(self, items: Sequence[object]) -> list[Known]:
        """
        `known` of each of *items*, as one call (a history): the items the memo keeps first. Those past the
        last history's length are *new* (a loop's), copied before their value is read: a large one never is.
        """
        self._call += 1
        known, old = self.known, len(self._last[1])
        return [*map(known, items[:old]), *[known(item, True) for item in items[old:]]]

    def known(self, item: object, new: bool = False) -> Known:
        """The fingerprint, canonical size and model-output flag of *item* (`ItemError`: not an item)."""
        seen = self._seen.get(id(item))
        if seen is not None and type(item) is seen[0] and _proven(item, seen[1]):
            seen[4] = self._call
            return seen[2]  # type: ignore[no-any-return]
        plain = new and (type(item) is dict or type(item) is str)  # a loop's new item: copied first
        copied = _copied(item) if plain and self._seen.full != self._call else None
        if copied is not None and copied[1] > self.max_item_bytes:
            return self._large(item, copied)
        value = exact_value(item)
        if value is None:
            return _fingerprint_one(item)
        small = len(value) <= self.max_item_bytes
        plain = type(item) is dict or type(item) is str
        if not small and plain and self._seen.full != self._call and (copied := copied or _copied(item)):
            return self._large(item, copied)
        key = (type(item), value if small else _sha256(value).digest())
        entry = self._known.get(key)
        if entry is not None:
            return entry[0]  # type: ignore[no-any-return]
        known = _fingerprint_one(item)
        self._known.put(key, (known, len(key[1]) + _ENTRY_BYTES), self.max_bytes // 4)
        if small and (copied := copied or _copied(item) if plain else _model_copied(item)) is not None:
            self._remember(item, known, copied, large=False)  # a loop passes this very object again
        return known

    def _large(self, item: object, copied: tuple[Any, int, str | None]) -> Known:
        """Large plain data with room to keep it: proven by identity from now on, no value key."""
        known = _fingerprint_one(item)
        self._remember(item, known, copied, large=True)
        return known

    def _remember(self, item: object, known: Known, copied: tuple[Any, int, str | None], large: bool) -> None:
        copy, counted, longest = copied
        entry = [type(item), copy, known, longest, self._call, counted + _ENTRY_BYTES]
        self._seen.put(id(item), entry, self.max_bytes - self.max_bytes // 4, large)

    def prefix_hashes(self, root: bytes, fingerprints: Sequence[bytes]) -> list[bytes]:
        """`prefix_hashes`, hashing only the new items when the history extends the last one (a loop's)."""
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


def exact_value(item: object) -> bytes | None:
    """
    Bytes naming *item*'s value exactly, or None (a user's own types): an exact ``dict`` or ``str``'s
    `marshal` form (which refuses subclasses and anything but plain data), an ``openai`` model's JSON.
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


def _copied(value: object) -> tuple[Any, int, str | None] | None:
    """
    A copy of the dicts and lists of *value* sharing its strings, the bytes they keep alive and the longest
    ``str``; None unless *value* is `_strings` (exact dicts of ``str`` keys, lists, ``str`` and None).
    """
    found: list[Any] = [0, None]  # bytes, longest str
    try:
        return _copy(value, 0, found), found[0], found[1]
    except ValueError:
        return None


class _Fields(tuple[Any, frozenset[str], bool]):
    """An SDK model's fields: a `_copy` of its ``__dict__``, its set fields, whether its extra is None."""


def _model_copied(model: Any) -> tuple[_Fields, int, str | None] | None:
    """`_copied` for an SDK model (`exact_value`) whose fields are `_strings` and that has no extra fields."""
    extra = model.__pydantic_extra__
    copied = None if extra else _copied(model.__dict__)
    if copied is None:
        return None
    copy, counted, longest = copied
    return _Fields((copy, frozenset(model.__pydantic_fields_set__), extra is None)), counted, longest


def _proven(item: object, copy: Any) -> bool:
    """Whether *item* (of its remembered type) still holds what its copy (`_copied`, `_model_copied`) does."""
    return _same_model(item, copy) if type(copy) is _Fields else _strings(item) and item == copy


def _same_model(model: Any, fields: _Fields) -> bool:
    """
    Whether *model* (of the type it had) still serializes as when *fields* were taken: the same `_strings`
    fields (``==`` against their copy), the same set fields (what ``exclude_unset`` reads), no extra fields.
    """
    copy, set_fields, no_extra = fields
    state, extra = model.__dict__, model.__pydantic_extra__
    if extra is not None if no_extra else type(extra) is not dict or extra:
        return False
    return _strings(state) and state == copy and model.__pydantic_fields_set__ == set_fields


def _copy(node: Any, depth: int, found: list[Any]) -> Any:
    kind = type(node)
    if kind is str:
        found[0] += len(node)
        if found[1] is None or len(node) > len(found[1]):
            found[1] = node
        return node
    if node is None:
        return node
    if depth > _MAX_DEPTH or (kind is not dict and kind is not list):
        raise ValueError
    found[0] += _NODE_BYTES
    if kind is list:
        return [_copy(item, depth + 1, found) for item in node]
    out = {}
    for key, item in node.items():
        if type(key) is not str:
            raise ValueError
        out[key] = _copy(item, depth + 1, found)
    return out


def _strings(value: object, depth: int = 0) -> bool:
    """
    True if *value* is an exact str or None, or an exact dict (of str keys) or list of such, <= 64 deep:
    then ``==`` against a `_copy` of it calls no user code, and costs its structure while it holds the
    very strings the copy shares (CPython compares a string with itself by identity).
    """
    kind = type(value)
    if kind is str or value is None:
        return True
    if depth > _MAX_DEPTH:
        return False
    if kind is dict:
        for key, item in value.items():  # type: ignore[attr-defined]
            if type(key) is not str or (
                type(item) is not str and item is not None and not _strings(item, depth + 1)
            ):
                return False
        return True
    if kind is list:
        for item in value:  # type: ignore[attr-defined]
            if type(item) is not str and item is not None and not _strings(item, depth + 1):
                return False
        return True
    return False


_UNHELD = _calibrate()


def kind_of(canon: dict[str, Any]) -> Kind:
    """The type and role (if a string) of an item in canonical form."""
    role = canon.get("role")
    return str(canon.get("type", "?")), role if isinstance(role, str) else None


def _fingerprint_one(item: object) -> Known:
    canon = canonical_item(item)
    kind, role = kind_of(canon)
    data, *long = canonical_chunks(canon)
    digest, size = _sha256(data), len(data)
    for chunk in long:  # each long string, and what follows it
        digest.update(chunk)
        size += len(chunk)
    row = ITEM_TYPES.get(kind)
    made = False if row is None else row.model_output  # a role name: model output in that role only
    is_model = made is True or made == role
    return digest.digest()[:DIGEST_SIZE], size, is_model


def fingerprint_items(
    items: Sequence[object], memo: Memo | None = None
) -> tuple[list[bytes], list[int], bool]:
    """The fingerprints of a history, their canonical sizes, whether any is model output (`ItemError`)."""
    each = memo.many(items) if memo is not None else [_fingerprint_one(item) for item in items]
    return [k[0] for k in each], [k[1] for k in each], any(k[2] for k in each)


def fingerprint_history(items: Sequence[object], memo: Memo) -> tuple[list[bytes], list[int], bool, int]:
    """
    `fingerprint_items` of a loop's history, and how many leading items the memo's last history
    shares (the views a loop chains from end at or after them).
    """
    fps, sizes, has_model = fingerprint_items(items, memo)
    last = memo._last[1]
    shared = min(len(last), len(fps))
    if fps[:shared] != last[:shared]:
        shared = next(i for i, (a, b) in enumerate(zip(fps, last, strict=False)) if a != b)
    return fps, sizes, has_model, shared
