"""
Reading and rewriting a ``POST /responses`` body (pure).

anchortrack works on the body the openai client built (SDK models already
dumped to JSON data), so what it compares is what goes on the wire.
``extra_body`` keys win over the body, as in the client.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs


#: Keys of ``extra_body`` that change what anchortrack must do.
_STATE_KEYS = ("input", "previous_response_id", "conversation", "store")


@attrs.frozen
class Request:
    """
    One ``POST /responses`` call, as anchortrack sees it.

    Attributes:
        body: The body to send when going stateless (exactly the caller's).
        options: The request options (``extra_body`` included).
        items: The input items (a string input is one item).
        previous_response_id: Set by the caller, if so.
        conversation: Whether the caller set ``conversation``.
        store: False only when the request says ``store: false``.
        overridden: ``extra_body`` sets ``input`` or ``previous_response_id``,
            which would override any rewrite: the call is sent as given.
    """

    body: Mapping[str, Any]
    options: Mapping[str, Any]
    items: list[Any]
    previous_response_id: str | None = None
    conversation: bool = False
    store: bool = True
    overridden: bool = False

    @property
    def caller_managed(self) -> bool:
        """Whether the caller manages server-side state itself."""
        return self.previous_response_id is not None or self.conversation or self.overridden


def read_request(body: Mapping[str, Any], options: Mapping[str, Any]) -> Request:
    """
    Read the state-relevant parts of a body and its options.

    Raises:
        TypeError: ``input`` is neither a string nor a list.
    """
    extra = options.get("extra_json")
    effective: Mapping[str, Any] = body
    if isinstance(extra, Mapping) and any(k in extra for k in _STATE_KEYS):
        effective = {**body, **{k: extra[k] for k in _STATE_KEYS if k in extra}}
    raw = effective.get("input")
    if raw is None:
        items: list[Any] = []
    elif isinstance(raw, str):
        items = [raw]
    elif isinstance(raw, list):
        items = raw
    else:
        raise TypeError(f"input must be a string or a list, not {type(raw).__name__}")
    previous = effective.get("previous_response_id")
    overridden = isinstance(extra, Mapping) and ("input" in extra or "previous_response_id" in extra)
    return Request(
        body=body,
        options=options,
        items=items,
        previous_response_id=previous if isinstance(previous, str) and previous else None,
        conversation=effective.get("conversation") is not None,
        store=effective.get("store") is not False,
        overridden=overridden,
    )


def chained_body(request: Request, skip: int, response_id: str) -> dict[str, Any]:
    """Return a new body sending ``input[skip:]`` after ``previous_response_id``."""
    body = dict(request.body)
    body["input"] = request.items[skip:]
    body["previous_response_id"] = response_id
    return body
