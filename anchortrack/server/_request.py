"""Validation of ``POST /v1/responses`` bodies (pure)."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from anchortrack.server import _errors
from anchortrack.server._errors import APIError
from anchortrack.server._items import OUTPUTS, Item, item_type


_ROLES = ("user", "assistant", "system", "developer")
_ID_PATTERN = re.compile(r"[A-Za-z0-9_-]+")


@dataclass(frozen=True)
class CreateRequest:
    """A validated ``POST /v1/responses`` body (*body* as received; a string input is one `user_message`)."""

    body: dict[str, Any]
    model: str
    input_items: list[Item]
    instructions: str | list[Any] | None
    previous_response_id: str | None
    store: bool
    stream: bool


def user_message(text: str) -> Item:
    """The item a plain string input stands for."""
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


# (parameters, accepted types, expected-type wording), checked in this order; None is always allowed, a
# boolean only where it is expected.
_OPTIONAL: list[tuple[tuple[str, ...], tuple[type, ...], str]] = [
    (("store", "stream", "background", "parallel_tool_calls"), (bool,), "a boolean"),
    (("tools", "include"), (list,), "an array"),
    (("tool_choice",), (str, dict), "a string or an object"),
    (("metadata", "text", "reasoning", "stream_options"), (dict,), "an object"),
    (("temperature", "top_p"), (int, float), "a decimal"),
    (("top_logprobs", "max_output_tokens", "max_tool_calls"), (int,), "an integer"),
    (("user", "safety_identifier", "prompt_cache_key", "service_tier", "truncation"), (str,), "a string"),
    (("previous_response_id",), (str,), "a string"),
    (("conversation",), (str, dict), "a string or an object"),
    (("instructions",), (str, list), "a string or an array of input items"),
]

#: Every body parameter of ``POST /v1/responses`` (openai 3.54 and the spec).
KNOWN_PARAMETERS: frozenset[str] = frozenset(
    [name for names, _, _ in _OPTIONAL for name in names]
    + ["access_programs", "background_options", "context_management", "image", "input", "model"]
    + ["moderation", "prompt", "prompt_cache_options", "prompt_cache_retention"]
)


def required(
    mapping: dict[str, Any], name: str, param: str, kind: type | tuple[type, ...], expected: str
) -> Any:
    """*mapping*'s value of *name*: present (not null) and of *kind*, else refused as *param*."""
    value = mapping.get(name)
    if value is None:
        raise _errors.missing_parameter(param)
    if not isinstance(value, kind):
        raise _errors.invalid_type(param, expected, value)
    return value


def _check_item(item: object, where: str) -> Item:
    if not isinstance(item, dict):
        raise _errors.invalid_type(where, "an input item object", item)
    kind, item_id = item.get("type"), item.get("id")
    for name, value in (("type", kind), ("id", item_id)):
        if value is not None and not isinstance(value, str):
            raise _errors.invalid_type(f"{where}.{name}", "a string", value)
    if kind is None and item.get("role") is None and isinstance(item_id, str):
        return item  # an item reference without "type" (ItemReferenceParam)
    if kind is None or kind == "message":
        if item.get("role") is None:
            raise _errors.missing_parameter(f"{where}.type" if kind is None else f"{where}.role")
        role = required(item, "role", f"{where}.role", str, "a string")
        if role not in _ROLES:
            supported = "Supported values are: 'user', 'assistant', 'system', and 'developer'."
            raise _errors.invalid_value(f"{where}.role", f"Invalid value: '{role}'. {supported}")
        if "content" not in item:
            raise _errors.missing_parameter(f"{where}.content")
        content = item["content"]
        if not isinstance(content, (str, list)):
            raise _errors.invalid_type(f"{where}.content", "a string or an array of content parts", content)
        for index, part in enumerate(content if isinstance(content, list) else []):
            if not isinstance(part, dict):
                raise _errors.invalid_type(f"{where}.content[{index}]", "an object", part)
        return item
    for name in item_type(kind).required:
        required(item, name, f"{where}.{name}", str, "a string")
    if item_type(OUTPUTS.get(kind)).paired:  # the output of a call the context checks pair
        required(item, "output", f"{where}.output", (str, list), "a string or an array")
    return item


def parse_create_request(body: object) -> CreateRequest:
    """Validate a decoded body's shapes (APIError 400 in OpenAI's words), leaving its items as received."""
    if not isinstance(body, dict):
        got = _errors.json_type_name(body)
        message = f"Invalid type for request body: expected an object, but got {got} instead."
        raise APIError(400, message, code="invalid_type")
    for key in body:
        if key not in KNOWN_PARAMETERS:
            raise _errors.unknown_parameter(str(key))
    model = required(body, "model", "model", str, "a string")
    for names, types, expected in _OPTIONAL:
        for name in names:
            value = body.get(name)
            accepted = isinstance(value, types) and (bool in types or not isinstance(value, bool))
            if value is not None and not accepted:
                raise _errors.invalid_type(name, expected, value)
    tokens = body.get("max_output_tokens")
    if tokens is not None and tokens < 16:
        message = "Invalid 'max_output_tokens': integer below minimum value. Expected a value >= 16, but got"
        message += f" {tokens} instead."
        raise _errors.bad_request("max_output_tokens", "integer_below_min_value", message)
    for name, kind, expected in (("tools", dict, "an object"), ("include", str, "a string")):
        for index, element in enumerate(body.get(name) or ()):
            if not isinstance(element, kind):
                raise _errors.invalid_type(f"{name}[{index}]", expected, element)
    instructions = body.get("instructions")
    for index, element in enumerate(instructions if isinstance(instructions, list) else []):
        _check_item(element, f"instructions[{index}]")
    raw_input = body.get("input")
    if raw_input is None:
        items: list[Item] = []
    elif isinstance(raw_input, str):
        items = [user_message(raw_input)]
    elif isinstance(raw_input, list):
        items = [_check_item(item, f"input[{index}]") for index, item in enumerate(raw_input)]
    else:
        raise _errors.invalid_type("input", "a string or an array of input items", raw_input)
    previous, conversation = body.get("previous_response_id"), body.get("conversation")
    if previous is not None and conversation is not None:
        message = "Mutually exclusive parameters: 'previous_response_id' and 'conversation'. "
        message += "Ensure you are only providing one of: 'previous_response_id' or 'conversation'."
        raise _errors.bad_request("conversation", "mutually_exclusive_parameters", message)
    if conversation is not None:
        message = "The anchortrack server does not support conversations; use previous_response_id or send "
        raise _errors.unsupported("conversation", message + "the full input.")
    if body.get("background") is True:
        message = "The anchortrack server does not support background responses."
        raise _errors.unsupported("background", message)
    if previous == "":
        message = "Invalid 'previous_response_id': empty string. Expected a string with minimum length 1, "
        message += "but got an empty string instead."
        raise _errors.bad_request("previous_response_id", "empty_string", message)
    if previous is not None and not _ID_PATTERN.fullmatch(previous):
        message = f"Invalid 'previous_response_id': '{previous}'. Expected an ID that contains letters, "
        message += "numbers, underscores, or dashes, but this value contained additional characters."
        raise _errors.invalid_value("previous_response_id", message)
    store, stream = body.get("store") is not False, body.get("stream") is True
    return CreateRequest(body, model, items, instructions, previous, store=store, stream=stream)


#: Deepest nesting of arrays and objects accepted in a request body.
MAX_JSON_DEPTH = 100


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # NaN and Infinity (parse_constant) too
        raise ValueError(f"{text} is not valid JSON")
    return value


def _check_value(value: Any) -> None:
    """Refuse a body nested too deep or holding a lone surrogate (JSON can escape one)."""
    stack = [(value, 1)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, str) and not node.isascii():
            try:
                node.encode("utf-8")
            except UnicodeEncodeError:
                raise _errors.invalid_json() from None
        if isinstance(node, (dict, list)):
            if level > MAX_JSON_DEPTH:
                raise APIError(400, f"Invalid body: JSON nested deeper than {MAX_JSON_DEPTH} levels.")
            if isinstance(node, dict):
                stack.extend((key, level) for key in node)
            children = node.values() if isinstance(node, dict) else node
            stack.extend((child, level + 1) for child in children)


def decode_json(raw: bytes) -> Any:
    """Decode a request body: strict JSON, checked first so that a body the server could not store or answer
    is a 400, never a stored response followed by a 500."""
    try:
        value = json.loads(raw, parse_constant=_finite_float, parse_float=_finite_float)
    except (ValueError, RecursionError):
        raise _errors.invalid_json() from None
    _check_value(value)
    return value
