"""
``anchortrack explain FILE``: what the wrapped client would send for a history.

Anchors are scoped by base URL, organization, project and namespace, so the
command needs the scope they were recorded under. It derives it the way an
``openai`` client does, and says where each part came from and how to
change it:

* base URL: ``--base-url``; else, when the store is the one the last
  ``anchortrack demo`` used, that run's ``demo.json``; else
  ``OPENAI_BASE_URL``; else OpenAI's URL;
* organization and project: the flags; else ``demo.json`` (as above); else
  ``OPENAI_ORG_ID`` / ``OPENAI_PROJECT_ID``;
* namespace: ``--namespace``; else ``demo.json``'s; else none;
* API key: the keyed digest of ``OPENAI_API_KEY`` (the demo's, from
  ``demo.json``), as a wrapped client puts in its scope; ``--no-api-key-scope``
  leaves it out (for clients wrapped with ``scope_by_api_key=False``).

When the history would not chain, it also says whether the store holds any
anchor for that scope, or any at all, so "nothing was recorded here" does not
read as "the history was edited".
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .record import OPENAI_BASE_URL, DemoRecord, default_store_spec


if TYPE_CHECKING:
    from .._hashing import Scope
    from ..stores._base import AnchorStore


def register(subparsers: Any) -> None:
    """Add the ``explain`` subcommand to the ``anchortrack`` parser."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "explain",
        help="show which recorded response a history would chain from, and why",
        description=(
            "Read a history (a JSON list of items) or a request body (a JSON object with 'input') "
            "and show, against an anchor store, each item with its fingerprint and the recorded "
            "response that holds it, the anchor and the delta, and why the call would chain or not. "
            "Defaults to the store and scope of the last 'anchortrack demo' run; otherwise the scope "
            "is derived like an openai client's (OPENAI_BASE_URL, OPENAI_ORG_ID, OPENAI_PROJECT_ID)."
        ),
    )
    parser.add_argument("file", metavar="FILE", help="JSON history or request body ('-' reads stdin)")
    parser.add_argument(
        "--store", metavar="SPEC", help="memory, sqlite:PATH or redis://… (default: the demo's)"
    )
    parser.add_argument(
        "--base-url", help="base URL the anchors were recorded under (default: $OPENAI_BASE_URL)"
    )
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
    problem = unusable(source)
    if problem is not None:
        return _fail(f"{args.file}: {problem}")
    record = DemoRecord.load()
    spec = args.store or (record.store if record is not None else default_store_spec())
    if spec.startswith("sqlite:") and not Path(spec.removeprefix("sqlite:")).expanduser().exists():
        return _fail(f"no anchor store at {spec} (run 'anchortrack demo' first, or pass --store)")
    scope, sources = resolve_scope(args, record if record is not None and record.store == spec else None)
    from .._explain import explain
    from ..stores import open_store

    try:
        store = open_store(spec)
    except (ValueError, ImportError, OSError) as error:
        return _fail(f"cannot open store {spec!r}: {error}")
    try:
        explanation = explain(source, store=store, scope=scope)
        holds = None if explanation.plan.chained else store_holds(store, scope.store_key(store.secret_key))
    except TypeError as error:
        return _fail(str(error))
    finally:
        store.close()
    if args.json:
        data = {"store": spec, **explanation.to_dict(), "scope_source": sources}
        if holds is not None:
            data["store_holds"] = {"this_scope": holds[0], "any_scope": holds[1]}
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
        return 0
    where = scope.base_url.rstrip("/") + (f" (namespace {scope.namespace})" if scope.namespace else "")
    lines = [f"store {spec} · scope {where}", scope_line(scope, sources), explanation.render()]
    if holds is not None:
        lines.append(holds_line(spec, holds))
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


def unusable(source: object) -> str | None:
    """Why *source* holds no history to explain, or None if it does."""
    if isinstance(source, Mapping):
        if "input" not in source:
            looks = " (it looks like a response: it has 'output')" if "output" in source else ""
            return (
                f"a JSON object without 'input'{looks}; expected a request body with 'input' "
                "or a JSON list of items"
            )
        items = source["input"]
        if items in ([], ""):
            return "the request body's 'input' is empty: there is nothing to explain"
        return None
    if isinstance(source, list) and not source:
        return "the history is empty (an empty JSON list): there is nothing to explain"
    return None


def resolve_scope(args: argparse.Namespace, record: DemoRecord | None) -> tuple[Scope, dict[str, str]]:
    """
    The scope to look anchors up in, and where each part came from.

    Flags, else the demo's record, else what an openai client reads from the
    environment, else its defaults.
    """
    from .._hashing import Scope

    base = record.scope if record is not None else None
    env = os.environ
    sources: dict[str, str] = {}

    def pick(part: str, flag: str | None, recorded: str | None, variable: str | None) -> str | None:
        if flag:
            sources[part] = f"--{part.replace('_', '-')}"
            return flag
        if recorded:
            sources[part] = "demo.json"
            return recorded
        if variable and env.get(variable):
            sources[part] = f"${variable}"
            return env[variable]
        sources[part] = "default"
        return None

    base_url = pick("base_url", args.base_url, base.base_url if base else None, "OPENAI_BASE_URL")
    if base_url is None:
        base_url = OPENAI_BASE_URL
    scope = Scope(
        base_url=base_url,
        organization=pick(
            "organization", args.organization, base.organization if base else None, "OPENAI_ORG_ID"
        ),
        project=pick("project", args.project, base.project if base else None, "OPENAI_PROJECT_ID"),
        namespace=pick("namespace", args.namespace, base.namespace if base else None, None),
        api_key_digest=_key_digest(args, base, sources),
    )
    return scope, sources


def scope_line(scope: Scope, sources: Mapping[str, str]) -> str:
    """Which scope was used, where each part came from, and how to change it."""
    parts = [f"base URL from {sources['base_url']}"]
    for part, value in (
        ("organization", scope.organization),
        ("project", scope.project),
        ("namespace", scope.namespace),
    ):
        parts.append(f"{part} {value} from {sources[part]}" if value else f"no {part}")
    if scope.api_key_digest:
        parts.append(f"API key digest from {sources.get('api_key', 'default')}")
    else:
        parts.append("no API key")
    return (
        f"scope {scope.key}: {', '.join(parts)} "
        "(change with --base-url, --organization, --project, --namespace, --no-api-key-scope)"
    )


def store_holds(store: AnchorStore, scope_key: str) -> tuple[bool | None, bool | None]:
    """
    Whether *store* holds any live anchor in *scope_key*, and in any scope.

    None where the store cannot tell (a store this command does not know).
    """
    from ..stores.memory import MemoryStore
    from ..stores.sqlite import SQLiteStore

    if isinstance(store, MemoryStore):
        return bool(store._scopes.get(scope_key) and store._scopes[scope_key].views), len(store) > 0
    if isinstance(store, SQLiteStore):
        now = time.time()

        def query(conn: Any) -> tuple[bool, bool]:
            live = "SELECT 1 FROM anchors WHERE expires_at > ?"
            mine = conn.execute(live + " AND scope = ? LIMIT 1", (now, scope_key)).fetchone()
            some = conn.execute(live + " LIMIT 1", (now,)).fetchone()
            return mine is not None, some is not None

        result: tuple[bool, bool] = store._run(query)
        return result
    key_schema = getattr(store, "key_schema", None)
    client = getattr(store, "client", None)
    if key_schema is not None and client is not None:
        mine = next(iter(client.scan_iter(match=key_schema.view_prefix(scope_key) + "*", count=1000)), None)
        some = next(iter(client.scan_iter(match=f"{key_schema.prefix}:*:v:*", count=1000)), None)
        return mine is not None, some is not None
    return None, None


def holds_line(spec: str, holds: tuple[bool | None, bool | None]) -> str:
    """What the store holds, when the history would not chain."""
    mine, some = holds
    if some is False:
        why = (
            "a memory store starts empty in every process, so only a client's own tracker sees its anchors "
            "(use sqlite:PATH or redis://… to share them)"
            if spec == "memory"
            else "no client has recorded a response into it yet"
        )
        return (
            f"note: the store holds no anchors at all: {why}. Nothing can chain, whatever the history; "
            "this does not mean the history was edited"
        )
    if mine is False:
        return (
            "note: the store holds anchors, but none in this scope: the recording client probably used "
            "another base URL, organization, project, namespace or API key (see the scope line above)"
        )
    return "note: the store holds anchors in this scope, but none is a prefix of this history"


def _key_digest(args: argparse.Namespace, base: Scope | None, sources: dict[str, str]) -> str | None:
    """The API-key part of the scope: a keyed digest, never the key, or None."""
    from .._hashing import api_key_digest
    from ..stores._base import resolve_secret_key

    if args.no_api_key_scope:
        sources["api_key"] = "--no-api-key-scope"
        return None
    if base is not None:
        sources["api_key"] = "demo.json"
        return base.api_key_digest
    key = os.environ.get("OPENAI_API_KEY")
    if not key:
        sources["api_key"] = "default"
        return None
    sources["api_key"] = "$OPENAI_API_KEY"
    return api_key_digest(key, resolve_secret_key(None))


def _fail(message: str) -> int:
    sys.stderr.write(f"anchortrack explain: {message}\n")
    return 2
