"""
``anchortrack demo``: watch anchortrack work on a tool-calling agent.

With no API key it starts the local Responses server in-process on a free
port and runs the demo agent (`anchortrack._cli.agent`) through a wrapped
client; with ``--base-url`` or an API key it runs the same turns against that
endpoint.
Each call prints one table row measured on the wire: what anchortrack sent,
what a stateless request would have sent, and why it chained or not (read
from anchortrack's own events).
The anchors go to a SQLite file in the user's cache directory, and
``demo.json`` beside it records their scope, so ``anchortrack explain`` works
afterwards without flags.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from .._canonical import canonical_item
from .._client import _scope, wrap
from .._client import tracker as tracker_of
from .._mode import Mode, resolve
from .._plan import REASON_TEXT, Reason
from .._request import chained_body, read_request
from ..stores import open_store
from ..stores._base import AnchorStore
from . import agent
from .record import DEMO_NAMESPACE, DemoRecord, cache_dir, default_store_spec


if TYPE_CHECKING:
    from ..server import WireTap


#: Most model calls per user turn against a real model (tool rounds + answer).
MAX_CALLS_PER_TURN = 5
_RECORD_ATTRS = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "taskName"}


def wire_size(body: object) -> int:
    """
    Bytes of *body* as the openai client puts JSON on the wire.

    Compact separators, UTF-8, no ASCII escaping: the size of a counterfactual
    body (the same request sent stateless) is measured in the same unit as
    the bytes `WireTap` saw leave the process.
    """
    return len(json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode())


def stateless_body(body: Mapping[str, Any], history: Sequence[Any]) -> dict[str, Any]:
    """*body* sent without ``previous_response_id``, with the full *history* as ``input``."""
    out = {k: v for k, v in body.items() if k != "previous_response_id"}
    out["input"] = list(history)
    return out


def register(subparsers: Any) -> None:
    """Add the ``demo`` subcommand to the ``anchortrack`` parser."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "demo",
        help="run a tool-calling agent through anchortrack and show what it sends",
        description=(
            "Run a travel-assistant agent (five tools, middleware that injects and redacts items) "
            "through a wrapped client and print, per call, what went on the wire. With no API key it "
            "uses a local Responses server with a scripted model; with --base-url or OPENAI_API_KEY it "
            "uses that endpoint."
        ),
    )
    parser.add_argument("--base-url", help="Responses API base URL (default: a local server, or OpenAI's)")
    parser.add_argument("--api-key", help="API key (default: $OPENAI_API_KEY; none needed locally)")
    parser.add_argument("--model", help="model (default: scripted locally, gpt-5-mini otherwise)")
    parser.add_argument("--local", action="store_true", help="use the local server even if an API key is set")
    # -- upstream provider: the local server answers through a Chat Completions provider
    parser.add_argument(
        "--upstream",
        metavar="BASE_URL",
        help="run the local server in front of this Chat Completions provider (needs --model; "
        "API key: $ANCHORTRACK_UPSTREAM_API_KEY)",
    )
    # -- end upstream provider
    parser.add_argument(
        "--turns", type=_positive, default=len(agent.TURNS), help="user turns (default: %(default)s)"
    )
    parser.add_argument(
        "--store",
        metavar="SPEC",
        help="anchor store: memory, sqlite:PATH or redis://… (default: sqlite in the cache dir)",
    )
    parser.add_argument("--mode", choices=[m.value for m in Mode], help="anchortrack mode (default: chained)")
    parser.add_argument(
        "--events", action="store_true", help="also print anchortrack's events under each call"
    )
    parser.set_defaults(handler=main)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


@attrs.define
class Row:
    """What one model call did, measured on the wire."""

    call: int
    turn: str
    mode: str
    decision: str = "?"
    reason: str = "?"
    anchor: str | None = None
    items_sent: int = 0
    items_total: int = 0
    bytes_sent: int = 0
    bytes_stateless: int = 0
    bytes_chained: int = 0
    requests: int = 0
    note: str = ""
    equivalent: bool | None = None
    events: list[dict[str, Any]] = attrs.Factory(list)


class EventTap(logging.Handler):
    """Collects anchortrack's events from the standard library logger it falls back to."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.events: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        """Keep the event as a flat dict."""
        event = {k: v for k, v in record.__dict__.items() if k not in _RECORD_ATTRS}
        event["event"] = str(record.msg)
        event["log_level"] = record.levelname.lower()
        self.events.append(event)

    def take(self) -> list[dict[str, Any]]:
        """Return and forget the events collected so far."""
        events, self.events = self.events, []
        return events

    @contextlib.contextmanager
    def installed(self) -> Iterator[EventTap]:
        """Route the ``anchortrack`` logger to this tap (only) while the block runs."""
        logger = logging.getLogger("anchortrack")
        level, propagate = logger.level, logger.propagate
        logger.addHandler(self)
        logger.setLevel(logging.DEBUG)
        logger.propagate = False
        try:
            yield self
        finally:
            logger.removeHandler(self)
            logger.setLevel(level)
            logger.propagate = propagate


def main(args: argparse.Namespace) -> int:
    """Run the demo; return the exit code."""
    api_key = args.api_key or os.environ.get("OPENAI_API_KEY")
    remote = not args.local and not args.upstream and bool(args.base_url or api_key)
    if args.upstream and not args.model:
        sys.stderr.write("anchortrack demo: --upstream needs --model (the provider's model name)\n")
        return 2
    spec = args.store or default_store_spec()
    try:
        store = open_store(spec)
    except (ValueError, ImportError, OSError) as error:
        sys.stderr.write(f"anchortrack demo: cannot open store {spec!r}: {error}\n")
        return 2
    try:
        if remote:
            model = args.model or "gpt-5-mini"
            return _run(args, store, spec, args.base_url, api_key or "none", model, server=None)
        try:
            from ..server import ResponsesServer
        except ImportError as error:  # pragma: no cover - the server extra is missing
            sys.stderr.write(
                f"anchortrack demo needs the server extra: pip install 'anchortrack[server]' ({error})\n"
            )
            return 2
        try:
            server = ResponsesServer(store="memory", upstream=args.upstream or None)
        except ValueError as error:  # a malformed --upstream URL
            sys.stderr.write(f"anchortrack demo: {error}\n")
            return 2
        with server:
            return _run(args, store, spec, server.base_url, "local", args.model or "scripted", server=server)
    finally:
        store.close()


def _run(
    args: argparse.Namespace,
    store: AnchorStore,
    spec: str,
    base_url: str | None,
    api_key: str,
    model: str,
    server: Any,
) -> int:
    import openai

    from ..server import WireTap

    tap = WireTap()
    raw = openai.OpenAI(base_url=base_url, api_key=api_key, http_client=tap.http_client(), max_retries=0)
    client = wrap(raw, store=store, mode=args.mode, namespace=DEMO_NAMESPACE)
    tracker = tracker_of(client)
    scope = _scope(client, tracker)
    where = f"local Responses server {base_url}" if server is not None else str(client.base_url).rstrip("/")
    if server is not None and server.state.backend is not None:  # upstream provider
        where += f" in front of {server.state.backend.name}"
    out = sys.stdout
    out.write(f"anchortrack demo · {where} · model {model} · mode {resolve(tracker.mode).value}\n")
    out.write(f"anchors: {spec} (namespace {DEMO_NAMESPACE})\n\n")
    out.write(_header() + "\n")
    demo = _Demo(client, tap, model, server, args.events, scripted=model == "scripted" and not args.upstream)
    try:
        with EventTap().installed() as events:
            history = demo.run(args.turns, events)
    except openai.APIError as error:
        out.write(f"\nanchortrack demo: the endpoint refused a call: {error}\n")
        return 1
    finally:
        client.close()
    request_file = cache_dir() / "demo-request.json"
    next_turn = agent.user_message(agent.turn(args.turns), scripted=demo.scripted)
    request_file.parent.mkdir(parents=True, exist_ok=True)
    body = {"model": model, "input": [*history, next_turn], "tools": agent.TOOLS}
    request_file.write_text(json.dumps(body, indent=1) + "\n", encoding="utf-8")
    record = DemoRecord(spec, scope, model, str(request_file))
    if spec != "memory":
        record.save()
    out.write(_summary(demo.rows, tracker.stats.snapshot(), server is not None, record))
    out.flush()
    return 0 if all(row.equivalent is not False for row in demo.rows) else 1


class _Demo:
    """The agent loop, measuring every call."""

    def __init__(
        self, client: Any, tap: WireTap, model: str, server: Any, show: bool, *, scripted: bool
    ) -> None:
        self.client, self.tap, self.model, self.server, self.show = client, tap, model, server, show
        self.scripted = scripted
        self.rows: list[Row] = []
        self.tty = sys.stdout.isatty()

    def run(self, turns: int, events: EventTap) -> list[dict[str, Any]]:
        history = agent.first_items()
        last_id: str | None = None
        for index in range(turns):
            t = agent.turn(index)
            label = f"{index + 1}/{turns}"
            note = agent.MIDDLEWARE_TEXT.get(t.middleware or "", "")
            if t.middleware == "inject":
                history = agent.inject(history)
            elif t.middleware == "redact":
                history = agent.redact(history)
            elif t.middleware == "forget" and last_id is not None:
                self.client.responses.delete(last_id)
            history = [*history, agent.user_message(t, scripted=self.scripted)]
            for _ in range(MAX_CALLS_PER_TURN):
                response = self._call(history, label, note, events)
                note = ""
                last_id = response.id
                output = [item.to_dict(mode="json") for item in response.output]
                history = [*history, *output]
                calls = agent.function_calls(output)
                if not calls:
                    break
                history += [
                    {
                        "type": "function_call_output",
                        "call_id": c["call_id"],
                        "output": agent.run_tool(c["name"], c.get("arguments", "")),
                    }
                    for c in calls
                ]
        return history

    def _call(self, history: list[dict[str, Any]], label: str, note: str, events: EventTap) -> Any:
        row = Row(call=len(self.rows) + 1, turn=label, mode=resolve(tracker_of(self.client).mode).value)
        if self.tty:
            sys.stdout.write(f"\r… call {row.call} (turn {label}): waiting for the model")
            sys.stdout.flush()
        start = len(self.tap.bodies)
        response = self.client.responses.create(model=self.model, input=history, tools=agent.TOOLS)
        _measure(row, self.tap, start, history, events.take(), note)
        if self.server is not None:
            seen = self.server.state.resolved_context(response.id)
            row.equivalent = [canonical_item(i) for i in seen] == [canonical_item(i) for i in history]
        self.rows.append(row)
        if self.tty:
            sys.stdout.write("\r\033[K")
        sys.stdout.write(_format(row) + "\n")
        if self.show:
            for event in row.events:
                keys = " ".join(f"{k}={v}" for k, v in event.items() if k not in ("event", "log_level"))
                sys.stdout.write(f"        · {event['log_level']:<7} {event['event']} {keys}\n")
        sys.stdout.flush()
        return response


def _measure(
    row: Row, tap: WireTap, start: int, history: list[dict[str, Any]], events: list[dict[str, Any]], note: str
) -> None:
    """Fill *row* from the bodies on the wire and the events of one call."""
    bodies = tap.since(start)
    last = bodies[-1]
    sent_input = last.get("input")
    row.requests = len(bodies)
    row.bytes_sent = tap.bytes_since(start)
    row.bytes_stateless = wire_size(stateless_body(last, history))
    row.bytes_chained = row.bytes_sent
    row.anchor = last.get("previous_response_id")
    row.items_sent = len(sent_input) if isinstance(sent_input, list) else 1
    row.items_total = len(history)
    row.events = events
    notes = [note] if note else []
    for event in events:
        name = event["event"].removeprefix("anchortrack.")
        if name == "request_chained":
            row.decision, row.reason = "chained", Reason.CHAINED.value
        elif name in ("request_stateless", "request_passed_through"):
            row.decision = "stateless" if name == "request_stateless" else "passthrough"
            row.reason = event["reason"]
            if event.get("diverged_at") is not None:
                row.reason += f" at {event['diverged_at']}"
        elif name == "shadow_planned":
            row.decision = "would chain" if event["would_chain"] else "stateless"
            row.reason = event["reason"]
            if event.get("diverged_at") is not None:
                row.reason += f" at {event['diverged_at']}"
            if event["would_chain"]:
                row.anchor = event["anchor_id"]
                skip = event["items_total"] - event["items_would_send"]
                chained = chained_body(read_request(stateless_body(last, history)), skip, event["anchor_id"])
                row.bytes_chained = wire_size(chained)
        elif name in ("anchor_evicted", "scope_disabled"):
            row.decision, row.reason = "resent", event["reason"]
            notes.append(f"{_short_id(event['anchor_id'])} refused: resent in full")
    row.note = "; ".join(notes)


def _short_id(response_id: str | None) -> str:
    if not response_id:
        return "-"
    return response_id if len(response_id) <= 13 else response_id[:12] + "…"


#: The table's columns: title, width, alignment (the last one is free text).
_COLUMNS: tuple[tuple[str, int, str], ...] = (
    ("call", 4, ">"),
    ("turn", 5, ">"),
    ("mode", 7, "<"),
    ("decision", 11, "<"),
    ("anchor", 13, "<"),
    ("items", 7, ">"),
    ("sent B", 8, ">"),
    ("stateless B", 11, ">"),
    ("saved", 5, ">"),
    ("reason / note", 0, "<"),
)


def _line(cells: list[str]) -> str:
    return "  ".join(
        f"{cell:{align}{width}}" for cell, (_, width, align) in zip(cells, _COLUMNS, strict=True)
    ).rstrip()


def _header() -> str:
    titles = [title for title, _, _ in _COLUMNS]
    rules = ["─" * max(width, len(title)) for title, width, _ in _COLUMNS]
    return _line(titles) + "\n" + _line(rules)


def _format(row: Row) -> str:
    saved = 1 - row.bytes_chained / row.bytes_stateless if row.bytes_stateless else 0.0
    reason = "" if row.reason == Reason.CHAINED.value else row.reason
    tail = "; ".join(part for part in (reason, row.note) if part)
    cells = [
        str(row.call),
        row.turn,
        row.mode,
        row.decision,
        _short_id(row.anchor),
        f"{row.items_sent}/{row.items_total}",
        f"{row.bytes_sent:,}",
        f"{row.bytes_stateless:,}",
        f"{saved:.0%}",
        tail,
    ]
    return _line(cells)


def _summary(rows: list[Row], snap: dict[str, Any], local: bool, record: DemoRecord) -> str:
    sent = sum(r.bytes_sent for r in rows)
    stateless = sum(r.bytes_stateless for r in rows)
    chained = sum(r.bytes_chained for r in rows)
    wire = sum(r.requests for r in rows)
    by_decision: dict[str, int] = {}
    for row in rows:
        by_decision[row.decision] = by_decision.get(row.decision, 0) + 1
    decisions = " · ".join(f"{d} {n}" for d, n in sorted(by_decision.items()))
    lines = [
        "",
        f"summary: {len(rows)} calls, {wire} requests on the wire · {decisions}",
        f"  bytes sent {sent:,} vs {stateless:,} stateless ({_ratio(sent, stateless)}): "
        f"saved {stateless - sent:,}",
    ]
    if chained != sent:
        lines.append(
            f"  shadow: chaining would have sent {chained:,} ({_ratio(chained, stateless)} of stateless)"
        )
    if local:
        ok = sum(1 for r in rows if r.equivalent)
        lines.append(
            f"  equivalence: the server's context was exactly the agent's history "
            f"on {ok} of {len(rows)} calls"
        )
    notes = _fallback_notes(rows)
    if notes:
        lines.append("  why some calls were not chained:")
        lines += [f"    {note}" for note in notes]
    counts = ", ".join(f"{r['decision']}/{r['reason']} {r['count']}" for r in snap["requests"])
    fallbacks = ", ".join(f"{reason} {n}" for reason, n in snap["fallbacks"].items()) or "none"
    lines.append(f"  tracker.stats: requests {counts}; fallbacks {fallbacks}; recorded {snap['recorded']}")
    if record.store == "memory":
        lines.append("  the anchors were kept in memory: nothing is left for 'anchortrack explain' to read")
    else:
        lines.append(f"  see what the next call would send: anchortrack explain {record.request_file}")
    return "\n".join(lines) + "\n"


def _fallback_notes(rows: list[Row]) -> list[str]:
    """One line per reason a call was not chained: the calls, and why."""
    calls: dict[str, list[int]] = {}
    for row in rows:
        if row.decision not in ("chained", "would chain"):
            calls.setdefault(row.reason, []).append(row.call)
    notes = []
    for reason, numbers in calls.items():
        code, _, at = reason.partition(" at ")
        why = REASON_TEXT[Reason(code)] if code in {r.value for r in Reason} else ""
        if at:
            why = f"item {at} differs from the closest view recorded so far, so the history went out in full"
        which = ", ".join(map(str, numbers[:8])) + (", …" if len(numbers) > 8 else "")
        notes.append(f"{reason} (call{'s' if len(numbers) > 1 else ''} {which}): {why}")
    return notes


def _ratio(part: int, whole: int) -> str:
    return f"{part / whole:.0%}" if whole else "-"
