"""The feature flag: ``chained``, ``shadow`` or ``off``; precedence in `anchortrack._settings.resolve`."""

from __future__ import annotations

import contextlib
import enum
from collections.abc import Iterator
from contextvars import ContextVar


class Mode(str, enum.Enum):
    """How a wrapped client treats ``responses`` calls."""

    CHAINED = "chained"
    """Send ``previous_response_id`` plus the delta whenever provably valid."""
    SHADOW = "shadow"
    """Plan and record anchors, log what chaining would save, send full requests."""
    OFF = "off"
    """Kill switch: byte-for-byte passthrough, nothing hashed or stored."""


_call_mode: ContextVar[Mode | None] = ContextVar("anchortrack_mode", default=None)

#: The valid values, as every message about an unknown one names them.
EXPECTED = ", ".join(m.value for m in Mode)


def coerce(value: Mode | str) -> Mode:
    """Turn *value* into a `Mode` (ValueError when it names none)."""
    try:
        return Mode(value.lower())
    except ValueError:
        raise ValueError(f"unknown anchortrack mode {value!r}; expected one of: {EXPECTED}") from None


@contextlib.contextmanager
def using(mode: Mode | str) -> Iterator[None]:
    """
    Use *mode* for the calls made inside this block (this thread or task only).

    The environment variable still wins.

    For example:

    ```python
    with anchortrack.using("shadow"):
        client.responses.create(model=..., input=history)
    ```
    """
    token = _call_mode.set(coerce(mode))
    try:
        yield
    finally:
        _call_mode.reset(token)
