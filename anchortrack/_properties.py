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

That holds for servers that carry properties over or that anchortrack does
not know. Where the server is known to apply them per request — OpenAI
(``api.openai.com``), Azure OpenAI (``*.openai.azure.com``,
``*.cognitiveservices.azure.com``, ``*.services.ai.azure.com``), or a base
URL the user declared in ``ANCHORTRACK_PER_REQUEST_PROPERTIES`` (base URLs
separated by spaces or commas) — the digest is empty for every request, so a
conversation keeps chaining when its ``tools`` change (a deferred tool
loaded, an agent handoff).

A server can also say so itself, on each response: ``anchortrack serve``
adds ``"anchortrack": {"properties": "per_request"}`` to every response
object (`ANNOUNCEMENT`). A response that says so becomes an anchor usable
whatever the properties of the request that chains from it (`ANY`): the
server that made it will apply that request's own. Nothing is learned per
base URL, so a new process, another worker sharing the store, and
``anchortrack explain`` all read the same anchors the same way.

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
import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit


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


#: The properties an anchor records when its server announced that it applies them per request:
#: it matches every request (`matches`). Never a digest (those are empty or 16 bytes).
ANY = b"*"
#: The field of a response object by which a server announces that it applies them per request,
#: and its value (``anchortrack serve`` writes them; only this exact value counts).
ANNOUNCEMENT_FIELD = "anchortrack"
ANNOUNCEMENT = {"properties": "per_request"}


def matches(recorded: bytes, requested: bytes) -> bool:
    """Whether a request with *requested* properties may chain from an anchor that *recorded* these."""
    return recorded in (requested, ANY)


def announced(response: object) -> bool:
    """Whether *response* (an SDK model or its JSON) says its server applies the properties per request."""
    if isinstance(response, Mapping):
        said = response.get(ANNOUNCEMENT_FIELD)
    else:  # the SDK's models keep fields they do not know as attributes
        said = getattr(response, ANNOUNCEMENT_FIELD, None)
    return bool(said == ANNOUNCEMENT)


#: Base URLs (separated by spaces or commas) of servers the user declares apply properties per request.
PER_REQUEST_ENV = "ANCHORTRACK_PER_REQUEST_PROPERTIES"
#: Hosts known to apply every request property to that request only.
_PER_REQUEST_HOSTS = frozenset({"api.openai.com"})
_PER_REQUEST_HOST_SUFFIXES = (".openai.azure.com", ".cognitiveservices.azure.com", ".services.ai.azure.com")


def applies_per_request(base_url: str | None) -> bool:
    """
    Whether the server at *base_url* applies the carried properties per request (never over a chain).

    True for OpenAI's and Azure OpenAI's hosts and for base URLs declared in
    ``ANCHORTRACK_PER_REQUEST_PROPERTIES`` (a declared URL covers the URLs
    under it); False for every other server, unknown ones included.
    """
    if not base_url:
        return False
    url = str(base_url).rstrip("/")
    declared = _declared(os.environ.get(PER_REQUEST_ENV, ""))
    return _known(url) or any(url == d or url.startswith(d + "/") for d in declared)


@functools.lru_cache(maxsize=8)
def _declared(value: str) -> frozenset[str]:
    return frozenset(url.rstrip("/") for url in value.replace(",", " ").split())


@functools.lru_cache(maxsize=64)
def _known(url: str) -> bool:
    try:
        host = (urlsplit(url).hostname or "").lower()
    except ValueError:
        return False
    return host in _PER_REQUEST_HOSTS or host.endswith(_PER_REQUEST_HOST_SUFFIXES)


def properties_digest(params: Mapping[str, Any], base_url: str | None = None) -> bytes:
    """
    Digest the carried-over properties among *params* (``create`` arguments) sent to *base_url*.

    ``b""`` when the server at *base_url* applies them per request
    (`applies_per_request`): then no change of them stops a chain.
    Otherwise absent, None and the SDK's "not given" sentinels count as
    absent, and a request that sets none of them digests to ``b""``. Values compare as the
    JSON the SDK would send (keys sorted; pydantic models dumped as the SDK
    dumps them); absent and an explicit default (``tool_choice="auto"``) are
    different, since a server could carry a value over in place of the one
    but not the other.

    Raises:
        TypeError: A value has no JSON form.
    """
    if params.keys().isdisjoint(_NAMES) or applies_per_request(base_url):  # the common call sets none
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
