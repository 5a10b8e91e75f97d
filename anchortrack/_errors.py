"""
Classifying API errors after a chained request (pure).

Only two kinds are ours to handle: the server forgot the anchor (evict it and
resend once in full) and the organization refuses ``previous_response_id``
(zero data retention: stop chaining in that scope and resend).
Every other error belongs to the caller, unchanged.
"""

from __future__ import annotations

import enum


class Failure(enum.Enum):
    """What an error raised by a chained request means to anchortrack."""

    STALE_ANCHOR = "stale_anchor"
    ZDR = "zdr"
    OTHER = "other"


#: OpenAI's code, plus what chain-resolving proxies (GodeX) answer instead.
STALE_CODES = frozenset(
    {
        "previous_response_not_found",
        "session.chain.not_found",
        "session.chain.unavailable",
        "session.chain.depth_exceeded",
        "session.chain.cycle_detected",
    }
)


def classify(error: BaseException) -> Failure:
    """Tell what *error* (an ``openai.APIStatusError`` or alike) means for chaining."""
    status = getattr(error, "status_code", None)
    if status not in (400, 404):
        return Failure.OTHER
    code = getattr(error, "code", None)
    param = getattr(error, "param", None)
    if code == "unsupported_parameter" and param == "previous_response_id":
        return Failure.ZDR
    if code in STALE_CODES or param == "previous_response_id":
        return Failure.STALE_ANCHOR
    message = getattr(error, "message", "")
    if isinstance(message, str) and "Invalid `previous_response_id`" in message:
        return Failure.STALE_ANCHOR
    return Failure.OTHER
