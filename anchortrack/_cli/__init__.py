"""The ``anchortrack`` command line: ``serve``, ``demo`` and ``explain``, one module each; nothing in the
library imports it. Building the parser imports the standard library only, so ``--help`` is fast and
works without the ``server`` extra. Ctrl-C ends ``demo`` and ``explain`` with exit code 130 and no
traceback; ``serve`` treats it (and SIGTERM) as a clean shutdown, exit code 0.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
from collections.abc import Sequence

from . import demo, explain, serve
from .flags import interrupt


#: The exit code of a command interrupted by Ctrl-C (128 + SIGINT), as shells report it.
INTERRUPTED = 130


def build_parser() -> argparse.ArgumentParser:
    """Build the argument parser with every subcommand."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        installed = version("anchortrack")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        installed = "(not installed)"
    parser = argparse.ArgumentParser(
        prog="anchortrack",
        description="Provably valid previous_response_id chaining for the OpenAI Responses API.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {installed}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in (serve, demo, explain):
        command.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the process exit code."""
    # Our own SIGINT handler: with Python's default one, asyncio and uvicorn take SIGINT over for a
    # while and may re-deliver it after we handled it, ending the process by the signal, not with 130.
    previous = None
    with contextlib.suppress(ValueError):  # not the main thread: leave signals alone
        previous = signal.signal(signal.SIGINT, interrupt)
    try:
        args = build_parser().parse_args(argv)
        return int(args.handler(args))
    except KeyboardInterrupt:
        sys.stdout.flush()
        sys.stderr.write("\ninterrupted\n")
        return INTERRUPTED
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
