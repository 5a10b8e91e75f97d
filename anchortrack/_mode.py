"""
The feature flag: ``chained``, ``shadow`` or ``off``. Precedence: the ``ANCHORTRACK_MODE`` environment
variable (operators turn the feature off without a deploy), then a `using` block, then the mode given
to `anchortrack.wrap`, then ``chained``.
"""

from __future__ import annotations

import contextlib
import enum
import functools
import os
from collections.abc import Iterator
from contextvars import ContextVar

from ._log import get_logger


#: The environment variable that overrides every mode set in code.
MODE_ENV = "ANCHORTRACK_MODE"


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


@functools.cache  # the variable is read on every call; a process sees few values
def _env_value(env: str) -> Mode:
    """The mode *env* names; an unknown value is ``off`` and logs ``anchortrack.mode_invalid`` once."""
    try:
        return coerce(env.strip())
    except ValueError:
        get_logger().warning(
            "anchortrack.mode_invalid", variable=MODE_ENV, value=env, expected=EXPECTED, using=Mode.OFF.value
        )
        return Mode.OFF


def resolve(client_mode: Mode | None) -> Mode:
    """Return the mode in force for one call."""
    env = os.environ.get(MODE_ENV)
    if env:
        return _env_value(env)
    return _call_mode.get() or client_mode or Mode.CHAINED


def describe(client_mode: Mode | None) -> str:
    """The mode in force and where it comes from, for people: ``shadow (ANCHORTRACK_MODE=shadow)``."""
    mode = resolve(client_mode).value
    env = os.environ.get(MODE_ENV)
    if not env:
        return mode
    if env.strip().lower() == _env_value(env).value:
        return f"{mode} ({MODE_ENV}={env})"
    return f"{mode} ({MODE_ENV}={env!r} is unknown; expected one of: {EXPECTED})"


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
