"""
The ``anchortrack`` command line: ``serve``, ``demo`` and ``explain``.

Each subcommand lives in its own module and registers itself through a
``register(subparsers)`` function; this module only dispatches.
Optional dependencies (the server's web stack) are imported by the
subcommand when it runs, never here.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence


#: Modules that provide subcommands, each with ``register(subparsers)``.
_COMMAND_MODULES = ("anchortrack.server._cli", "anchortrack._demo", "anchortrack._explain_cli")


def build_parser() -> argparse.ArgumentParser:
    """Build the argument parser with every available subcommand."""
    parser = argparse.ArgumentParser(
        prog="anchortrack",
        description="Provably valid previous_response_id chaining for the OpenAI Responses API.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for name in _COMMAND_MODULES:
        module = importlib.import_module(name)
        module.register(subparsers)
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
