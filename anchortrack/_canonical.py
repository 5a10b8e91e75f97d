"""
Canonical form of Responses API input items (pure): equivalent items (the server would put the same
thing in front of the model) map to identical bytes, so fingerprints compare by value. The rules are
the user guide's (docs/guide/anchors.md), each tested in ``tests/core/test_canonical.py``: `ITEM_TYPES`
holds one row per item type with every fact about it (which ids and statuses are bookkeeping and why,
which JSON is kept verbatim, nulls and number types included, whether only the model makes it, what it
answers), and the docs' item table is checked against it. An SDK model counts as its ``model_dump(mode="json",
exclude_unset=True)`` without the SDK-only ``parsed`` fields; a subclass of a JSON type by its data (what
``json.dumps`` puts on the wire), never by its own ``__eq__``, ``__hash__`` or ``__repr__``. Kept apart on
purpose: different text, role, ``call_id``, ``name``, ``phase``, ``encrypted_content``, ``input_text`` vs
``output_text`` in an explicit content list, and any tool ``output`` re-serialised differently.

Also kept apart, although the server puts the same thing in front of the model: an item it resolves by
id (an ``item_reference``, a bare ``{"id"}``, a reasoning item without ``encrypted_content``) and the item
that id names. Equality here is a property of the two items alone, and they share no bytes: the named
item's id is bookkeeping (a copy without it, or with another, is the same item), and what a reference
stands for lives only on the server. Telling them equal would need the id of every item of a recorded
view and trust that it still names the same content; an id that names another item (swapped or
retargeted references) would then chain to a context the history does not resolve to. So a history that
turns items into references chains from the last anchor before the first of them, once: its response's
anchor holds the references, and the next call chains from it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple


#: Bump once per release in which the canonical bytes of any item change (a type gaining a row included):
#: it is part of every digest, so anchors recorded under another version are never matched.
CANONICAL_VERSION = 4

_INPUT_ROLES = frozenset({"user", "system", "developer"})
#: Keys the SDK adds to parsed models; never part of the wire form.
_SDK_ONLY_KEYS = frozenset({"parsed", "parsed_arguments"})
#: Keys of text parts whose empty-list value is the server default.
_EMPTY_DEFAULT_KEYS = frozenset({"annotations", "logprobs"})

_ID_STATUS = frozenset({"id", "status"})
_ID = frozenset({"id"})
_NOTHING: frozenset[str] = frozenset()
#: A tool definition's open JSON schemas, at the top and inside a namespace tool's tools.
_TOOL_PARAMETERS = tuple(
    (*outer, key)
    for outer in (("tools", "*"), ("tools", "*", "tools", "*"))
    for key in ("parameters", "output_schema")
)


class ItemType(NamedTuple):
    """
    Every fact the library holds about one item type: a row of `ITEM_TYPES`.

    Attributes:
        why: Why *ignored* holds those keys and no others, and what else compares specially.
        ignored: Top-level keys that are bookkeeping, dropped from the canonical form. An id is
            bookkeeping only when nothing can refer to it with effect: the item carries everything the
            model sees, and the item that links to it uses another key (``call_id``).
        model_output: Only the model makes it (a history holding one has model output: if it cannot
            chain it has diverged, `prefix_diverged`, rather than none, `no_history`); a role name: only
            an item with that role.
        answers: The type of the item this one answers and the key naming it (a tool output: its call).
        free_form: Paths ("*": every element of a list) to the free-form JSON the API passes through
            verbatim, where ``null`` is data, not "not given": the spec's open ``type: object`` fields.
        normalize: Rewrites the canonical form in place before *ignored* is dropped.
    """

    why: str
    ignored: frozenset[str] = _NOTHING
    model_output: bool | str = False
    answers: tuple[str, str] | None = None
    free_form: tuple[tuple[str, ...], ...] = ()
    normalize: Callable[[dict[str, Any]], None] | None = None


def _message(out: dict[str, Any]) -> None:
    content = out.get("content")
    if isinstance(content, str):
        text_type = "input_text" if out.get("role") in _INPUT_ROLES else "output_text"
        out["content"] = [{"text": content, "type": text_type}]
    elif isinstance(content, list):
        out["content"] = [_canonical_part(part) for part in content]


def _function_call(out: dict[str, Any]) -> None:
    normal = json_tokens(out["arguments"]) if isinstance(out.get("arguments"), str) else None
    if normal is not None:
        out["arguments"] = {"json": normal}


def _reasoning(out: dict[str, Any]) -> None:
    encrypted = out.get("encrypted_content")
    if isinstance(encrypted, str) and encrypted:
        out.pop("id", None)
    if out.get("content") == []:
        del out["content"]


#: The per-type table: item ``type`` (as the spec's ``InputItem`` / ``Item`` / ``ItemResource`` /
#: ``OutputItem`` unions and ``openai.types.responses`` name them) -> every fact about it; the guide's item
#: table (docs/guide/anchors.md) is generated from it. A string input ``"t"`` is one user ``message`` with
#: ``input_text`` t. Any other type, and an item with neither ``type`` nor ``role``, is unknown: compared
#: by its full value, id included, and not model output.
# fmt: off
ITEM_TYPES: dict[str, ItemType] = {
    "message": ItemType(
        "id: bookkeeping (a reference to it compares by its own id); status: \"populated when returned via"
        " API\". `{\"role\", \"content\": \"t\"}` ≡ one `input_text` part (user, system, developer) or"
        " `output_text` part (assistant); no type ≡ message; `annotations: []`, `logprobs: []` in a part"
        " ≡ absent", _ID_STATUS, model_output="assistant", normalize=_message,
    ),
    "item_reference": ItemType(
        "the id *is* the content; `{\"id\": x}` without type ≡ `{\"type\": \"item_reference\", \"id\": x}`"
    ),
    "reasoning": ItemType(
        "with `encrypted_content` (that carries the reasoning) id and status; without, status only (the"
        " server resolves it by its id). `content: []` ≡ absent (OpenAI returns the empty list,"
        " frameworks drop it)", frozenset({"status"}), model_output=True, normalize=_reasoning,
    ),
    "function_call": ItemType(
        "linked by call_id; arguments compare as JSON modulo whitespace, key order and string escapes,"
        " numbers by exact token (1 ≠ 1.0 ≠ 1.00, -0 ≠ 0), verbatim if not JSON or a key repeats",
        _ID_STATUS, model_output=True, normalize=_function_call,
    ),
    "function_call_output": ItemType(
        "linked by call_id; output verbatim", _ID_STATUS, answers=("function_call", "call_id")
    ),
    "custom_tool_call": ItemType(
        "linked by call_id; input is free text: verbatim", _ID_STATUS, model_output=True
    ),
    "custom_tool_call_output": ItemType(
        "linked by call_id; output verbatim", _ID_STATUS, answers=("custom_tool_call", "call_id")
    ),
    "computer_call": ItemType("linked by call_id", _ID_STATUS, model_output=True),
    "computer_call_output": ItemType("linked by call_id", _ID_STATUS, answers=("computer_call", "call_id")),
    "shell_call": ItemType("linked by call_id; status kept", _ID, model_output=True),
    "shell_call_output": ItemType("linked by call_id; status kept", _ID, answers=("shell_call", "call_id")),
    "apply_patch_call": ItemType("linked by call_id; status kept (required)", _ID, model_output=True),
    "apply_patch_call_output": ItemType(
        "linked by call_id; status is the result", _ID, answers=("apply_patch_call", "call_id")
    ),
    "mcp_approval_request": ItemType("answered by a response naming its id", model_output=True),
    "mcp_approval_response": ItemType(
        "names its request by approval_request_id", _ID,
        answers=("mcp_approval_request", "approval_request_id"),
    ),
    "compaction": ItemType("encrypted_content is the content", _ID, model_output=True),
    "local_shell_call": ItemType("its output names it by id", model_output=True),
    "local_shell_call_output": ItemType(
        "its id names the call it answers; output verbatim", answers=("local_shell_call", "id")
    ),
    "mcp_call": ItemType(
        "server-run tool; arguments and output verbatim; status is the tool's outcome", model_output=True
    ),
    "mcp_list_tools": ItemType(
        "server-run listing; each tool's input_schema/annotations verbatim", model_output=True,
        free_form=(("tools", "*", "input_schema"), ("tools", "*", "annotations")),
    ),
    "web_search_call": ItemType("server-run; results live under the id", model_output=True),
    "file_search_call": ItemType("server-run; results may live under the id", model_output=True),
    "code_interpreter_call": ItemType("server-run; the container state is the id's", model_output=True),
    "image_generation_call": ItemType("follow-up edits reference the image by id", model_output=True),
    "tool_search_call": ItemType(
        "call_id is optional: the id may link; arguments verbatim", model_output=True,
        free_form=(("arguments",),),
    ),
    "tool_search_output": ItemType(
        "call_id is optional: the id may link; tools' parameters and output_schema verbatim",
        answers=("tool_search_call", "call_id"),
        free_form=_TOOL_PARAMETERS,
    ),
    "program": ItemType("the spec requires the id on input"),
    "program_output": ItemType("the spec requires the id on input", answers=("program", "call_id")),
    "additional_tools": ItemType(
        "not proven bookkeeping; tools' parameters and output_schema verbatim", free_form=_TOOL_PARAMETERS
    ),
    "compaction_trigger": ItemType("not proven bookkeeping"),
    "configuration_update": ItemType(
        "not proven bookkeeping (SDK only); text.format.schema verbatim",
        free_form=(("text", "format", "schema"),),
    ),
}
# fmt: on


#: ``json.dumps`` with these options, without building an encoder each time.
_dumps = json.JSONEncoder(ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode
_dump_string = json.JSONEncoder(ensure_ascii=False).encode
#: What `_dumps` escapes in a string, the likeliest first; and how long a string must be for `_chunks`
#: to look for them (a few scans of the whole string, in C) rather than escape it character by character.
_ESCAPED = ("\n", '"', "\\", "\t", "\r", *map(chr, (*range(9), 11, 12, *range(14, 32))))
_LONG_TEXT = 4096
_escape = json.encoder.encode_basestring  # what `_dumps` writes a string with


class ItemError(TypeError):
    """An input item anchortrack cannot canonicalize."""


def _dump(model: Any) -> Any:
    """*model*'s wire JSON, without pydantic's warnings about a value the installed SDK types otherwise."""
    try:
        return model.model_dump(mode="json", exclude_unset=True, warnings=False)
    except TypeError:  # an override of model_dump without the `warnings` argument
        return model.model_dump(mode="json", exclude_unset=True)


def as_received(item: object) -> object:
    """
    A response's output item as the server sent it, which a chained request replays: an SDK model by
    its wire names (``model_dump(by_alias=True)``: ``"async"``, not the SDK's Python name ``async_``,
    which is what the SDK itself sends when the same model goes back in ``input``); other items as
    they are (a WebSocket's raw JSON).
    """
    if isinstance(item, Mapping) or not hasattr(item, "model_dump"):
        return item
    try:
        return item.model_dump(mode="json", by_alias=True, exclude_unset=True, warnings=False)
    except TypeError:  # an override of model_dump without the `warnings` argument
        return item.model_dump(mode="json", by_alias=True, exclude_unset=True)


def to_plain(item: object) -> object:
    """Return *item* as plain JSON data (SDK models dumped as the SDK sends them), else `ItemError`."""
    if type(item) is dict or isinstance(item, (Mapping, str)):
        return item
    if hasattr(item, "model_dump"):
        return _dump(item)
    raise ItemError(f"unsupported input item of type {type(item).__name__}")


def canonical_item(item: object) -> dict[str, Any]:
    """Return the canonical form of one input or output item (`ItemError`: a shape no item has)."""
    if isinstance(item, str):
        text = item if type(item) is str else str.__str__(item)
        return {"content": [{"text": text, "type": "input_text"}], "role": "user", "type": "message"}
    source = to_plain(item)
    if not isinstance(source, Mapping):  # pragma: no cover - to_plain guarantees it
        raise ItemError("input item is not an object")
    out: dict[str, Any] = {}
    for key, value in source.items():
        if value is None:
            continue
        if type(key) is not str:
            key = _key(key)
        if key in _SDK_ONLY_KEYS:
            continue
        # An exact string is its own JSON data: the common value, kept inline.
        out[key] = value if type(value) is str else _strip(value)
    kind = out.get("type")
    if kind is None:
        if "role" in out:
            kind = out["type"] = "message"
        elif "id" in out and len(out) == 1:
            kind = out["type"] = "item_reference"
    row = ITEM_TYPES.get(kind) if isinstance(kind, str) else None
    if row is not None:
        if row.normalize is not None:
            row.normalize(out)
        for key in row.ignored:
            out.pop(key, None)
        for path in row.free_form:
            _keep_verbatim(source, out, path)
    return out


def _keep_verbatim(source: object, out: object, path: tuple[str, ...]) -> None:
    """Put the free-form JSON value at *path* of *source* into *out* as it is, nulls kept."""
    step, rest = path[0], path[1:]
    if step == "*":
        if isinstance(source, (list, tuple)) and isinstance(out, list):
            for inner_source, inner_out in zip(source, out, strict=False):
                _keep_verbatim(inner_source, inner_out, rest)
        return
    if not isinstance(source, Mapping) or not isinstance(out, dict):
        return
    for key, value in source.items():
        if value is not None and _key(key) == step:
            if rest:
                _keep_verbatim(value, out.get(step), rest)
            else:
                out[step] = _strip(value, keep_null=True)


def dump_canonical(canonical: dict[str, Any]) -> bytes:
    """The bytes of an item in canonical form; a lone surrogate as its three surrogate-escaped bytes."""
    return b"".join(canonical_chunks(canonical))


def canonical_chunks(canonical: dict[str, Any]) -> list[bytes]:
    """
    `dump_canonical` as chunks whose join is its bytes: each long string that holds nothing to escape is
    a chunk of its own, encoded once and never copied into a text with the rest (a screenshot's digest
    reads its 300 KB once, not four times).
    """
    if _encoder is None:
        return [_dumps(canonical).encode("utf-8", "surrogatepass")]
    return _chunks(_encoder, canonical)


def _chunks(make_encoder: Any, canonical: object) -> list[bytes]:
    """`canonical_chunks` with ``json.encoder.c_make_encoder`` *make_encoder*, writing as `_dumps` does."""
    long: list[str] = []

    def text(value: str) -> str:
        if len(value) >= _LONG_TEXT and value.isascii() and not any(char in value for char in _ESCAPED):
            long.append(value)
            return '"\x00"'  # a JSON text has no raw NUL: where to put the string back
        return _escape(value)

    encode = make_encoder({}, _DEFAULT, text, None, ":", ",", True, False, True)
    out = "".join(encode(canonical, 0))
    if not long:
        return [out.encode("utf-8", "surrogatepass")]
    head, *rest = out.split("\x00")
    chunks = [head.encode("utf-8", "surrogatepass")]
    for value, after in zip(long, rest, strict=True):
        chunks += value.encode("ascii"), after.encode("utf-8", "surrogatepass")
    return chunks


def _c_encoder() -> Any:
    """The C encoder `canonical_chunks` runs, if this Python has it and it agrees with `_dumps`."""
    make: Any = getattr(json.encoder, "c_make_encoder", None)
    try:
        sample = {"b": [1, 2.5, None, True], "a": "\u00e9\n" + "x" * _LONG_TEXT, "c": "y" * _LONG_TEXT}
        return make if b"".join(_chunks(make, sample)) == _dumps(sample).encode() else None
    except Exception:  # noqa: BLE001 - another signature, or none: `_dumps` as it is
        return None


_DEFAULT = json.JSONEncoder().default
_encoder = _c_encoder()


def _canonical_part(part: object) -> object:
    if not isinstance(part, dict):
        return part
    if part.get("annotations") == [] or part.get("logprobs") == [] or "parsed" in part:
        empty = {k for k in _EMPTY_DEFAULT_KEYS if part.get(k) == []}
        return {k: v for k, v in part.items() if k not in _SDK_ONLY_KEYS and k not in empty}
    return part


def _key(key: object) -> str:
    if type(key) is str:
        return key
    if isinstance(key, str):
        return str.__str__(key)
    raise ItemError(f"unsupported key of type {type(key).__name__} inside an input item")


def _strip(value: object, *, keep_null: bool = False) -> object:
    """
    Return *value* as exact JSON data (``None`` values dropped from mappings unless *keep_null*): a JSON
    type's subclass as its base type's data, calling no method of its own; else `ItemError`.
    """
    kind = type(value)
    if kind is str or kind is int or kind is bool or kind is float or value is None:
        return value
    if kind is dict or isinstance(value, Mapping):
        # The SDK iterates ``items()`` to build the wire JSON: so do we.
        items = value.items()  # type: ignore[attr-defined]
        return {_key(k): _strip(v, keep_null=keep_null) for k, v in items if keep_null or v is not None}
    if kind is list or isinstance(value, (list, tuple)):
        return [_strip(v, keep_null=keep_null) for v in value]  # type: ignore[attr-defined]
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):  # not a bool: bool has no subclasses
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if hasattr(value, "model_dump"):
        return _strip(_dump(value), keep_null=keep_null)
    raise ItemError(f"unsupported value of type {kind.__name__} inside an input item")


# -- JSON strings compared by token --------------------------------------------


class _Number(str):
    """A JSON number (or NaN / Infinity constant) kept as its exact token."""


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise ValueError("a key repeats")
    return out


_TOKEN_DECODER = json.JSONDecoder(
    object_pairs_hook=_pairs, parse_float=_Number, parse_int=_Number, parse_constant=_Number
)


#: Sorted keys with ``json.dumps``'s default spacing.
_dumps_spaced = json.JSONEncoder(ensure_ascii=False, sort_keys=True).encode


def json_tokens(text: str) -> str | None:
    """
    Return *text* re-serialized with sorted keys and no whitespace, numbers by token; None when it is not
    one JSON value, has a duplicate key, or nests too deep (then it can only be compared verbatim).
    """
    try:
        value = json.loads(text)
        # The common texts, in C: written back, the parsed value gives the text again only if every
        # number, key and escape is as json.dumps writes it; then the token-by-token pass agrees.
        compact = _dumps(value)
        if compact == text or _dumps_spaced(value) == text:
            return compact
        return _emit(_TOKEN_DECODER.decode(text))
    except (ValueError, RecursionError):
        return None


def _emit(value: object) -> str:
    if isinstance(value, _Number):
        return str.__str__(value)
    if isinstance(value, str):
        return _dump_string(value)
    if isinstance(value, dict):
        body = ",".join(_dump_string(k) + ":" + _emit(v) for k, v in sorted(value.items()))
        return "{" + body + "}"
    if isinstance(value, list):
        return "[" + ",".join(_emit(v) for v in value) + "]"
    return json.dumps(value)  # true, false, null
