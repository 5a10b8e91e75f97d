"""
``anchortrack explain FILE``: what the wrapped client would send for a history.

Anchors are scoped by base URL, organization, project and namespace, so the
command needs the scope they were recorded under.
Each part comes from its flag; else, when the store is the one the last
``anchortrack demo`` used, from that run's ``demo.json``; else from the
openai client's defaults (``OPENAI_BASE_URL`` or OpenAI's URL,
``OPENAI_ORG_ID``, ``OPENAI_PROJECT_ID``, no namespace, and the keyed digest
of ``OPENAI_API_KEY`` unless ``--no-api-key-scope``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from .._explain import explain
from .._hashing import Scope, api_key_digest
from ..stores import open_store
from ..stores._base import resolve_secret_key
from .record import OPENAI_BASE_URL, DemoRecord, default_store_spec


def register(subparsers: Any) -> None:
    """Add the ``explain`` subcommand to the ``anchortrack`` parser."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "explain",
        help="show which recorded response a history would chain from, and why",
        description=(
            "Read a history (a JSON list of items) or a request body (a JSON object with 'input') "
            "and show, against an anchor store, each item with its fingerprint and the recorded "
            "response that holds it, the anchor and the delta, and why the call would chain or not. "
            "Defaults to the store and scope of the last 'anchortrack demo' run."
        ),
    )
    parser.add_argument("file", metavar="FILE", help="JSON history or request body ('-' reads stdin)")
    parser.add_argument(
        "--store", metavar="SPEC", help="memory, sqlite:PATH or redis://… (default: the demo's)"
    )
    parser.add_argument("--base-url", help="base URL the anchors were recorded under")
    parser.add_argument("--namespace", help="namespace given to anchortrack.wrap()")
    parser.add_argument("--organization", help="OpenAI organization (default: $OPENAI_ORG_ID)")
    parser.add_argument("--project", help="OpenAI project (default: $OPENAI_PROJECT_ID)")
    parser.add_argument(
        "--no-api-key-scope",
        action="store_true",
        help="the anchors were recorded with scope_by_api_key=False (default: $OPENAI_API_KEY's digest)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.set_defaults(handler=main)


def main(args: argparse.Namespace) -> int:
    """Explain FILE; return the exit code (2 for unusable input)."""
    try:
        text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text(encoding="utf-8")
        source = json.loads(text)
    except (OSError, ValueError) as error:
        return _fail(f"cannot read {args.file}: {error}")
    record = DemoRecord.load()
    spec = args.store or (record.store if record is not None else default_store_spec())
    if spec.startswith("sqlite:") and not Path(spec.removeprefix("sqlite:")).expanduser().exists():
        return _fail(f"no anchor store at {spec} (run 'anchortrack demo' first, or pass --store)")
    scope = resolve_scope(args, record if record is not None and record.store == spec else None)
    try:
        store = open_store(spec)
    except (ValueError, ImportError, OSError) as error:
        return _fail(f"cannot open store {spec!r}: {error}")
    try:
        explanation = explain(source, store=store, scope=scope)
    except TypeError as error:
        return _fail(str(error))
    finally:
        store.close()
    if args.json:
        sys.stdout.write(json.dumps({"store": spec, **explanation.to_dict()}, indent=2) + "\n")
    else:
        where = scope.base_url.rstrip("/") + (f" (namespace {scope.namespace})" if scope.namespace else "")
        sys.stdout.write(f"store {spec} · scope {where}\n{explanation.render()}\n")
    return 0


def resolve_scope(args: argparse.Namespace, record: DemoRecord | None) -> Scope:
    """The scope to look anchors up in: flags, else the demo's record, else the openai defaults."""
    base = record.scope if record is not None else None
    return Scope(
        base_url=args.base_url
        or (base.base_url if base else None)
        or os.environ.get("OPENAI_BASE_URL")
        or OPENAI_BASE_URL,
        organization=args.organization
        or (base.organization if base else None)
        or os.environ.get("OPENAI_ORG_ID"),
        project=args.project or (base.project if base else None) or os.environ.get("OPENAI_PROJECT_ID"),
        namespace=args.namespace or (base.namespace if base else None),
        api_key_digest=None if args.no_api_key_scope else base.api_key_digest if base else _env_key_digest(),
    )


def _env_key_digest() -> str | None:
    """The keyed digest of ``$OPENAI_API_KEY`` a wrapped client puts in its scope, if the key is set."""
    key = os.environ.get("OPENAI_API_KEY")
    return api_key_digest(key, resolve_secret_key(None)) if key else None


def _fail(message: str) -> int:
    sys.stderr.write(f"anchortrack explain: {message}\n")
    return 2
