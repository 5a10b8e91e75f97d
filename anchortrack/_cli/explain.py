"""``anchortrack explain FILE``: what the wrapped client would send for a history, against ``--store`` (or
the last demo's, for its own request file), in the scope an ``openai`` client derives (flags, else
``demo.json``, else ``OPENAI_*``). Lines fit 80 columns; an error is one line, exit code 2.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import sqlite3
import sys
import textwrap
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .flags import command, fail
from .record import OPENAI_BASE_URL, DemoRecord


if TYPE_CHECKING:
    from .._explain import Explanation
    from .._hashing import Scope
    from ..stores._base import AnchorStore

    Holds = tuple[bool | None, bool | None]


def register(subparsers: Any) -> None:
    """Add the ``explain`` subcommand to the ``anchortrack`` parser."""
    add = command(
        subparsers,
        "explain",
        main,
        "show which recorded response a history would chain from, and why",
        "Read a history (a JSON list of items) or a request body (a JSON object with 'input', 'tools', "
        "...) and show, against an anchor store, each item with its fingerprint and the recorded "
        "response that holds it, the anchor and the delta, and why the call would chain or not. The "
        "scope is derived like an openai client's (OPENAI_BASE_URL, OPENAI_ORG_ID, OPENAI_PROJECT_ID, "
        "OPENAI_API_KEY). Without --store, only the last 'anchortrack demo' request file is explained, "
        "against that demo's store and scope.",
    ).add_argument
    add("file", metavar="FILE", help="JSON history or request body ('-' reads stdin)")
    add("--store", metavar="SPEC", help="the client's store: memory, sqlite:PATH or redis://…")
    add("--tools", metavar="FILE", help="a JSON list of the tools the calls were made with")
    add("--base-url", help="base URL the anchors were recorded under (default: $OPENAI_BASE_URL)")
    add("--namespace", help="namespace given to anchortrack.wrap()")
    add("--organization", help="OpenAI organization (default: $OPENAI_ORG_ID)")
    add("--project", help="OpenAI project (default: $OPENAI_PROJECT_ID)")
    add("--api-key", metavar="KEY", help="the client's API key, for the scope (default: $OPENAI_API_KEY)")
    add("--no-api-key-scope", action="store_true", help="the client was wrapped with scope_by_api_key=False")
    add("--json", action="store_true", help="print JSON instead of a table")


class Unusable(Exception):
    """What makes the command stop: one line for stderr, exit code 2."""


def main(args: argparse.Namespace) -> int:
    """Explain FILE; return the exit code (2 for unusable input or an unusable store)."""
    try:
        source = read_source(args)
        spec, record = choose_store(args)
        scope, sources = resolve_scope(args, record)
        explanation, holds, others = run(source, spec, scope, record)
    except Unusable as error:
        return fail("explain", str(error))
    if args.json:
        data = {"store": spec, **explanation.to_dict(), "scope_source": sources}
        if holds is not None:
            data["store_holds"] = {"this_scope": holds[0], "any_scope": holds[1]}
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
        return 0
    demo = " (the last demo's: FILE is its request file)" if record is not None and not args.store else ""
    lines = [f"store {spec}{demo}", *scope_lines(scope, sources), *explanation.table(),
             conclusion(explanation, spec, holds, bare=isinstance(source, list))]  # fmt: skip
    if holds is not None and holds[0]:
        lines.append("note: the store holds anchors in this scope, but none is a prefix of this history")
    lines += others
    sys.stdout.write("\n".join(wrap(line) for line in lines) + "\n")
    return 0


def read_source(args: argparse.Namespace) -> object:
    """The history or request body in FILE (with ``--tools`` applied)."""

    def load(name: str) -> object:
        try:
            return json.loads(sys.stdin.read() if name == "-" else Path(name).read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            raise Unusable(f"cannot read {name}: {error}") from None

    source = load(args.file)
    if isinstance(source, Mapping) and "input" not in source:
        looks = " (it looks like a response: it has 'output')" if "output" in source else ""
        raise Unusable(
            f"{args.file}: a JSON object without 'input'{looks}; expected a request body with "
            "'input' or a JSON list of items"
        )
    if isinstance(source, Mapping) and source["input"] in ([], ""):
        raise Unusable(f"{args.file}: the request body's 'input' is empty: there is nothing to explain")
    if source == []:
        raise Unusable(f"{args.file}: the history is empty (an empty JSON list): there is nothing to explain")
    if args.tools is not None:
        tools = load(args.tools)
        if not isinstance(tools, list):
            raise Unusable(f"{args.tools}: expected a JSON list of tools")
        body = source if isinstance(source, Mapping) else {"input": source}
        source = {**body, "tools": tools}
    return source


def choose_store(args: argparse.Namespace) -> tuple[str, DemoRecord | None]:
    """The store spec, and the demo's record when the store is the demo's (its scope then applies)."""
    record = DemoRecord.load()
    if args.store:
        return args.store, record if record is not None and record.store == args.store else None
    ask = "which store holds the anchors? pass --store SPEC, as the client was wrapped with"
    if record is None:
        raise Unusable(ask)
    if args.file != "-" and Path(args.file).resolve() == Path(record.request_file).resolve():
        return record.store, record
    raise Unusable(
        f"{ask} (the last demo's store is used only for its own request file, {record.request_file})"
    )


def run(
    source: object, spec: str, scope: Scope, record: DemoRecord | None = None
) -> tuple[Explanation, Holds | None, list[str]]:
    """Explain *source* against the store *spec*; if no prefix is held, what it holds and its other scopes."""
    from .._explain import explain
    from .._plan import Reason
    from ..stores import open_store

    if spec.startswith("sqlite:") and not Path(spec.removeprefix("sqlite:")).expanduser().exists():
        raise Unusable(f"no anchor store at {spec}: no such file (is it the client's path?)")
    try:
        store = open_store(spec)
    except (ValueError, ImportError, OSError) as error:
        raise Unusable(f"cannot open store {spec!r}: {error}") from None
    try:
        key = scope.store_key(store.secret_key)
        store.get(key, "resp_anchortrack_explain")  # an unreachable store fails here, with its reason
        explanation = explain(source, store=store, scope=scope)
        holds, others = None, []
        if explanation.reason in (Reason.PREFIX_DIVERGED, Reason.UNKNOWN_HISTORY):
            held = store_scopes(store, key)
            if held is not None:
                holds = held[0], held[0] or bool(held[1])
                if held[1] and not held[0]:
                    others = held_scopes(held[1], scope_candidates(scope, record, store.secret_key))
    except TypeError as error:
        raise Unusable(str(error)) from None
    except Exception as error:  # noqa: BLE001 - a store's own errors: one line, not a traceback
        raise Unusable(f"the store {spec} failed: {type(error).__name__}: {error}") from None
    finally:
        store.close()
    if explanation.reason is Reason.STORE_UNAVAILABLE:
        raise Unusable(f"the store {spec} did not answer ({explanation.detail})")
    return explanation, holds, others


#: The scope parts a flag or the demo's record gives, else the variable an openai client reads.
SCOPE_VARIABLES = {"base_url": "OPENAI_BASE_URL", "organization": "OPENAI_ORG_ID",
                   "project": "OPENAI_PROJECT_ID", "namespace": None}  # fmt: skip


def resolve_scope(args: argparse.Namespace, record: DemoRecord | None) -> tuple[Scope, dict[str, str]]:
    """The scope to look anchors up in, and where each part came from (flag, demo.json, environment)."""
    from .._hashing import Scope, api_key_digest
    from ..stores._base import resolve_secret_key

    base = record.scope if record is not None else None
    parts: dict[str, str | None] = {}
    sources: dict[str, str] = {}
    key = args.api_key or (None if base else os.environ.get("OPENAI_API_KEY"))
    if args.no_api_key_scope:
        sources["api_key"], digest = "--no-api-key-scope", None
    elif key:
        sources["api_key"] = "--api-key" if args.api_key else "$OPENAI_API_KEY"
        digest = api_key_digest(key, resolve_secret_key(None))
    elif base is not None:
        sources["api_key"], digest = "demo.json", base.api_key_digest
    else:
        sources["api_key"], digest = "default", None
    for part, variable in SCOPE_VARIABLES.items():
        given = (
            (getattr(args, part), f"--{part.replace('_', '-')}"),
            (getattr(base, part, None), "demo.json"),
            (variable and os.environ.get(variable), f"${variable}"),
        )
        parts[part], sources[part] = next(((str(v), s) for v, s in given if v), (None, "default"))
    base_url = parts["base_url"] or OPENAI_BASE_URL
    return Scope(base_url, parts["organization"], parts["project"], parts["namespace"], digest), sources


def scope_lines(scope: Scope, sources: Mapping[str, str]) -> list[str]:
    """Which scope was used, where each part came from, and how to change it."""

    def part(name: str, value: str | None, source: str) -> str:
        where = "" if source == "default" else f" (from {source})"
        return f"  {name:<13} {value or 'none'}{where}"

    return [
        f"scope {scope.key} (change with --base-url, --organization, --project,",
        "  --namespace, --api-key, --no-api-key-scope):",
        part("base URL", scope.base_url.rstrip("/"), sources["base_url"]),
        part("organization", scope.organization, sources["organization"]),
        part("project", scope.project, sources["project"]),
        part("namespace", scope.namespace, sources["namespace"]),
        part("API key", scope.api_key_digest and "digest", sources["api_key"]),
    ]


def store_scopes(store: AnchorStore, scope_key: str, most: int = 20) -> tuple[bool, set[str]] | None:
    """Whether the store holds live anchors in *scope_key*, and (up to *most*) other scopes it does (None:
    cannot tell). A store looks anchors up by view only, so this reads the SQLite and Redis layouts."""
    from ..stores import MemoryStore, RedisStore, SQLiteStore

    if isinstance(store, MemoryStore):
        return False, set()  # opened by this command a moment ago
    if isinstance(store, SQLiteStore):
        with contextlib.closing(sqlite3.connect(f"file:{store.path}?mode=ro", uri=True)) as conn:
            live = "FROM anchors WHERE expires_at > ? AND scope "
            now = time.time()
            mine = conn.execute(f"SELECT 1 {live} = ? LIMIT 1", (now, scope_key)).fetchone() is not None
            rows = conn.execute(f"SELECT DISTINCT scope {live} != ? LIMIT ?", (now, scope_key, most))
            return mine, {str(scope) for (scope,) in rows}
    if isinstance(store, RedisStore) and store.client is not None:
        schema, client = store.key_schema, store.client
        found = next(iter(client.scan_iter(match=schema.view_prefix(scope_key) + "*", count=1000)), None)
        others: set[str] = set()
        for key in client.scan_iter(match=f"{schema.prefix}:*:v:*", count=1000):
            text = key.decode() if isinstance(key, bytes) else str(key)
            others.add(text.partition("{")[2].partition("}")[0])
            others.discard(scope_key)
            if len(others) >= most:
                break
        return found is not None, others
    return None


def scope_candidates(
    scope: Scope, record: DemoRecord | None, secret_key: bytes | None
) -> dict[str, tuple[Scope, str]]:
    """The scopes a recording client probably used, by store key, with what its API-key part is: *scope*'s
    parts as given, left out, or as the demo and the environment have them (a key only as its digest)."""
    from .._hashing import Scope, api_key_digest
    from ..stores._base import resolve_secret_key

    def options(*values: str | None) -> list[str | None]:
        return list(dict.fromkeys(values))

    demo = record.scope if record is not None else None
    key = os.environ.get("OPENAI_API_KEY")
    digests: dict[str | None, str] = {None: "without an API-key digest"}  # the later ones win
    if demo is not None and demo.api_key_digest:
        digests[demo.api_key_digest] = "with the demo's API-key digest"
    if key:
        digests[api_key_digest(key, resolve_secret_key(None))] = "with $OPENAI_API_KEY's digest"
    if scope.api_key_digest:
        digests[scope.api_key_digest] = "with this API key's digest"
    bases = options(
        scope.base_url, os.environ.get("OPENAI_BASE_URL"), demo.base_url if demo else None, OPENAI_BASE_URL
    )
    found: dict[str, tuple[Scope, str]] = {}
    namespaces = options(scope.namespace, None, demo.namespace if demo else None)
    parts = (filter(None, bases), options(scope.organization, None), options(scope.project, None), namespaces)
    for base, organization, project, namespace in itertools.product(*parts):
        for digest, said in digests.items():
            candidate = Scope(base, organization, project, namespace, digest)
            found.setdefault(candidate.store_key(secret_key), (candidate, said))
    return found


def held_scopes(held: set[str], candidates: Mapping[str, tuple[Scope, str]]) -> list[str]:
    """Lines naming the scopes the store holds (base URL, namespace, whether an API-key digest is part)."""
    lines = [f"the store holds anchors in {len(held)} other scope{'s' if len(held) > 1 else ''}:"]
    for key in sorted(held, key=lambda k: (k not in candidates, k)):
        if key not in candidates:
            lines.append(f"  {key}: another namespace, organization, project or API key")
            continue
        scope, digest = candidates[key]
        parts = [f"{name} {value}" for name, value in (("organization", scope.organization),
                 ("project", scope.project)) if value]  # fmt: skip
        parts += [f"namespace {scope.namespace or 'none'}", digest]
        lines += [f"  {key}: base URL {scope.base_url.rstrip('/')}", f"    {', '.join(parts)}"]
    return lines


def conclusion(explanation: Explanation, spec: str, holds: Holds | None, *, bare: bool) -> str:
    """The one line that says why: the library's summary, unless the store or the file explains it better."""
    label = f"stateless ({explanation.reason.value})"
    mine, some = holds or (None, None)
    if some is False:
        why = (
            "a memory store starts empty in every process, so only a client's own tracker sees its "
            "anchors (pass the sqlite:PATH or redis://… store the client records into)"
            if spec == "memory"
            else "no client has recorded a response into it yet (is it the store the client used?)"
        )
        return f"{label}: the store holds no anchors at all, so nothing can chain: {why}"
    if mine is False:
        return (
            f"{label}: the store holds anchors, but none in this scope: the recording client probably used "
            "another base URL, organization, project, namespace or API key (the store's scopes are listed "
            "below)"
        )
    if bare and explanation.reason.value == "properties_changed":
        return (
            f"{label}: the anchors that hold this history were made with tools or other settings "
            "(tools, tool_choice, text, reasoning, truncation), and a bare JSON list carries none: save "
            "the request body (a JSON object with 'input', 'tools', …), or pass --tools FILE"
        )
    return explanation.summary


def wrap(line: str, width: int = 80) -> str:
    """*line* wrapped to *width* columns, continued with a two-space indent (long words stay whole)."""
    if len(line) <= width:
        return line
    return textwrap.fill(line, width, subsequent_indent="  ", break_long_words=False, break_on_hyphens=False)
