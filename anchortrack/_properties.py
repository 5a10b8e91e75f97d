"""The request properties a Responses server could carry over a chain (pure): vLLM's agentic-api gives a
chained request the previous response's ``tools``, so an anchor records a digest of its request's properties
and a request chains only from an anchor with its own (else ``properties_changed``). docs/compatibility.md
says why."""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from ._settings import PER_REQUEST_PROPERTIES


#: The properties whose digest must match for a request to chain.
# fmt: off
CARRIED_PROPERTIES: tuple[str, ...] = (
    "tools", "tool_choice", "parallel_tool_calls", "max_tool_calls", "text", "reasoning", "truncation",
    "context_management",
)
# fmt: on

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
    field = ANNOUNCEMENT_FIELD  # the SDK's models keep fields they do not know as attributes
    said = response.get(field) if isinstance(response, Mapping) else getattr(response, field, None)
    return bool(said == ANNOUNCEMENT)


#: The variable of base URLs of servers the user declares apply properties per request.
PER_REQUEST_ENV = str(PER_REQUEST_PROPERTIES.env)
_AZURE_SUFFIXES = (".openai.azure.com", ".cognitiveservices.azure.com", ".services.ai.azure.com")


def openai_host(url: str) -> bool:
    """Whether *url* is OpenAI's or Azure OpenAI's: properties apply per request, chains as documented."""
    host = (urlsplit(url).hostname or "").lower()
    return host == "api.openai.com" or host.endswith(_AZURE_SUFFIXES)


def applies_per_request(base_url: str | None) -> bool:
    """Whether the server at *base_url* applies the carried properties per request (never over a chain):
    OpenAI's and Azure OpenAI's hosts, and base URLs declared (with the URLs under them) in the variable."""
    return bool(base_url) and _applies(str(base_url).rstrip("/"), PER_REQUEST_PROPERTIES.from_env() or ())


@functools.lru_cache(maxsize=64)
def _applies(url: str, declared: tuple[str, ...]) -> bool:
    try:
        if openai_host(url):
            return True
    except ValueError:
        pass
    return any(url == d or url.startswith(d + "/") for d in declared)


def properties_digest(params: Mapping[str, Any], base_url: str | None = None) -> bytes:
    """Digest the carried-over properties among *params* (``create`` arguments) sent to *base_url*: ``b""``
    when that server applies them per request or none is set (None and the SDK's sentinels are absent). Values
    compare as the JSON the SDK sends; absent and an explicit default (``tool_choice="auto"``) differ, since a
    server could carry a value over in place of one. A value with no JSON form raises `TypeError`."""
    if params.keys().isdisjoint(_NAMES) or applies_per_request(base_url):  # the common call sets none
        return b""
    present = {name: params[name] for name in CARRIED_PROPERTIES if given(params.get(name))}
    text_format = params.get(TEXT_FORMAT)
    if given(text_format):  # parse() derives text.format from a type
        present[TEXT_FORMAT] = _schema_of(text_format) if isinstance(text_format, type) else text_format
    if not present:
        return b""
    data = json.dumps(
        present, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=_jsonable
    ).encode()
    return hashlib.blake2b(_DOMAIN + data, digest_size=16).digest()


def _jsonable(value: object) -> Any:
    """The JSON data of an SDK model, which `json` cannot write by itself; any other value has none."""
    serializer = getattr(value, "__pydantic_serializer__", None)
    if serializer is not None and not isinstance(value, type):
        return serializer.to_python(value, mode="json", exclude_unset=True)
    if isinstance(value, (set, frozenset)):
        raise TypeError("a set has no order, so no JSON form")
    raise TypeError(f"{type(value).__name__} has no JSON form")


@functools.lru_cache(maxsize=64)
def _schema_of(cls: type) -> Any:
    """What the ``text.format`` of *cls* is derived from: its name and JSON schema."""
    name = f"{cls.__module__}.{cls.__qualname__}"
    try:
        json_schema = getattr(cls, "model_json_schema", None)
        if callable(json_schema):
            return {"name": name, "schema": json_schema()}
        import pydantic

        return {"name": name, "schema": pydantic.TypeAdapter(cls).json_schema()}
    except Exception:  # noqa: BLE001 - a type pydantic cannot describe: name it only
        return {"name": name, "id": id(cls)}
