"""
Logger acquisition (the library never configures logging).

If the application configured structlog, events go through it.
Otherwise they go to the standard library logger ``anchortrack`` through a
structlog wrapper, so nothing below WARNING shows until the application
configures logging, and key/values arrive as ``extra``.

Every event is namespaced, past tense, with flat snake_case keys and never
item content (at most 12-hex-character digest prefixes). See docs/events.md.
"""

from __future__ import annotations

import logging
from typing import Any

import structlog


_stdlib_logger = logging.getLogger("anchortrack")
#: Used while the application has not configured structlog: events below the
#: stdlib logger's level are dropped before any rendering.
_fallback = structlog.wrap_logger(
    _stdlib_logger,
    wrapper_class=structlog.stdlib.BoundLogger,
    processors=[structlog.stdlib.filter_by_level, structlog.stdlib.render_to_log_kwargs],
)


def get_logger() -> Any:
    """Return the logger anchortrack emits its events through."""
    if structlog.is_configured():
        return structlog.get_logger("anchortrack")
    return _fallback


def short(digest: bytes) -> str:
    """Return the printable 12-hex-character prefix of a digest."""
    return digest.hex()[:12]
