"""
The request properties a Responses server could carry over a chain (pure).

OpenAI resolves ``previous_response_id`` to the chain's *items* only: every
other request property applies to the one request that sets it. Other
servers do more. vLLM's agentic-api, when a chained request omits ``tools``
or ``tool_choice``, gives the model the previous response's (observed on
0.9.0). A request anchortrack chains there would reach the model with tools
the caller did not pass.

So each anchor records a digest of the properties below as the request that
made it set them, and a request chains only from an anchor whose digest equals
its own: loops that keep their tools and settings keep chaining, and a request
whose properties changed goes out in full (``properties_changed``).

Chosen: what defines the model's task besides the items and the instructions,
and what a server stores on the response it could inherit from — the tools and
how to use them (``tools``, ``tool_choice``, ``parallel_tool_calls``,
``max_tool_calls``), the form of the output (``text``, and ``parse()``'s
``text_format``, which becomes ``text.format``), ``reasoning``, and how the
context is cut (``truncation``, ``context_management``).
Left out: ``instructions`` and ``prompt`` (per-request system prompts, which
OpenAI documents as swappable between turns of one chain), ``model``
(always sent), sampling (``temperature``, ``top_p``, ``top_logprobs``,
``max_output_tokens``) and bookkeeping (``metadata``, ``include``, ``store``,
``stream``, ``user``, ``safety_identifier``, ``prompt_cache_*``,
``service_tier``, ``background``).
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Mapping
from typing import Any


#: The properties whose digest must match for a request to chain.
CARRIED_PROPERTIES: tuple[str, ...] = (
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "max_tool_calls",
    "text",
    "reasoning",
    "truncation",
    "context_management",
)

#: ``parse()`` turns this into ``text.format``.
TEXT_FORMAT = "text_format"

_DOMAIN = b"anchortrack/properties/1\x00"
#: Every name `properties_digest` reads.
_NAMES = frozenset((*CARRIED_PROPERTIES, TEXT_FORMAT))


def given(value: object) -> bool:
    """False for None and for the SDK's ``omit`` / ``NOT_GIVEN`` sentinels."""
    return value is not None and type(value).__name__ not in ("Omit", "NotGiven")


def properties_digest(params: Mapping[str, Any]) -> bytes:
    """
    Digest the carried-over properties among *params* (``create`` arguments).

    Absent, None and the SDK's "not given" sentinels count as absent, and a
    request that sets none of them digests to ``b""``. Values compare as the
    JSON the SDK would send (keys sorted; pydantic models dumped as the SDK
    dumps them); absent and an explicit default (``tool_choice="auto"``) are
    different, since a server could carry a value over in place of the one
    but not the other.

    Raises:
        TypeError: A value has no JSON form.
    """
    if params.keys().isdisjoint(_NAMES):  # the common call sets none of them
        return b""
    present = {name: params[name] for name in CARRIED_PROPERTIES if given(params.get(name))}
    text_format = params.get(TEXT_FORMAT)
    if given(text_format):
        present[TEXT_FORMAT] = _text_format(text_format)
    if not present:
        return b""
    data = json.dumps(
        present, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=_jsonable
    ).encode()
    return hashlib.blake2b(_DOMAIN + data, digest_size=16).digest()


def _jsonable(value: object) -> Any:
    """The JSON data of a value `json` cannot write by itself (an SDK model, an iterable)."""
    serializer = getattr(value, "__pydantic_serializer__", None)
    if serializer is not None and not isinstance(value, type):
        return serializer.to_python(value, mode="json", exclude_unset=True)
    if isinstance(value, (set, frozenset)):
        raise TypeError("a set has no order, so no JSON form")
    if isinstance(value, (tuple, list)):
        return list(value)
    raise TypeError(f"{type(value).__name__} has no JSON form")


def _text_format(value: object) -> Any:
    """The ``text.format`` that ``parse()`` derives from *value* (a type)."""
    if isinstance(value, type):
        return _schema_of(value)
    return value


@functools.lru_cache(maxsize=64)
def _schema_of(cls: type) -> Any:
    """
    What the ``text.format`` of *cls* is derived from: its name and JSON schema.

    The SDK derives the strict schema it sends from this one, so equal
    digests mean equal formats.
    """
    name = f"{cls.__module__}.{cls.__qualname__}"
    try:
        json_schema = getattr(cls, "model_json_schema", None)
        if callable(json_schema):
            return {"name": name, "schema": json_schema()}
        import pydantic

        return {"name": name, "schema": pydantic.TypeAdapter(cls).json_schema()}
    except Exception:  # noqa: BLE001 - a type pydantic cannot describe: name it only
        return {"name": name, "id": id(cls)}
