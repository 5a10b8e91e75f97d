"""What the commands share: a subcommand's parser, argparse types, error lines, a signal handler."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable
from typing import Any, TypeVar


T = TypeVar("T")


def command(
    subparsers: Any, name: str, handler: Callable[[argparse.Namespace], int], summary: str, description: str
) -> argparse.ArgumentParser:
    """Add the subcommand *name*, run by *handler*, to the ``anchortrack`` parser; return its parser."""
    parser: argparse.ArgumentParser = subparsers.add_parser(name, help=summary, description=description)
    parser.set_defaults(handler=handler)
    return parser


def port_number(text: str) -> int:
    """An argparse type: a TCP port, 0 (any free port) to 65535."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number (0-65535), got {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port number (0-65535), got {value}")
    return value


def _checked(convert: Callable[[str], T], valid: Callable[[T], bool], expected: str) -> Callable[[str], T]:
    """An argparse type: *convert* the text, and refuse what does not convert or is not *valid*."""

    def check(text: str) -> T:
        with contextlib.suppress(ValueError):
            value = convert(text)
            if valid(value):
                return value
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")

    return check


positive_count = _checked(int, lambda value: value >= 1, "a whole number of at least 1")
positive_seconds = _checked(float, lambda value: 0 < value < float("inf"), "a number of seconds above 0")


def interrupt(signum: int, frame: object) -> None:
    """A signal handler that raises KeyboardInterrupt."""
    raise KeyboardInterrupt


def fail(name: str, message: str, code: int = 2) -> int:
    """Write the command *name*'s one-line error to stderr; return the exit *code*."""
    sys.stderr.write(f"anchortrack {name}: {message}\n")
    return code
