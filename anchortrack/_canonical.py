"""
Canonical form of Responses API input items (pure).

Two items are *equivalent* when the server would put the same thing in front
of the model for either of them.
The canonical form maps equivalent items to identical bytes, so that
fingerprints can be compared by value.
The rules (each one is tested in ``tests/core/test_canonical.py``):

=====================================================  =======================================
equivalent                                             because
=====================================================  =======================================
``"hi"`` (string input) ≡ user message ``hi``            a string input is one user message
``{"role": r, "content": "t"}`` ≡ ``{"type":           the API expands the shorthand; ``t`` is
"message", "role": r, "content": [{"type": "input_    ``input_text`` for user/system/developer
text", "text": "t"}]}``                                and ``output_text`` for assistant
a message without ``"type"`` ≡ with ``"type":          ``message`` is the default type
"message"``
``{"k": null}`` ≡ ``{}`` (at any depth)                  ``null`` means "not given"
``status`` on an item, ``id`` on any item but an        server bookkeeping, not context
``item_reference``
``"annotations": []``, ``"logprobs": []`` in a text    empty defaults the server adds
part ≡ absent
``arguments`` / ``input`` JSON strings that parse      frameworks re-serialise tool arguments
to the same value (``{"a": 1}`` ≡ ``{"a":1}``)
``parsed`` / ``parsed_arguments``                      SDK-only fields, never sent
dict key order                                         JSON objects are unordered
SDK pydantic model ≡ its ``model_dump`` dict           same wire JSON
=====================================================  =======================================

Not equivalent (kept apart on purpose): different text, role, ``call_id``,
``name``, ``phase``, ``encrypted_content``, ``input_text`` vs ``output_text``
in an explicit content list, ``1`` vs ``1.0`` in arguments, a tool
``output`` string re-serialised differently (the model reads that string
verbatim), and the ``id`` of an ``item_reference`` (it *is* the content).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from typing import Any


#: Bump when the canonical bytes of any item change.
CANONICAL_VERSION = 1

_INPUT_ROLES = frozenset({"user", "system", "developer"})
#: Top-level keys that never change what the model sees.
_IGNORED_ITEM_KEYS = frozenset({"status", "id"})
#: Keys the SDK adds to parsed models; never part of the wire form.
_SDK_ONLY_KEYS = frozenset({"parsed", "parsed_arguments"})
#: Keys of text parts whose empty-list value is the server default.
_EMPTY_DEFAULT_KEYS = frozenset({"annotations", "logprobs"})
#: Item types whose JSON-string fields are compared as parsed JSON.
_JSON_STRING_FIELDS = {"function_call": "arguments", "custom_tool_call": "input"}


def _dumps(data: object) -> str:
    return json.dumps(data, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


class ItemError(TypeError):
    """An input item anchortrack cannot canonicalize."""


def to_plain(item: object) -> object:
    """
    Return *item* as plain JSON data (SDK models dumped as the SDK sends them).

    Raises:
        ItemError: *item* is neither a mapping, a string nor an SDK model.
    """
    if isinstance(item, (Mapping, str)):
        return item
    dump = getattr(item, "model_dump", None)
    if dump is not None:
        return dump(mode="json", exclude_unset=True)
    raise ItemError(f"unsupported input item of type {type(item).__name__}")


def canonical_item(item: object) -> dict[str, Any]:
    """
    Return the canonical form of one input or output item.

    Raises:
        ItemError: the item has a shape no Responses API item has.
    """
    return canonical_and_plain(item)[0]


def canonical_and_plain(item: object) -> tuple[dict[str, Any], bool]:
    """
    Return the canonical form of *item*, and whether *item* is a plain JSON dict.

    A plain dict holds only dicts, lists, strings, numbers, booleans and None,
    so its ``repr`` names its value exactly (used to memoize fingerprints).

    Raises:
        ItemError: the item has a shape no Responses API item has.
    """
    if isinstance(item, str):
        return {
            "content": [{"text": item, "type": "input_text"}],
            "role": "user",
            "type": "message",
        }, False
    plain_dict = type(item) is dict
    source = to_plain(item)
    if not isinstance(source, Mapping):  # pragma: no cover - to_plain guarantees it
        raise ItemError("input item is not an object")
    out: dict[str, Any] = {}
    plain = [plain_dict]
    keep_id = source.get("type") == "item_reference"
    for key, value in source.items():
        if value is None or key in _SDK_ONLY_KEYS:
            continue
        if key in _IGNORED_ITEM_KEYS and not keep_id:
            continue
        out[key] = _strip(value, plain)
    kind = out.get("type")
    if kind is None and "role" in out:
        kind = out["type"] = "message"
    if kind == "message":
        content = out.get("content")
        if isinstance(content, str):
            text_type = "input_text" if out.get("role") in _INPUT_ROLES else "output_text"
            out["content"] = [{"text": content, "type": text_type}]
        elif isinstance(content, list):
            out["content"] = [_canonical_part(part) for part in content]
    elif isinstance(kind, str) and kind in _JSON_STRING_FIELDS:
        field = _JSON_STRING_FIELDS[kind]
        raw = out.get(field)
        if isinstance(raw, str):
            with contextlib.suppress(ValueError):
                out[field] = {"json": json.loads(raw)}
    return out, plain[0]


def canonical_bytes(item: object) -> bytes:
    """Return the canonical UTF-8 JSON bytes of one item."""
    return _dumps(canonical_item(item)).encode()


def dump_canonical(canonical: dict[str, Any]) -> bytes:
    """Return the bytes of an item already in canonical form."""
    return _dumps(canonical).encode()


def _canonical_part(part: object) -> object:
    if not isinstance(part, dict):
        return part
    if part.get("annotations") == [] or part.get("logprobs") == []:
        return {
            k: v
            for k, v in part.items()
            if not (k in _EMPTY_DEFAULT_KEYS and v == []) and k not in _SDK_ONLY_KEYS
        }
    if "parsed" in part:
        return {k: v for k, v in part.items() if k not in _SDK_ONLY_KEYS}
    return part


_SCALARS = (str, int, float, bool)


def _strip(value: object, plain: list[bool]) -> object:
    """
    Drop ``None`` values from nested mappings (lists keep their length).

    Nested SDK models become their JSON data (and clear ``plain[0]``); any
    other non-JSON value raises `ItemError`.
    """
    kind = type(value)
    if kind is str or kind is int or kind is bool or kind is float:
        return value
    if kind is dict:
        return {k: _strip(v, plain) for k, v in value.items() if v is not None}  # type: ignore[attr-defined]
    if kind is list:
        return [_strip(v, plain) for v in value]  # type: ignore[attr-defined]
    if value is None or isinstance(value, _SCALARS):
        return value
    plain[0] = False
    if isinstance(value, Mapping):
        return {k: _strip(v, plain) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [_strip(v, plain) for v in value]
    dump = getattr(value, "model_dump", None)
    if dump is not None:
        return _strip(dump(mode="json", exclude_unset=True), plain)
    raise ItemError(f"unsupported value of type {kind.__name__} inside an input item")
