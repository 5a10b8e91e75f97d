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
import sys
from collections.abc import Iterable, Sequence
from itertools import compress, count, islice
from operator import not_
from typing import Any

import attrs

from ._canonical import (
    CANONICAL_VERSION,
    _plain_pydantic_dump,
    canonical_and_plain,
    canonical_bytes,
    dump_canonical,
)
from ._seal import fit_key


#: Version of the whole digest scheme (canonical form + hashing).
SCHEME = f"anchortrack/{CANONICAL_VERSION}.1"
DIGEST_SIZE = 16

_blake2b = hashlib.blake2b
_marshal = marshal.dumps


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


#: (fingerprint, canonical size, is model output)
Known = tuple[bytes, int, bool]
#: How the memo remembers one object: (copy, known, counted bytes, kind). The kind is the item's
#: exact type (the copy is its containers' copy, or the string itself), or None when the object is
#: remembered by the digest of its value (the copy is that digest).
Entry = tuple[object, Known, int, "type | None"]
#: The last history fingerprinted through `Memo`: an entry per leading item, their fingerprints
#: and sizes, and the index of the first model output among them (-1: none).
_Run = tuple[list[Entry], list[bytes], list[int], int]


class Memo:
    """
    Remembers fingerprints of items seen before, reusing one only on a proof.

    A proof is exact: no method of a user type is ever called to obtain it, so
    a ``str`` subclass with its own ``__eq__``/``__hash__``/``__repr__`` (a
    log-masking string, say) cannot pass an edited item off as the old one.

    * By identity: a dict whose nodes are all exact ``dict``/``list``/``str``
      (or None) is remembered under ``id(item)`` with a private copy of its
      containers (sharing the immutable leaf strings). When an object with
      that id comes back, its nodes are checked to be exact built-in types
      again, and only then is ``copy == item`` (a C comparison that, with
      exact strings only, calls no user code and cannot alias ``1``/``1.0``/
      ``True``) taken as proof that its value is unchanged.
    * An SDK model of an exact ``openai`` class whose fields are all strings
      or None (a tool call, say) is remembered the same way: a copy of its
      fields, of the set of names set and of its extra fields, checked
      exactly on every use (see `_same_model`). It costs no serialization.
    * By value: any other exact dict is keyed by a digest of its
      `marshal` serialization, which refuses every non-exact type and names
      the value exactly; any other SDK model by a digest of its JSON
      serialization.
    * A loop's history is its last one plus new items: the memo keeps how it
      remembered each item of the last history (`fingerprint_history`),
      proves the next history's leading items against those entries in one
      pass that stops at the first changed item (each proof as above), and
      takes their fingerprints as they were.

    Bounded by bytes: every entry is counted (the copy, the strings it
    shares, the digest) against *max_bytes* (24 MiB: about 10,000 items
    of a tool loop with 1.5 KB outputs, so a long history is never
    fingerprinted afresh); the oldest entries go first. Items with more than
    *max_item_bytes* are only ever remembered by digest, so the memo never
    keeps a large text alive after the caller dropped it, and what it keeps
    of smaller ones is bounded by *max_bytes*.
    """

    def __init__(self, max_bytes: int = 24 << 20, max_item_bytes: int = 64 << 10) -> None:
        self.max_bytes = max_bytes
        self.max_item_bytes = max_item_bytes
        self.nbytes = 0
        self._entries: dict[bytes, Known] = {}
        self._objects: dict[int, Entry] = {}
        self._last: tuple[bytes, Sequence[bytes], list[bytes]] = (b"", [], [])
        #: The last history's entries, fingerprints, sizes and first model output's index.
        self._run: _Run = ([], [], [], -1)

    def prefix_hashes(self, root: bytes, fingerprints: Sequence[bytes]) -> list[bytes]:
        """
        `prefix_hashes`, continuing the last history's when this one extends it.

        A loop's history is the last one plus new items: when the root is the
        same and the first fingerprints equal the last call's (one C-level
        comparison of the digests), their prefix hashes are the same values,
        so only the new items are hashed.
        """
        last_root, last_fps, last_hashes = self._last  # one read: safe across threads
        k = len(last_fps)
        n = len(fingerprints)
        # The memo hands out the same digest objects for items it remembers, so
        # the comparison is mostly pointer equality; every copy of a long list
        # touches each digest, so the lists are kept, not copied.
        if k and root == last_root and n >= k and (fingerprints if n == k else fingerprints[:k]) == last_fps:
            hashes = [*last_hashes, *prefix_hashes(last_hashes[-1], fingerprints[k:])]
        else:
            hashes = prefix_hashes(root, fingerprints)
        if len(hashes) <= _LAST_MAX_ITEMS:  # bounded: about 100 bytes an item
            # Neither list is changed after this call (read_history owns both).
            kept = fingerprints if type(fingerprints) is list else list(fingerprints)
            self._last = (root, kept, hashes)
        else:
            self._last = (b"", [], [])
        return hashes

    def get(self, key: bytes) -> Known | None:
        """Return what was remembered under the digest *key*."""
        return self._entries.get(key)

    def put(self, key: bytes, value: Known) -> None:
        """Remember *value* under the digest *key*."""
        if key not in self._entries:
            self.nbytes += _ENTRY_BYTES
            self._entries[key] = value
            self._shrink()

    def remember_object(
        self, item: object, value: Known, frozen: tuple[Any, int] | None = None
    ) -> Entry | None:
        """
        Remember *item* by a copy of its containers.

        A dict must be small and hold only strings (and None); an SDK model
        only strings (and None) in its fields and extra fields. *frozen* is
        that copy and its size, when the caller made it already. Returns the
        entry (None when *item* cannot be remembered so).
        """
        kind = type(item)
        if frozen is None:
            frozen = (
                _freeze(item, self.max_item_bytes)
                if kind is dict
                else _freeze_model(item, self.max_item_bytes)
            )
        if frozen is None:
            return None
        copy, size = frozen
        size += _ENTRY_BYTES
        old = self._objects.pop(id(item), None)
        if old is not None:
            self.nbytes -= old[2]
        entry: Entry = (copy, value, size, kind)
        self._objects[id(item)] = entry
        self.nbytes += size
        self._shrink()
        return entry

    def clear(self) -> None:
        """Forget everything."""
        self._entries.clear()
        self._objects.clear()
        self._last = (b"", [], [])
        self._run = ([], [], [], -1)
        self.nbytes = 0

    def _shrink(self) -> None:
        # Digests may use a quarter of the bytes, copies the rest; oldest first in each.
        # Once over, go down to 7/8 in one pass: removing the oldest key one
        # at a time rescans the deleted slots at the dict's front every time,
        # which made a full memo quadratic in the history's length.
        entries_budget = self.max_bytes // 4
        entries = self._entries
        if len(entries) * _ENTRY_BYTES > entries_budget:
            drop = len(entries) - entries_budget * 7 // 8 // _ENTRY_BYTES
            for key in list(islice(entries, drop)):
                del entries[key]
            self.nbytes -= drop * _ENTRY_BYTES
        objects = self._objects
        if self.nbytes > self.max_bytes:
            target = self.max_bytes * 7 // 8
            dropped: list[int] = []
            for object_id, (_, _, size, _) in objects.items():
                if self.nbytes <= target:
                    break
                self.nbytes -= size
                dropped.append(object_id)
            for object_id in dropped:
                del objects[object_id]


#: The longest history whose prefix hashes the memo keeps for the next call.
_LAST_MAX_ITEMS = 16_384
#: Counted cost of one digest entry: key, value tuple and dict slot.
_ENTRY_BYTES = 240
_MAX_DEPTH = 64
_getsizeof = sys.getsizeof


def _exact_strings(value: object, depth: int) -> bool:
    """True if every node is an exact dict/list/str or None (keys exact str)."""
    if depth > _MAX_DEPTH:
        return False
    kind = type(value)
    if kind is dict:
        for key, item in value.items():  # type: ignore[attr-defined]
            if type(key) is not str:
                return False
            if type(item) is not str and item is not None and not _exact_strings(item, depth + 1):
                return False
        return True
    if kind is list:
        for item in value:  # type: ignore[attr-defined]
            if type(item) is not str and item is not None and not _exact_strings(item, depth + 1):
                return False
        return True
    return kind is str or value is None


def _freeze(value: object, budget: int, depth: int = 0) -> tuple[object, int] | None:
    """
    Copy dict/list containers, sharing str and None leaves; count the bytes held.

    Returns None (meaning "cannot remember by identity") if a node is of
    another type — ``==`` would equate ``1``, ``1.0`` and ``True``, whose JSON
    differs, and would call a subclass's own ``__eq__`` — or if the copy
    would hold more than *budget* bytes.
    """
    if depth > _MAX_DEPTH:
        return None
    kind = type(value)
    if kind is str:
        size = _getsizeof(value)
        return (value, size) if size <= budget else None
    if value is None:
        return None, 0
    if kind is dict:
        out: dict[str, object] = {}
        total = _getsizeof(value)
        for key, item in value.items():  # type: ignore[attr-defined]
            if type(key) is not str:
                return None
            if type(item) is str:  # the common value, inline
                out[key] = item
                total += _getsizeof(item) + _getsizeof(key)
                if total > budget:
                    return None
                continue
            frozen = _freeze(item, budget - total, depth + 1)
            if frozen is None:
                return None
            out[key] = frozen[0]
            total += frozen[1] + _getsizeof(key)
            if total > budget:
                return None
        return out, total
    if kind is list:
        items = []
        total = _getsizeof(value)
        for item in value:  # type: ignore[attr-defined]
            frozen = _freeze(item, budget - total, depth + 1)
            if frozen is None:
                return None
            items.append(frozen[0])
            total += frozen[1]
            if total > budget:
                return None
        return items, total
    return None


def _flat_strings(fields: dict[Any, Any]) -> bool:
    """True if every key is an exact ``str`` and every value an exact ``str`` or None."""
    for key, value in fields.items():
        if type(key) is not str or (type(value) is not str and value is not None):
            return False
    return True


def _string_keys(keys: Iterable[object]) -> bool:
    for key in keys:  # noqa: SIM110 - as above
        if type(key) is not str:
            return False
    return True


#: A remembered SDK model: its fields, the names set, its extra fields (or None).
_ModelCopy = tuple[dict[str, Any], frozenset[str], dict[str, Any] | None]


#: The remembered sets of fields set, shared between models (never changed).
_NAME_SETS: dict[frozenset[str], frozenset[str]] = {}
_MAX_NAME_SETS = 1024
#: The remembered empty extra fields, shared (never changed).
_NO_EXTRA: dict[str, Any] = {}


def _freeze_model(model: object, budget: int) -> tuple[_ModelCopy, int] | None:
    """
    Copy an SDK model's fields, names set and extra fields; count the bytes held.

    Only an exact class of the openai package whose fields and extra fields
    are all exact strings or None (a tool call, say); None otherwise.
    """
    if not _trusted_model(type(model)):
        return None
    fields = getattr(model, "__dict__", None)
    names = getattr(model, "__pydantic_fields_set__", None)
    extra = getattr(model, "__pydantic_extra__", None)
    if type(fields) is not dict or type(names) is not set:
        return None
    if not (_flat_strings(fields) and _string_keys(names)):
        return None
    if extra is not None:
        if type(extra) is not dict or not _flat_strings(extra):
            return None
        extra = dict(extra) if extra else _NO_EXTRA
    size = _getsizeof(fields) * 2 + _getsizeof(names)
    for value in fields.values():
        size += _getsizeof(value)
    if extra:
        size += _getsizeof(extra) + sum(_getsizeof(v) for v in extra.values())
    if size > budget:
        return None
    frozen_names = frozenset(names)
    # Models of one kind mostly share one set of names: one copy of it, kept warm.
    shared = _NAME_SETS.get(frozen_names)
    if shared is None and len(_NAME_SETS) < _MAX_NAME_SETS:
        shared = _NAME_SETS[frozen_names] = frozen_names
    return (dict(fields), shared if shared is not None else frozen_names, extra), size


def _same_model(model: Any, copy: _ModelCopy) -> bool:
    """
    Whether an SDK model still holds exactly what *copy* remembered.

    Its fields and extra fields (names and values) are checked to be exact
    strings or None before they are compared, so the comparisons call no
    user code. The set of names set decides what an ``exclude_unset`` dump
    includes, so it is compared too (the remembered side on the left: its
    exact names are looked up in the model's set, as the serializer does).
    """
    fields, names, extra = copy
    now = model.__dict__
    if type(now) is not dict or not _flat_strings(now):
        return False
    now_extra = model.__pydantic_extra__
    if now_extra is None or extra is None:
        if now_extra is not extra:
            return False
    elif type(now_extra) is not dict or (
        (now_extra or extra) and (not _flat_strings(now_extra) or extra != now_extra)
    ):
        return False
    now_names = model.__pydantic_fields_set__
    return type(now_names) is set and fields == now and names == now_names


#: Model classes seen: the field names their serializer writes by name, in order, and the names
#: that do not dump as themselves (an alias, an excluded field); None when the serializer may
#: write anything else (a custom serializer, computed fields, an overridden ``model_dump``).
_dump_layouts: dict[type, tuple[tuple[str, ...], frozenset[str]] | None] = {}


def _dump_layout(kind: type) -> tuple[tuple[str, ...], frozenset[str]] | None:
    if kind in _dump_layouts:
        return _dump_layouts[kind]
    layout = None
    decorators = getattr(kind, "__pydantic_decorators__", None)
    fields = getattr(kind, "__pydantic_fields__", None)
    if (
        _plain_pydantic_dump(kind)
        and decorators is not None
        and isinstance(fields, dict)
        and not decorators.field_serializers
        and not decorators.model_serializers
        and not getattr(kind, "__pydantic_computed_fields__", None)
    ):
        special = frozenset(
            name
            for name, field in fields.items()
            if field.alias is not None or field.serialization_alias is not None or field.exclude
        )
        layout = (tuple(fields), special)
    _dump_layouts[kind] = layout
    return layout


def _model_source(kind: type, copy: _ModelCopy) -> dict[str, Any] | None:
    """
    What ``model_dump(mode="json", exclude_unset=True)`` gives for a remembered SDK model, or None.

    For a model of exact strings and None (see `_freeze_model`) the dump is
    the fields that were set, in declaration order, then every extra field:
    the serializer adds nothing and changes no string. Taken only for a class
    whose serializer is pydantic's own, with no custom serializer and no
    computed field, and none of whose set fields dumps under another name.
    """
    layout = _dump_layout(kind)
    if layout is None:
        return None
    order, special = layout
    fields, names, extra = copy
    if not names.isdisjoint(special):
        return None
    source = {}
    for name in order:
        if name in names:
            if name not in fields:  # a field deleted from the model: the serializer decides
                return None
            source[name] = fields[name]
    if extra:
        source.update(extra)
    return source


_OPENAI_PACKAGE = "openai."
_trusted_models: dict[type, bool] = {}


def _trusted_model(kind: type) -> bool:
    """An exact class of the openai package (a user subclass may change its own dump)."""
    trusted = _trusted_models.get(kind)
    if trusted is None:
        trusted = kind.__module__.startswith(_OPENAI_PACKAGE) and hasattr(kind, "__pydantic_serializer__")
        _trusted_models[kind] = trusted
    return trusted


def _memo_key(item: object) -> bytes | None:
    """A digest naming *item*'s value exactly, or None when there is no exact one."""
    kind = type(item)
    if kind is dict:
        try:
            data = _marshal(item, 2)  # type: ignore[arg-type]
        except ValueError:  # a non-exact type, or nested too deep
            return None
        return _blake2b(b"d" + data, digest_size=DIGEST_SIZE).digest()
    if _trusted_model(kind):
        serialized: bytes = kind.__pydantic_serializer__.to_json(item, exclude_unset=True)  # type: ignore[attr-defined]
        return _blake2b(
            b"m" + kind.__name__.encode() + b"\x00" + serialized, digest_size=DIGEST_SIZE
        ).digest()
    return None


#: The type and role (if a message) of one item, from its canonical form.
Kind = tuple[str, str | None]


def _fingerprint_one(
    item: object, kinds: list[Kind] | None = None, source: dict[str, Any] | None = None
) -> tuple[Known, bool]:
    canon, plain = canonical_and_plain(item, source)
    kind = canon.get("type")
    role = canon.get("role")
    is_model = isinstance(kind, str) and (
        (kind == "message" and role == "assistant") or kind in MODEL_ITEM_TYPES
    )
    if kinds is not None:
        kinds.append((str(canon.get("type", "?")), role if isinstance(role, str) else None))
    data = dump_canonical(canon)
    return (_blake2b(data, digest_size=DIGEST_SIZE).digest(), len(data), is_model), plain


def _remembered(item: object, memo: Memo) -> tuple[Known, Entry | None]:
    """
    Fingerprint *item* through the memo, remembering it for next time.

    Returns its fingerprint and how it is remembered (None when it is not).
    An item that can be remembered by a copy (a tool call, a tool output)
    costs its canonical form and that copy, and no digest of its value: the
    next call proves it against the copy.
    """
    kind = type(item)
    if kind is dict:
        frozen = _freeze(item, memo.max_item_bytes)
        if frozen is not None:
            fresh = _fingerprint_one(item, source=item)[0]  # type: ignore[arg-type]
            return fresh, memo.remember_object(item, fresh, frozen)
    else:
        frozen = _freeze_model(item, memo.max_item_bytes)
        if frozen is not None:
            # The wire form of the model, read from the copy (no serializer run).
            source = _model_source(kind, frozen[0])
            fresh = _fingerprint_one(item, source=source)[0]
            return fresh, memo.remember_object(item, fresh, frozen)
    key = _memo_key(item)
    if key is None:
        fresh = _fingerprint_one(item)[0]
        return fresh, ((item, fresh, 0, str) if type(item) is str else None)
    known = memo.get(key)
    if known is not None:
        return known, (key, known, 0, None)
    fresh = _fingerprint_one(item)[0]
    memo.put(key, fresh)
    # First sighting of this value: loops pass this very object again.
    entry = memo.remember_object(item, fresh)
    return fresh, (entry if entry is not None else (key, fresh, 0, None))


def _unchanged(item: object, entry: Entry) -> bool:
    """Whether *item* provably still is what *entry* remembered (see `Memo`)."""
    copy, _, _, kind = entry
    if kind is None:
        return _memo_key(item) == copy
    if type(item) is not kind:
        return False
    if kind is dict:
        return _exact_strings(item, 0) and copy == item
    if kind is str:
        return item == copy  # two exact strings
    return _same_model(item, copy)  # type: ignore[arg-type]


def proven_count(items: Sequence[object], entries: Sequence[Entry]) -> int:
    """
    How many leading items of *items* provably still are what *entries* remembered.

    One C-level pass that stops at the first changed item; each proof is `_unchanged`.
    """
    return next(compress(count(), map(not_, map(_unchanged, items, entries))), min(len(items), len(entries)))


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
    fps, sizes, has_model, _ = _fingerprint(items, memo, kinds, False)
    return fps, sizes, has_model


def fingerprint_history(items: Sequence[object], memo: Memo) -> tuple[list[bytes], list[int], bool, int]:
    """
    `fingerprint_items` of a whole history, and how many leading items were the memo's last history.

    The memo's last history's leading items are proven in one pass
    (`proven_count`) and their fingerprints taken as they were; this history
    becomes the memo's last one. The proven items are the last history,
    unchanged: the views a loop chains from end at or after them.
    """
    return _fingerprint(items, memo, None, True)


def _fingerprint(
    items: Sequence[object], memo: Memo | None, kinds: list[Kind] | None, run: bool
) -> tuple[list[bytes], list[int], bool, int]:
    fps: list[bytes] = []
    sizes: list[int] = []
    has_model = False
    if kinds is not None or memo is None:
        for item in items:
            known = _fingerprint_one(item, kinds)[0]
            fps.append(known[0])
            sizes.append(known[1])
            has_model = has_model or known[2]
        return fps, sizes, has_model, 0
    first_model = -1
    entries: list[Entry] = []
    extending = run  # the run covers the leading items remembered in a way `_unchanged` can prove
    done = 0
    if run:
        # A loop's history is its last one plus new items: prove the remembered
        # leading items in one pass (stopping at the first that changed), and
        # take their fingerprints and sizes as they were.
        last_entries, last_fps, last_sizes, last_first_model = memo._run
        done = proven_count(items, last_entries)
        if done:
            fps, sizes, entries = last_fps[:done], last_sizes[:done], last_entries[:done]
            if 0 <= last_first_model < done:
                first_model, has_model = last_first_model, True
    objects_get = memo._objects.get
    add_fp, add_size = fps.append, sizes.append
    for index, item in enumerate(items[done:] if done else items, done):
        # The loop's common case, inline: an object seen before, provably unchanged.
        entry = objects_get(id(item))
        if entry is not None and _unchanged(item, entry):
            known = entry[1]
        else:
            known, entry = _remembered(item, memo)
        add_fp(known[0])
        add_size(known[1])
        if known[2] and first_model < 0:
            first_model, has_model = index, True
        if extending:
            if entry is None:
                extending = False
            else:
                entries.append(entry)
    if run:
        memo._run = (
            (entries, fps, sizes, first_model) if len(entries) <= _LAST_MAX_ITEMS else ([], [], [], -1)
        )
    return fps, sizes, has_model, done
