"""Loggers (never configured here): structlog if the application configured it, else the standard library
logger ``anchortrack``. Events (docs/events.md) never carry item content (at most 12-hex-digit digest
prefixes)."""

from __future__ import annotations

import logging
from collections.abc import MutableMapping
from typing import Any

import structlog


_stdlib_logger = logging.getLogger("anchortrack")


def render_to_record(_: Any, __: str, event_dict: MutableMapping[str, Any]) -> dict[str, Any]:
    """Turn an event into ``Logger._log`` keyword arguments (each value as its ``repr``)."""
    fields = dict(event_dict)
    event = str(fields.pop("event", ""))
    pairs = " ".join(f"{key}={value!r}" for key, value in fields.items())
    return {"msg": f"{event} {pairs}" if pairs else event, "extra": {**fields, "event": event}}


class _Fallback(structlog.stdlib.BoundLogger):
    """A stdlib-backed logger that drops debug and info events at once when they would not show."""

    def debug(self, event: str | None = None, *args: Any, **kw: Any) -> Any:
        return super().debug(event, *args, **kw) if self._logger.isEnabledFor(logging.DEBUG) else None

    def info(self, event: str | None = None, *args: Any, **kw: Any) -> Any:
        return super().info(event, *args, **kw) if self._logger.isEnabledFor(logging.INFO) else None


#: Used while the application has not configured structlog (made once: a lazy proxy binds one per event).
_fallback = _Fallback(
    _stdlib_logger, processors=[structlog.stdlib.filter_by_level, render_to_record], context={}
)


def debug_enabled() -> bool:
    """Whether a debug event could show (always, once the application configured structlog)."""
    return structlog.is_configured() or _stdlib_logger.isEnabledFor(logging.DEBUG)


def get_logger() -> Any:
    """Return the logger anchortrack emits its events through."""
    if structlog.is_configured():
        return structlog.get_logger("anchortrack")
    return _fallback


def short(digest: bytes) -> str:
    """Return the printable 12-hex-character prefix of a digest."""
    return digest.hex()[:12]
