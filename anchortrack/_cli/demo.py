"""
``anchortrack demo``: watch anchortrack work on a tool-calling agent.

It starts the local Responses server in-process on a free loopback port and
runs the demo agent (`anchortrack._cli.agent`) through a wrapped client.
Only ``--base-url URL`` or ``--openai`` sends the same turns to a real
endpoint: an ``OPENAI_API_KEY`` in the environment never does by itself, so
the demo never spends money unless asked to.
Each call prints one table row from the call's `Outcome` (the record
``tracker.stats`` counts too, handed over by ``tracker.subscribe``): what
anchortrack sent, what a stateless request would have sent, and why it
chained or not. The anchors go to a SQLite file in the user's cache
directory, and ``demo.json`` beside it records their scope, so
``anchortrack explain`` works afterwards without flags.

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
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import agent
from ._screen import Screen, Table


if TYPE_CHECKING:
    from .._outcome import Outcome
    from ..stores._base import AnchorStore
    from .record import DemoRecord


#: Most model calls per user turn against a real model (tool rounds + answer).
MAX_CALLS_PER_TURN = 5
#: OpenAI's API base URL (``--openai``).
OPENAI_BASE_URL = "https://api.openai.com/v1"
#: The turns of the benchmark the summary compares a shorter run with (docs/benchmarks.md).
BENCHMARK_TURNS = 25
#: Why a shadow call would have been refused.
WOULD_RESEND_TEXT = (
    "the anchor it would chain from was deleted on the server, so chaining would have been refused "
    "and the call resent in full; a shadow run cannot see that refusal, so tracker.stats counts "
    "these calls as would-chain"
)
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
_STYLE = {"chained": "green", "would chain": "green", "resent": "yellow", "would resend": "yellow"}
_STYLE["stateless"] = "cyan"


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
    """One model call: its outcome, how many requests it took on the wire, and what the demo adds."""

    call: int
    turn: str
    outcome: Outcome
    requests: int = 1
    note: str = ""
    deleted_anchor: bool = False
    equivalent: bool | None = None
    events: list[str] = field(default_factory=list)

    @property
    def decision(self) -> str:
        """The decision, as a shadow run says it (``would chain``, ``would resend``)."""
        o = self.outcome
        if o.mode != "shadow" or o.decision.value != "chained":
            return o.decision.value
        return "would resend" if self.deleted_anchor else "would chain"

    @property
    def reason(self) -> str:
        """The reason code, with where the history diverged when known."""
        o = self.outcome
        reason = "stale_anchor" if self.deleted_anchor else o.reason.value
        return reason + (f" at {o.diverged_at}" if o.diverged_at is not None else "")

    @property
    def would_send(self) -> int:
        """What chaining sends or, in shadow mode, would have sent (a refusal's resend included)."""
        o = self.outcome
        return o.bytes_planned + (o.bytes_stateless if self.deleted_anchor else 0)


class EventTap(logging.Handler):
    """``--events``: anchortrack's events, as lines to show under each call (never read back)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self._skip = frozenset(logging.makeLogRecord({}).__dict__) | {
            "message",
            "asctime",
            "taskName",
            "event",
        }

    def emit(self, record: logging.LogRecord) -> None:
        """Keep the event as one line: level, name, key=value pairs."""
        keys = " ".join(f"{k}={v}" for k, v in record.__dict__.items() if k not in self._skip)
        self.lines.append(f"{record.levelname.lower():<7} {getattr(record, 'event', record.msg)} {keys}")

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
    where = f"local Responses server {base_url}" if server is not None else base_url.rstrip("/")
    if server is not None and server.state.backend is not None:  # upstream provider
        where += f" in front of {server.state.backend.name}"
    screen.para(f"anchortrack demo · {where} · model {model} · mode {describe(tracker.mode)}")
    screen.para(f"anchors: {spec} (namespace {DEMO_NAMESPACE})")
    screen.write("\n")
    demo = _Demo(client, tap, model, server, screen, scripted=model == "scripted" and not args.upstream)
    tracker.subscribe(demo.outcomes.append)
    events = EventTap()  # anchortrack's events: shown with --events, kept off the console either way
    try:
        with events.installed():
            history = demo.run(args.turns, events if args.events else None)
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
    record = DemoRecord(spec, _scope(client, tracker), model, str(request_file))
    if spec != "memory":
        record.save()
    _summary(screen, demo.rows, str(tracker.stats), server is not None, record, args.turns)
    return 0 if all(row.equivalent is not False for row in demo.rows) else 1


class _Demo:
    """The agent loop: one row per call, from the call's outcome."""

    def __init__(
        self, client: Any, tap: Any, model: str, server: Any, screen: Screen, *, scripted: bool
    ) -> None:
        self.client, self.tap, self.model, self.server, self.screen = client, tap, model, server, screen
        self.table = Table(screen, COLUMNS, "reason / note")
        self.table.header()
        self.scripted = scripted
        self.rows: list[Row] = []
        self.outcomes: list[Outcome] = []
        #: Responses the agent's middleware deleted: the server refuses them as anchors.
        self.deleted: set[str] = set()

    def run(self, turns: int, events: EventTap | None) -> list[dict[str, Any]]:
        history = agent.first_items()
        last_id: str | None = None
        for index in range(turns):
            t = agent.turn(index)
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
                response = self._call(history, f"{index + 1}/{turns}", note, events)
                note, last_id = "", response.id
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

    def _call(self, history: list[dict[str, Any]], label: str, note: str, events: EventTap | None) -> Any:
        call = len(self.rows) + 1
        self.screen.status(f"… call {call} (turn {label}): waiting for the model")
        start = len(self.tap.bodies)
        response = self.client.responses.create(model=self.model, input=history, tools=agent.TOOLS)
        outcome = self.outcomes[-1]
        row = Row(call, label, outcome, requests=len(self.tap.since(start)), note=note)
        row.deleted_anchor = outcome.mode == "shadow" and outcome.anchor_id in self.deleted
        if outcome.decision.value == "resent":
            row.note = "; ".join(
                filter(None, [note, f"{short_id(outcome.anchor_id)} refused: resent in full"])
            )
        elif row.deleted_anchor:
            row.note = "; ".join(
                filter(None, [note, f"{short_id(outcome.anchor_id)} would be refused: resend in full"])
            )
        if self.server is not None:
            from .._canonical import canonical_item

            seen = self.server.state.resolved_context(response.id)
            row.equivalent = [canonical_item(i) for i in seen] == [canonical_item(i) for i in history]
        self.rows.append(row)
        self.table.row(*cells(row, self.screen.ellipsis))
        for line in events.lines if events else ():
            self.screen.para(line, indent="        · ")
        if events:
            events.lines.clear()
        return response


def short_id(response_id: str | None, ellipsis: str = "…") -> str:
    """A response id cut to 13 characters, *ellipsis* included."""
    if not response_id:
        return "-"
    return response_id if len(response_id) <= 13 else response_id[: 13 - len(ellipsis)] + ellipsis


def _share(part: int, whole: int) -> str:
    """`stateless_share` as the demo prints it."""
    from .._outcome import stateless_share

    share = stateless_share(part, whole)
    return "-" if share is None else f"{share:.0%}"


def cells(row: Row, ellipsis: str = "…") -> tuple[list[str], str, list[str | None]]:
    """The table cells of *row*, its reason / note text, and the cells' styles."""
    o = row.outcome
    saved = 1 - o.bytes_sent / o.bytes_stateless if o.bytes_stateless else 0.0
    parts = ["" if row.reason == "chained" else row.reason, row.note]
    if o.mode == "shadow" and o.decision.value == "chained":
        would = 1 - row.would_send / o.bytes_stateless if o.bytes_stateless else 0.0
        change = f"{would:.0%} less" if would >= 0 else f"{-would:.0%} more"
        parts.insert(0, f"chaining would send {row.would_send:,} B ({change})")
    if row.equivalent is False:
        parts.append("CONTEXT MISMATCH: the server saw another history")
    anchor = o.anchor_id if o.decision.value == "chained" else None
    in_full = o.mode == "shadow" or o.decision.value == "resent"  # the last request held every item
    values = [
        str(row.call),
        row.turn,
        row.decision,
        short_id(anchor, ellipsis),
        f"{o.items_total if in_full else o.items_planned}/{o.items_total}",
        f"{o.bytes_sent:,}",
        f"{o.bytes_stateless:,}",
        f"{saved:.0%}",
    ]
    return (
        values,
        "; ".join(part for part in parts if part),
        [None, None, _STYLE.get(row.decision)] + [None] * 5,
    )


def decision_counts(rows: Sequence[Row]) -> str:
    """``chained 9, resent 1, stateless 2``: the calls by decision, in a fixed order."""
    order = ["chained", "would chain", "resent", "would resend", "stateless", "passthrough"]
    counts: dict[str, int] = {}
    for row in rows:
        counts[row.decision] = counts.get(row.decision, 0) + 1
    return ", ".join(f"{d} {counts[d]}" for d in sorted(counts, key=order.index))


def _summary(
    screen: Screen, rows: list[Row], stats: str, local: bool, record: DemoRecord, turns: int
) -> None:
    outcomes = [row.outcome for row in rows]
    sent = sum(o.bytes_sent for o in outcomes)
    stateless = sum(o.bytes_stateless for o in outcomes)
    shadow = any(o.mode == "shadow" for o in outcomes)
    para = screen.para
    screen.write("\n")
    in_full = " (all in full: shadow mode)" if shadow else ""
    wire = sum(row.requests for row in rows)
    para(f"summary: {len(rows)} calls, {wire} requests on the wire{in_full}: {decision_counts(rows)}")
    para(
        f"input bytes: {sent:,} sent vs {stateless:,} stateless ({_share(sent, stateless)}): "
        f"saved {stateless - sent:,}",
        indent="  ",
    )
    if shadow:
        resends = sum(1 for r in rows if r.deleted_anchor)
        refusals = (
            f", counting the {resends} refusal{'s' if resends > 1 else ''} it would have hit"
            if resends
            else ""
        )
        would = sum(
            row.would_send if row.outcome.decision.value == "chained" else row.outcome.bytes_stateless
            for row in rows
        )
        para(
            f"shadow: chaining would have sent {would:,} ({_share(would, stateless)} of stateless){refusals}",
            indent="  ",
        )
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
    if not shadow and turns < BENCHMARK_TURNS:
        para(
            f"why this saves less than the README's benchmark: savings grow with the conversation, since "
            f"each chained call sends only its new items while a stateless one resends the whole history; "
            f"this run has {turns} turns and deliberate fallbacks, the benchmark {BENCHMARK_TURNS} turns "
            f"sending 2.5% of the stateless bytes (try --turns {BENCHMARK_TURNS})",
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
    from .._plan import REASON_TEXT

    calls: dict[str, list[Row]] = {}
    for row in rows:
        if row.decision not in ("chained", "would chain"):
            calls.setdefault(row.reason, []).append(row)
    notes = []
    for reason, group in calls.items():
        o = group[0].outcome
        why = WOULD_RESEND_TEXT if group[0].deleted_anchor else REASON_TEXT[o.reason]
        if o.diverged_at is not None:
            why = (
                f"item {o.diverged_at} differs from the closest view recorded so far, so the history went out"
            )
            why += " in full"
        numbers = [row.call for row in group]
        which = ", ".join(map(str, numbers[:8])) + (", …" if len(numbers) > 8 else "")
        notes.append(f"{reason} (call{'s' if len(numbers) > 1 else ''} {which}): {why}")
    return notes
