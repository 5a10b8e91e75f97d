"""
The ``anchortrack`` command line: ``serve``, ``demo`` and ``explain``.

Each subcommand lives in its own module of this package and registers itself
through a ``register(subparsers)`` function; this module only dispatches.
Nothing in the library imports this package.
Building the parser imports the standard library only: the client, the web
stack (Starlette, uvicorn) and the server's request logic are imported by the
handlers when they run, so ``anchortrack --help`` is fast and works without
the ``server`` extra.
Ctrl-C ends any command with exit code 130 and no traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from . import demo, explain, serve


#: The exit code of a command interrupted by Ctrl-C (128 + SIGINT), as shells report it.
INTERRUPTED = 130


def build_parser() -> argparse.ArgumentParser:
    """Build the argument parser with every subcommand."""
    parser = argparse.ArgumentParser(
        prog="anchortrack",
        description="Provably valid previous_response_id chaining for the OpenAI Responses API.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for command in (serve, demo, explain):
        command.register(subparsers)
    return parser


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("anchortrack")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "(not installed)"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the process exit code."""
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        code = args.handler(args)
    except KeyboardInterrupt:
        sys.stdout.flush()
        sys.stderr.write("\ninterrupted\n")
        return INTERRUPTED
    return int(code or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
