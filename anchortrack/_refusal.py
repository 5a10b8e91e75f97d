"""What a refused chained request means (pure): the anchor is gone, the organization refuses
``previous_response_id`` (ZDR), or a duplicate item; any other error is the caller's (docs/compatibility.md).
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterator, Mapping

from ._chaindrop import ChainDropped
from ._plan import Reason


#: OpenAI's code, plus what chain-resolving gateways answer instead.
# fmt: off
STALE_CODES = frozenset({
    "previous_response_not_found", "session.chain.not_found", "session.chain.unavailable",
    "session.chain.depth_exceeded", "session.chain.cycle_detected",
})
# fmt: on

#: The statuses a refused anchor comes with; anything else is never stale.
_REFUSAL_STATUSES = frozenset({400, 404})

#: The client errors a chained request is resent in full for, recognised or not: the caller then gets
#: what the full request gets. Not authentication (401, 403), timeouts (408), size (413: the full
#: request is larger) or rate limits (429), which the full request meets the same way.
RESENT_STATUSES = frozenset({400, 404, 409, 410, 422})

#: What the ChatGPT/Codex backend says instead of OpenAI's code.
_CODEX_MESSAGE = "Invalid `previous_response_id`"

#: A stale anchor in a message, whoever rewrapped it: OpenAI's code as text (LiteLLM keeps only the
#: upstream's status as its ``code``, and the upstream's id, not the client's, in its message), or
#: OpenAI's wording. Only the anchor is chained, so the id these name is the anchor's, however spelled.
_STALE_MESSAGE = re.compile(
    r"previous_response_not_found|previous response with id\b.{0,300}?\bnot found", re.IGNORECASE | re.DOTALL
)

#: What OpenAI (and our server) say when an item id is in the context twice.
_DUPLICATE_MESSAGE = "Duplicate item found with id"

#: LiteLLM's managed response ids: ``resp_`` + base64 of this.
_LITELLM_ID = re.compile(r"^litellm:custom_llm_provider:[^;]*;model_id:[^;]*;response_id:(?P<id>.+)$")

#: How deep to look into an error body for strings.
_MAX_DEPTH = 8


def classify(error: BaseException, anchor_id: str) -> Reason | None:
    """What *error* (an SDK API error, or one raised from a stream's error event) from a request chained to
    *anchor_id* means: `Reason.STALE_ANCHOR`, `Reason.ZDR`, `Reason.DUPLICATE_ITEM`, or None (the caller's).
    Stale: OpenAI's code or param, a chain-resolving proxy's code, a 400 or 404 naming the anchor, or one
    whose message carries OpenAI's code or wording (a gateway rewrapping the upstream's error)."""
    if isinstance(error, ChainDropped):
        return Reason.CHAIN_DROPPED
    status = _status(error)
    if status is not None and status not in _REFUSAL_STATUSES:
        return None
    code = getattr(error, "code", None)
    param = getattr(error, "param", None)
    if code == "unsupported_parameter" and param == "previous_response_id":
        return Reason.ZDR
    if code in STALE_CODES or param == "previous_response_id":
        return Reason.STALE_ANCHOR
    if status is None:
        return None
    message = getattr(error, "message", None)
    texts = [message] if isinstance(message, str) else []
    texts += _strings(getattr(error, "body", None), 0)
    names = _names(anchor_id)
    if any(
        _CODEX_MESSAGE in text or _STALE_MESSAGE.search(text) or any(name.search(text) for name in names)
        for text in texts
    ):
        return Reason.STALE_ANCHOR
    if status == 400 and any(_DUPLICATE_MESSAGE in text for text in texts):
        return Reason.DUPLICATE_ITEM
    return None


def resendable(error: BaseException) -> bool:
    """Whether a chained request refused with *error*, not recognised by `classify`, is resent in full."""
    return getattr(error, "status_code", None) in RESENT_STATUSES


def _status(error: BaseException) -> int | None:
    """The HTTP status, or the one an in-stream error event carries as its code."""
    status = getattr(error, "status_code", None)
    if isinstance(status, int):
        return status
    code = getattr(error, "code", None)
    if isinstance(code, str) and code.isdigit() and len(code) == 3:
        return int(code)
    if isinstance(code, int) and not isinstance(code, bool) and 100 <= code <= 599:
        return code
    return None


def _strings(value: object, depth: int) -> Iterator[str]:
    if isinstance(value, str) and depth <= _MAX_DEPTH:
        yield value
    elif isinstance(value, (Mapping, list, tuple)) and depth < _MAX_DEPTH:
        for item in value.values() if isinstance(value, Mapping) else value:
            yield from _strings(item, depth + 1)


def _names(anchor_id: str) -> list[re.Pattern[str]]:
    """Patterns for the ids a server may use for *anchor_id* (also the upstream id a LiteLLM one wraps)."""
    ids = [anchor_id]
    if anchor_id.startswith("resp_"):
        encoded = anchor_id[len("resp_") :]
        try:
            decoded = base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError, ValueError):
            decoded = ""
        match = _LITELLM_ID.match(decoded)
        if match and match.group("id") != anchor_id:
            ids.append(match.group("id"))
    # Whole ids only: "resp_1" must not match inside "resp_12".
    return [re.compile(rf"(?<![\w-]){re.escape(i)}(?![\w-])") for i in ids if i]
