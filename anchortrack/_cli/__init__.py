"""
The ``anchortrack`` command line: ``serve``, ``demo`` and ``explain``.

Each subcommand lives in its own module of this package and registers itself
through a ``register(subparsers)`` function; this module only dispatches.
Nothing in the library imports this package.
The web stack (Starlette, uvicorn) and the server's request logic are imported
by the handlers when they run, so ``anchortrack --help`` works without the
``server`` extra.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from . import demo, explain, serve


def build_parser() -> argparse.ArgumentParser:
    """Build the argument parser with every subcommand."""
    parser = argparse.ArgumentParser(
        prog="anchortrack",
        description="Provably valid previous_response_id chaining for the OpenAI Responses API.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for command in (serve, demo, explain):
        command.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = args.handler
    code = handler(args)
    return int(code or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
