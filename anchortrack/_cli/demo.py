"""
``anchortrack demo``: watch anchortrack work on a tool-calling agent.

It starts the local Responses server in-process on a free loopback port and
runs the demo agent (`anchortrack._cli.agent`) through a wrapped client.
Only ``--base-url URL`` or ``--openai`` sends the same turns to a real
endpoint: an ``OPENAI_API_KEY`` in the environment never does by itself, so
the demo never spends money unless asked to.
Each call prints one table row measured on the wire: what anchortrack sent,
what a stateless request would have sent, and why it chained or not (read
from anchortrack's own events).
The anchors go to a SQLite file in the user's cache directory, and
``demo.json`` beside it records their scope, so ``anchortrack explain`` works
afterwards without flags.

This module imports only the standard library at import time (``--help``
stays fast); the client, the server and the store are imported when it runs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import agent
from ._screen import Screen, Table


if TYPE_CHECKING:
    from ..server import WireTap
    from ..stores._base import AnchorStore
    from .record import DemoRecord


#: Most model calls per user turn against a real model (tool rounds + answer).
MAX_CALLS_PER_TURN = 5
#: OpenAI's API base URL (``--openai``).
OPENAI_BASE_URL = "https://api.openai.com/v1"
_RECORD_ATTRS = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "taskName", "event"}
#: Why a shadow call would have been refused.
WOULD_RESEND_TEXT = (
    "the anchor it would chain from was deleted on the server, so chaining would have been refused "
    "and the call resent in full; a shadow run cannot see that refusal, so tracker.stats counts "
    "these calls as would-chain"
)
#: Decisions that chained (or, in shadow mode, would have).
CHAINED_DECISIONS = ("chained", "would chain")


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
            "through a wrapped client and print, per call, what went on the wire. It uses a local "
            "Responses server with a scripted model — no API key, nothing leaves this machine — "
            "unless --base-url or --openai asks for a real endpoint (billed calls)."
        ),
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--base-url", help="use this Responses API endpoint instead of the local server")
    where.add_argument(
        "--openai",
        action="store_true",
        help=f"use OpenAI's API ({OPENAI_BASE_URL}) with $OPENAI_API_KEY: real, billed calls",
    )
    where.add_argument("--local", action="store_true", help="use the local server (the default)")
    parser.add_argument("--api-key", help="API key for --base-url/--openai (default: $OPENAI_API_KEY)")
    parser.add_argument("--model", help="model (default: scripted locally, gpt-5-mini otherwise)")
    # -- upstream provider: the local server answers through a Chat Completions provider
    parser.add_argument(
        "--upstream",
        metavar="BASE_URL",
        help="run the local server in front of this Chat Completions provider (needs --model; "
        "API key: $ANCHORTRACK_UPSTREAM_API_KEY)",
    )
    # -- end upstream provider
    parser.add_argument(
        "--turns", type=positive_int, default=len(agent.TURNS), help="user turns (default: %(default)s)"
    )
    parser.add_argument(
        "--store",
        metavar="SPEC",
        help="anchor store: memory, sqlite:PATH or redis://… (default: sqlite in the cache dir)",
    )
    parser.add_argument(
        "--mode", choices=["chained", "shadow", "off"], help="anchortrack mode (default: chained)"
    )
    parser.add_argument(
        "--events", action="store_true", help="also print anchortrack's events under each call"
    )
    parser.set_defaults(handler=main)


def positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}")
    return value


positive_int.__name__ = "number"


@dataclass
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
    #: What chaining sent, or in shadow mode would have sent (a refusal's resend included).
    bytes_chained: int = 0
    requests: int = 0
    note: str = ""
    equivalent: bool | None = None
    events: list[dict[str, Any]] = field(default_factory=list)


class EventTap(logging.Handler):
    """Collects anchortrack's events from the standard library logger it falls back to."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.events: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        """Keep the event as a flat dict."""
        event = {k: v for k, v in record.__dict__.items() if k not in _RECORD_ATTRS}
        event["event"] = str(getattr(record, "event", record.msg))
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
    screen = Screen(sys.stdout)
    remote = bool(args.base_url or args.openai)
    api_key = args.api_key or os.environ.get("OPENAI_API_KEY")
    if args.upstream and remote:
        sys.stderr.write(
            "anchortrack demo: --upstream runs the local server; it does not go with --base-url/--openai\n"
        )
        return 2
    if args.upstream and not args.model:
        sys.stderr.write("anchortrack demo: --upstream needs --model (the provider's model name)\n")
        return 2
    if args.openai and not api_key:
        sys.stderr.write(
            "anchortrack demo: --openai needs an API key: set OPENAI_API_KEY or pass --api-key\n"
        )
        return 2
    if remote:
        screen.para(f"anchortrack demo · {args.base_url or OPENAI_BASE_URL}: real calls, billed to your key")
    else:
        # On screen at once: starting the server takes a few seconds.
        starting = "anchortrack demo · starting the local Responses server (nothing leaves here)…"
        if screen.tty:
            screen.status(starting)
        else:
            screen.para(starting)
    from ..stores import open_store
    from .record import cache_dir, default_store_spec

    spec = args.store or default_store_spec()
    if not args.store:
        cache_dir().mkdir(parents=True, exist_ok=True)  # the demo's own directory for its default store
    try:
        store = open_store(spec)
    except (ValueError, ImportError, OSError) as error:
        sys.stderr.write(f"anchortrack demo: cannot open store {spec!r}: {error}\n")
        return 2
    try:
        if remote:
            model = args.model or "gpt-5-mini"
            base_url = args.base_url or OPENAI_BASE_URL
            return _run(args, screen, store, spec, base_url, api_key or "none", model, server=None)
        try:
            from ..server import ResponsesServer
        except ImportError as error:
            sys.stderr.write(f"anchortrack demo: {error}\n")
            return 2
        try:
            server = ResponsesServer(store="memory", upstream=args.upstream or None)
        except ValueError as error:  # a malformed --upstream URL
            sys.stderr.write(f"anchortrack demo: {error}\n")
            return 2
        with server:
            model = args.model or "scripted"
            return _run(args, screen, store, spec, server.base_url, "local", model, server=server)
    finally:
        screen.clear_status()
        store.close()


def _run(
    args: argparse.Namespace,
    screen: Screen,
    store: AnchorStore,
    spec: str,
    base_url: str,
    api_key: str,
    model: str,
    server: Any,
) -> int:
    import openai

    from .._client import _scope, wrap
    from .._client import tracker as tracker_of
    from .._mode import describe
    from ..server import WireTap
    from .record import DEMO_NAMESPACE, DemoRecord, cache_dir

    tap = WireTap()
    raw = openai.OpenAI(base_url=base_url, api_key=api_key, http_client=tap.http_client(), max_retries=0)
    client = wrap(raw, store=store, mode=args.mode, namespace=DEMO_NAMESPACE)
    tracker = tracker_of(client)
    scope = _scope(client, tracker)
    where = f"local Responses server {base_url}" if server is not None else base_url.rstrip("/")
    if server is not None and server.state.backend is not None:  # upstream provider
        where += f" in front of {server.state.backend.name}"
    screen.para(f"anchortrack demo · {where} · model {model} · mode {describe(tracker.mode)}")
    screen.para(f"anchors: {spec} (namespace {DEMO_NAMESPACE})")
    screen.write("\n")
    scripted = model == "scripted" and not args.upstream
    demo = _Demo(client, tap, model, server, args.events, screen, scripted=scripted)
    demo.table.header()
    try:
        with EventTap().installed() as events:
            history = demo.run(args.turns, events)
    except openai.APIError as error:
        screen.para(f"anchortrack demo: the endpoint refused a call: {error}")
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
    _summary(screen, demo.rows, str(tracker.stats), server is not None, record)
    return 0 if all(row.equivalent is not False for row in demo.rows) else 1


#: The table's fixed columns: title, width, alignment. The reason / note text follows.
COLUMNS: tuple[tuple[str, int, str], ...] = (
    ("call", 4, ">"),
    ("turn", 5, ">"),
    ("decision", 12, "<"),
    ("anchor", 13, "<"),
    ("items", 7, ">"),
    ("sent B", 8, ">"),
    ("stateless B", 11, ">"),
    ("saved", 5, ">"),
)
_DECISION_STYLE = {
    "chained": "green",
    "would chain": "green",
    "resent": "yellow",
    "would resend": "yellow",
    "stateless": "cyan",
}


class _Demo:
    """The agent loop, measuring every call."""

    def __init__(
        self,
        client: Any,
        tap: WireTap,
        model: str,
        server: Any,
        show: bool,
        screen: Screen,
        *,
        scripted: bool,
    ) -> None:
        self.client, self.tap, self.model, self.server, self.show = client, tap, model, server, show
        self.screen = screen
        self.table = Table(screen, COLUMNS, "reason / note")
        self.scripted = scripted
        self.rows: list[Row] = []
        #: Responses the agent's middleware deleted: the server refuses them as anchors.
        self.deleted: set[str] = set()

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
                self.deleted.add(last_id)
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
        from .._client import tracker as tracker_of
        from .._mode import resolve

        mode = resolve(tracker_of(self.client).mode).value
        row = Row(call=len(self.rows) + 1, turn=label, mode=mode)
        self.screen.status(f"… call {row.call} (turn {label}): waiting for the model")
        start = len(self.tap.bodies)
        response = self.client.responses.create(model=self.model, input=history, tools=agent.TOOLS)
        measure(row, self.tap.since(start), self.tap.bytes_since(start), history, events.take(), note)
        if row.decision == "would chain" and row.anchor in self.deleted:
            would_resend(row, self.tap.since(start)[-1], history)
        if self.server is not None:
            from .._canonical import canonical_item

            seen = self.server.state.resolved_context(response.id)
            row.equivalent = [canonical_item(i) for i in seen] == [canonical_item(i) for i in history]
        self.rows.append(row)
        self.table.row(*cells(row, self.screen.ellipsis))
        if self.show:
            for event in row.events:
                keys = " ".join(f"{k}={v}" for k, v in event.items() if k not in ("event", "log_level"))
                self.screen.para(f"{event['log_level']:<7} {event['event']} {keys}", indent="        · ")
        return response


def measure(
    row: Row,
    bodies: Sequence[Mapping[str, Any]],
    bytes_sent: int,
    history: list[dict[str, Any]],
    events: list[dict[str, Any]],
    note: str,
) -> None:
    """Fill *row* from the bodies on the wire and the events of one call."""
    from .._request import chained_body, read_request

    last = bodies[-1]
    sent_input = last.get("input")
    row.requests = len(bodies)
    row.bytes_sent = bytes_sent
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
            row.decision, row.reason = "chained", "chained"
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
            notes.append(f"{short_id(event['anchor_id'])} refused: resent in full")
    row.note = "; ".join(notes)


def would_resend(row: Row, last: Mapping[str, Any], history: list[dict[str, Any]]) -> None:
    """
    A shadow row whose would-be anchor the server no longer has.

    Chaining would have been refused (``stale_anchor``) and the call resent in
    full, so what it would have sent is the chained attempt plus the resend.
    """
    row.decision, row.reason = "would resend", "stale_anchor"
    row.bytes_chained += wire_size(stateless_body(last, history))
    row.note = "; ".join(
        part for part in (row.note, f"{short_id(row.anchor)} would be refused: resend in full") if part
    )


def short_id(response_id: str | None, ellipsis: str = "…") -> str:
    """A response id cut to 13 characters, *ellipsis* included."""
    if not response_id:
        return "-"
    return response_id if len(response_id) <= 13 else response_id[: 13 - len(ellipsis)] + ellipsis


def cells(row: Row, ellipsis: str = "…") -> tuple[list[str], str, list[str | None]]:
    """The table cells of *row*, its reason / note text, and the cells' styles."""
    saved = 1 - row.bytes_sent / row.bytes_stateless if row.bytes_stateless else 0.0
    reason = "" if row.reason == "chained" else row.reason
    parts = [reason, row.note]
    if row.mode == "shadow" and row.decision in ("would chain", "would resend"):
        would = 1 - row.bytes_chained / row.bytes_stateless if row.bytes_stateless else 0.0
        change = f"{would:.0%} less" if would >= 0 else f"{-would:.0%} more"
        parts.insert(0, f"chaining would send {row.bytes_chained:,} B ({change})")
    if row.equivalent is False:
        parts.append("CONTEXT MISMATCH: the server saw another history")
    values = [
        str(row.call),
        row.turn,
        row.decision,
        short_id(row.anchor, ellipsis),
        f"{row.items_sent}/{row.items_total}",
        f"{row.bytes_sent:,}",
        f"{row.bytes_stateless:,}",
        f"{saved:.0%}",
    ]
    styles: list[str | None] = [None] * len(values)
    styles[2] = _DECISION_STYLE.get(row.decision)
    return values, "; ".join(part for part in parts if part), styles


def decision_counts(rows: Sequence[Row]) -> str:
    """``chained 9, resent 1, stateless 2``: the calls by decision, in a fixed order."""
    order = ["chained", "would chain", "resent", "would resend", "stateless", "passthrough"]
    counts: dict[str, int] = {}
    for row in rows:
        counts[row.decision] = counts.get(row.decision, 0) + 1
    ranked = sorted(counts, key=lambda d: order.index(d) if d in order else len(order))
    return ", ".join(f"{d} {counts[d]}" for d in ranked)


def _summary(screen: Screen, rows: list[Row], stats: str, local: bool, record: DemoRecord) -> None:
    sent = sum(r.bytes_sent for r in rows)
    stateless = sum(r.bytes_stateless for r in rows)
    chained = sum(r.bytes_chained for r in rows)
    wire = sum(r.requests for r in rows)
    shadow = any(r.mode == "shadow" for r in rows)
    screen.write("\n")
    in_full = " (all in full: shadow mode)" if shadow else ""
    screen.para(f"summary: {len(rows)} calls, {wire} requests on the wire{in_full}: {decision_counts(rows)}")
    para = screen.para
    ratio = _ratio(sent, stateless)
    para(
        f"request bodies on the wire: {sent:,} bytes vs {stateless:,} stateless ({ratio}): "
        f"saved {stateless - sent:,}",
        indent="  ",
    )
    if shadow:
        resends = sum(1 for r in rows if r.decision == "would resend")
        plural = "s" if resends > 1 else ""
        refusals = f", counting the {resends} refusal{plural} it would have hit" if resends else ""
        would = _ratio(chained, stateless)
        para(f"shadow: chaining would have sent {chained:,} ({would} of stateless){refusals}", indent="  ")
    if local:
        ok = sum(1 for r in rows if r.equivalent)
        para(
            f"equivalence: the server's context was exactly the agent's history on {ok} of {len(rows)} calls",
            indent="  ",
        )
    notes = fallback_notes(rows)
    if notes:
        para("why some calls were not chained:", indent="  ")
        for note in notes:
            para(note, indent="    ")
    para(f"tracker.stats: {stats}", indent="  ")
    if not shadow:
        turns = len({row.turn for row in rows})
        para(
            f"why this saves less than the README's benchmark: savings grow with the conversation, since "
            f"each chained call sends only its new items while a stateless one resends the whole history; "
            f"this run has {turns} turns and deliberate fallbacks, the benchmark 25 turns sending 2.5% of "
            "the stateless bytes (try --turns 25)",
            indent="  ",
        )
    if record.store == "memory":
        para(
            "the anchors were kept in memory: nothing is left for 'anchortrack explain' to read", indent="  "
        )
    else:
        para(f"see what the next call would send: anchortrack explain {record.request_file}", indent="  ")


def fallback_notes(rows: Sequence[Row]) -> list[str]:
    """One line per reason a call was not chained: the calls, and why."""
    from .._plan import REASON_TEXT, Reason

    calls: dict[str, list[int]] = {}
    for row in rows:
        if row.decision not in CHAINED_DECISIONS:
            key = "would resend" if row.decision == "would resend" else row.reason
            calls.setdefault(key, []).append(row.call)
    notes = []
    for reason, numbers in calls.items():
        code, _, at = reason.partition(" at ")
        why = REASON_TEXT[Reason(code)] if code in {r.value for r in Reason} else ""
        if reason == "would resend":
            reason, why = "stale_anchor", WOULD_RESEND_TEXT
        if at:
            why = f"item {at} differs from the closest view recorded so far, so the history went out in full"
        which = ", ".join(map(str, numbers[:8])) + (", …" if len(numbers) > 8 else "")
        notes.append(f"{reason} (call{'s' if len(numbers) > 1 else ''} {which}): {why}")
    return notes


def _ratio(part: int, whole: int) -> str:
    return f"{part / whole:.0%}" if whole else "-"
