"""Reading and rewriting the arguments of ``responses.create`` / ``parse`` (pure), before the SDK serializes
anything. ``extra_body`` keys win over the arguments, as in the client; the SDK's "not given" sentinels count
as absent."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from ._properties import CARRIED_PROPERTIES, TEXT_FORMAT, properties_digest
from ._properties import given as _given


#: Keys of ``extra_body`` that change what anchortrack must do.
_STATE_KEYS = ("input", "previous_response_id", "conversation", "store", *CARRIED_PROPERTIES)


@attrs.frozen
class Request:
    """One ``responses.create`` / ``parse`` call, as anchortrack sees it: *body* is what to send stateless
    (an iterable ``input`` made a list), *items* the input items (a string is one). *overridden*:
    ``extra_body`` sets ``input`` or ``previous_response_id``, which would override any rewrite.
    *properties*: the digest of the properties a server could carry over (`anchortrack._properties`)."""

    body: Mapping[str, Any]
    items: list[Any]
    previous_response_id: str | None = None
    conversation: bool = False
    store: bool = True
    overridden: bool = False
    properties: bytes = b""

    @property
    def caller_managed(self) -> bool:
        """Whether the caller manages server-side state itself."""
        return self.previous_response_id is not None or self.conversation or self.overridden


def read_request(params: Mapping[str, Any], base_url: str | None = None) -> Request:
    """Read the state-relevant parts of ``create`` keyword arguments sent to *base_url*.

    Raises:
        TypeError: ``input`` is neither a string nor an iterable of items,
            or a carried-over property has no JSON form.
    """
    extra = params.get("extra_body")
    if not isinstance(extra, Mapping):
        extra = {}
    effective: Mapping[str, Any] = params
    if any(k in extra for k in _STATE_KEYS):
        effective = {**params, **{k: extra[k] for k in _STATE_KEYS if k in extra}}
        if "text" in extra:  # the JSON body's text replaces the one parse() derives
            effective = {k: v for k, v in effective.items() if k != TEXT_FORMAT}
    raw = effective.get("input")
    body = params
    if not _given(raw):
        items: list[Any] = []
    elif isinstance(raw, str):
        items = [raw]
    elif isinstance(raw, list):
        items = raw
    elif isinstance(raw, Iterable) and not isinstance(raw, (Mapping, bytes)):
        items = list(raw)
        if effective is params:
            body = {**params, "input": items}
    else:
        raise TypeError(f"input must be a string or a list of items, not {type(raw).__name__}")
    tools = params.get("tools")
    if _given(tools) and not isinstance(tools, (list, tuple, Mapping, str)) and isinstance(tools, Iterable):
        tools = list(tools)  # read once here, so the SDK sends the same list
        body = {**body, "tools": tools}
        if "tools" not in extra:
            effective = {**effective, "tools": tools}
    previous = effective.get("previous_response_id")
    return Request(
        body=body,
        items=items,
        previous_response_id=previous if isinstance(previous, str) and previous else None,
        conversation=_given(effective.get("conversation")),
        store=effective.get("store") is not False,
        overridden="input" in extra or "previous_response_id" in extra,
        properties=properties_digest(effective, base_url),
    )


def chained_body(request: Request, skip: int, response_id: str) -> dict[str, Any]:
    """Return new arguments sending ``input[skip:]`` after ``previous_response_id``."""
    return {**request.body, "input": request.items[skip:], "previous_response_id": response_id}
