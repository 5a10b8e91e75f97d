"""``anchortrack demo``: the agent (`anchortrack._cli.agent`) through a wrapped client, against the local
Responses server (in-process, a free loopback port) unless ``--base-url`` or ``--openai`` asks for a real
endpoint. A table row per call from its `Outcome`; the summary's totals are ``tracker.stats``' own. The
anchors go to SQLite in the user's cache directory; ``demo.json`` lets ``anchortrack explain`` find them.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import shutil
import sys
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

from . import agent
from .flags import command, fail, positive_count
from .record import DEMO_NAMESPACE, OPENAI_BASE_URL, DemoRecord, cache_dir


if TYPE_CHECKING:
    from .. import AnchorStore
    from .._outcome import Outcome


#: Most model calls per user turn against a real model (tool rounds + answer).
MAX_CALLS_PER_TURN = 5
#: The turns of the benchmark the summary compares a shorter run with (docs/benchmarks.md).
BENCHMARK_TURNS = 25
#: Why a shadow call would have been refused.
WOULD_RESEND_TEXT = (
    "the anchor it would chain from was deleted on the server, so chaining would have been refused "
    "and the call resent in full; a shadow run cannot see that refusal, so tracker.stats counts "
    "these calls as would-chain"
)
#: The table's fixed columns (title, width, alignment); the reason / note text follows them.
COLUMNS = (
    ("call", 4, ">"), ("turn", 5, ">"), ("decision", 12, "<"), ("anchor", 13, "<"),
    ("items", 7, ">"), ("sent B", 8, ">"), ("stateless B", 11, ">"), ("saved", 5, ">"),
)  # fmt: skip
#: Where the reason / note text starts when it goes beside the fixed columns.
TEXT_AT = sum(width + 2 for _, width, _ in COLUMNS)
#: The decisions in the order the summary counts them, and their colours on a terminal.
DECISIONS = {
    "chained": "32", "would chain": "32", "resent": "33", "would resend": "33",
    "stateless": "36", "passthrough": "",
}  # fmt: skip
#: The non-ASCII characters the demo prints, and their ASCII stand-ins.
_ASCII = str.maketrans({"─": "-", "·": "-", "…": "...", "↳": "->", "—": "-", "→": "->", "≈": "~"})


def register(subparsers: Any) -> None:
    """Add the ``demo`` subcommand to the ``anchortrack`` parser."""
    parser = command(
        subparsers,
        "demo",
        main,
        "run a tool-calling agent through anchortrack and show what it sends",
        "Run a travel-assistant agent (five tools, middleware that injects and redacts items) through a "
        "wrapped client and print, per call, what went on the wire. It uses a local Responses server "
        "with a scripted model — no API key, nothing leaves this machine — unless --base-url or "
        "--openai asks for a real endpoint (billed calls).",
    )
    where, add = parser.add_mutually_exclusive_group(), parser.add_argument
    where.add_argument("--base-url", help="use this Responses API endpoint instead of the local server")
    billed = f"use OpenAI's API ({OPENAI_BASE_URL}) with $OPENAI_API_KEY: real, billed calls"
    where.add_argument("--openai", action="store_true", help=billed)
    where.add_argument("--local", action="store_true", help="use the local server (the default)")
    add("--api-key", help="API key for --base-url/--openai (default: $OPENAI_API_KEY)")
    add("--model", help="model (default: scripted locally, gpt-5-mini otherwise)")
    add("--upstream", metavar="BASE_URL", help="run the local server in front of this Chat Completions "
        "provider (needs --model; API key: $ANCHORTRACK_UPSTREAM_API_KEY)")  # fmt: skip
    add("--turns", type=positive_count, default=len(agent.TURNS), help="user turns (default: %(default)s)")
    default_store = "(default: sqlite in the cache dir)"
    add("--store", metavar="SPEC", help=f"anchor store: memory, sqlite:PATH or redis://… {default_store}")
    add("--mode", choices=["chained", "shadow", "off"], help="anchortrack mode (default: chained)")
    add("--events", action="store_true", help="also print anchortrack's events under each call")


class Screen:
    """Where the demo writes: whole lines that fit the width (80 when piped); colours (not with ``NO_COLOR``
    or ``TERM=dumb``) and a status line on a terminal only; ASCII where ``─ · … ↳`` cannot go."""

    def __init__(self, stream: TextIO) -> None:
        self.stream, self.tty, self.status_shown = stream, stream.isatty(), False
        self.width = max(40, shutil.get_terminal_size((80, 24)).columns)
        self.color = self.tty and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"
        self.encoding = stream.encoding or "ascii"
        self.ascii = "─·…↳—→≈".encode(self.encoding, "replace").decode(self.encoding) != "─·…↳—→≈"
        self.inline = self.width - TEXT_AT >= 24

    def text(self, line: str) -> str:
        """*line* as this stream can carry it."""
        if not self.ascii:
            return line
        return line.translate(_ASCII).encode(self.encoding, "replace").decode(self.encoding)

    def write(self, text: str) -> None:
        """Write *text* (laid out, as the stream can carry it) and flush, replacing the status line."""
        self.clear_status()
        self.stream.write(text)
        self.stream.flush()

    def para(self, text: str, indent: str = "") -> None:
        """Write *text* wrapped to the width (continuations indented two more)."""
        lines = _wrap(self.text(text), self.width, self.text(indent), self.text(indent + "  "))
        self.write("\n".join(lines) + "\n")

    def status(self, text: str) -> None:
        """Show *text* on an overwritable status line (terminals only)."""
        if self.tty:
            self.stream.write("\r\033[K" + self.text(text[: self.width - 1]))
            self.stream.flush()
            self.status_shown = True

    def clear_status(self) -> None:
        if self.status_shown:
            self.stream.write("\r\033[K")
        self.status_shown = False

    def row(self, cells: Sequence[str], text: str, color: str = "") -> None:
        """Write one table row and its free *text*: beside it if 24 columns are left, else indented below."""
        out = [f"{self.text(c)[:w]:{align}{w}}" for c, (_, w, align) in zip(cells, COLUMNS, strict=True)]
        if self.color and color:  # the decision's colour
            out[2] = f"\033[{color}m{out[2]}\033[0m"
        line = "  ".join(out)
        indent = " " * TEXT_AT if self.inline else self.text("      ↳ ")
        lines = _wrap(self.text(text), self.width, indent, " " * len(indent))
        if self.inline and lines:
            lines[0] = line + "  " + lines[0][TEXT_AT:]
        else:
            lines.insert(0, line.rstrip())
        self.write("\n".join(lines) + "\n")

    def header(self, title: str) -> None:
        """Write the column titles, a rule, and the free text's *title* (beside them or below)."""
        rule = "─" * min(len(title) + 8, self.width - TEXT_AT)
        self.row([t for t, _, _ in COLUMNS], title if self.inline else "")
        self.row(["─" * w for _, w, _ in COLUMNS], rule if self.inline else title)


def _wrap(text: str, width: int, indent: str = "", more: str = "") -> list[str]:
    """*text* as lines of at most *width* columns, never broken at a hyphen (``--turns``, ``-1%``)."""
    return textwrap.wrap(text, width, initial_indent=indent, subsequent_indent=more, break_on_hyphens=False)


class EventTap(logging.Handler):
    """``--events``: anchortrack's events, as lines to show under each call."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self._skip = {*logging.makeLogRecord({}).__dict__, "message", "asctime", "taskName", "event"}

    def emit(self, record: logging.LogRecord) -> None:
        keys = " ".join(f"{k}={v}" for k, v in record.__dict__.items() if k not in self._skip)
        self.lines.append(f"{record.levelname.lower():<7} {getattr(record, 'event', record.msg)} {keys}")


def main(args: argparse.Namespace) -> int:
    """Run the demo; return the exit code."""
    screen = Screen(sys.stdout)
    remote = bool(args.base_url or args.openai)
    if args.upstream and remote:
        return fail("demo", "--upstream runs the local server; it does not go with --base-url/--openai")
    if args.upstream and not args.model:
        return fail("demo", "--upstream needs --model (the provider's model name)")
    if args.openai and not (args.api_key or os.environ.get("OPENAI_API_KEY")):
        return fail("demo", "--openai needs an API key: set OPENAI_API_KEY or pass --api-key")
    if remote:
        screen.para(f"anchortrack demo · {args.base_url or OPENAI_BASE_URL}: real calls, billed to your key")
    else:  # on screen at once: starting the server takes a few seconds
        (screen.status if screen.tty else screen.para)(
            "anchortrack demo · starting the local Responses server (nothing leaves here)…"
        )
    from ..stores import open_store

    spec = args.store or f"sqlite:{cache_dir() / 'demo.db'}"
    if not args.store:
        cache_dir().mkdir(parents=True, exist_ok=True)
    try:
        store = open_store(spec)
    except (ValueError, ImportError, OSError) as error:
        return fail("demo", f"cannot open store {spec!r}: {error}")
    try:
        if remote:
            return _Demo(args, screen, store, spec).run()
        try:
            from ..server import ResponsesServer

            server = ResponsesServer(store="memory", upstream=args.upstream or None)
        except (ImportError, ValueError) as error:  # no server extra; a malformed --upstream URL
            return fail("demo", str(error))
        with server:
            return _Demo(args, screen, store, spec, server).run()
    finally:
        screen.clear_status()
        store.close()


@dataclass
class Row:
    """One model call, for the summary: its decision and reason as the table shows them, and more."""

    call: int
    outcome: Outcome
    decision: str  # as a shadow run says it: ``would chain``, ``would resend`` (the anchor was deleted)
    reason: str  # with where the history diverged
    equivalent: bool | None  # the server's context was the agent's history (None: a real endpoint)


class _Demo:
    """One run: the agent through a wrapped client, a table row per call from its outcome, a summary."""

    def __init__(
        self, args: argparse.Namespace, screen: Screen, store: AnchorStore, spec: str, server: Any = None
    ) -> None:
        import openai

        from .. import tracker, wrap
        from .._settings import describe
        from ..server import WireTap

        if server is None:  # a real endpoint
            base_url, model = args.base_url or OPENAI_BASE_URL, args.model or "gpt-5-mini"
            api_key, where = args.api_key or os.environ.get("OPENAI_API_KEY") or "none", base_url.rstrip("/")
        else:
            base_url, model, api_key = server.base_url, args.model or "scripted", "local"
            where = f"local Responses server {base_url}"
            if server.state.backend is not None:
                where += f" in front of {server.state.backend.name}"
        self.args, self.screen, self.spec, self.server, self.model = args, screen, spec, server, model
        self.scripted = model == "scripted" and not args.upstream
        self.tap = WireTap()
        raw = openai.OpenAI(
            base_url=base_url, api_key=api_key, http_client=self.tap.http_client(), max_retries=0
        )
        self.client: Any = wrap(raw, store=store, mode=args.mode, namespace=DEMO_NAMESPACE)
        self.tracker = tracker(self.client)
        screen.para(f"anchortrack demo · {where} · model {model} · mode {describe(self.tracker.mode)}")
        screen.para(f"anchors: {spec} (namespace {DEMO_NAMESPACE})")
        screen.write("\n")
        screen.header("reason / note")
        self.rows: list[Row] = []
        self.outcomes: list[Outcome] = []
        self.tracker.subscribe(self.outcomes.append)
        self.deleted: set[str] = set()  # responses the agent's middleware deleted on the server
        self.events = EventTap()  # shown with --events, kept off the console either way

    def run(self) -> int:
        """Run the agent's turns, save the next request for ``explain``, sum up; return the exit code."""
        import openai

        logger = logging.getLogger("anchortrack")
        level, propagate = logger.level, logger.propagate
        logger.addHandler(self.events)
        logger.setLevel(logging.DEBUG)
        logger.propagate = False
        try:
            history = self._turns(self.args.turns)
        except openai.APIError as error:
            self.screen.para(f"anchortrack demo: the endpoint refused a call: {error}")
            return 1
        finally:
            logger.removeHandler(self.events)
            logger.setLevel(level)
            logger.propagate = propagate
            self.client.close()
        request_file = cache_dir() / "demo-request.json"
        next_turn = agent.user_message(agent.turn(self.args.turns), scripted=self.scripted)
        request_file.parent.mkdir(parents=True, exist_ok=True)
        body = {"model": self.model, "input": [*history, next_turn], "tools": agent.TOOLS}
        request_file.write_text(json.dumps(body, indent=1) + "\n", encoding="utf-8")
        record = DemoRecord(self.spec, self.tracker.scope_for(self.client), self.model, str(request_file))
        if self.spec != "memory":
            record.save()
        self._summary(record)
        return 0 if all(row.equivalent is not False for row in self.rows) else 1

    def _turns(self, turns: int) -> list[dict[str, Any]]:
        history: list[dict[str, Any]] = [{"role": "developer", "content": agent.SYSTEM}]
        last_id: str | None = None
        for index in range(turns):
            t = agent.turn(index)
            note = t.note
            if t.edit is not None:
                history = t.edit(history)
            elif t.forget and last_id is not None:
                self.client.responses.delete(last_id)
                self.deleted.add(last_id)
            history = [*history, agent.user_message(t, scripted=self.scripted)]
            for _ in range(MAX_CALLS_PER_TURN):
                response = self._call(history, f"{index + 1}/{turns}", note)
                note, last_id = "", response.id
                output = [item.to_dict(mode="json") for item in response.output]
                history = [*history, *output]
                calls = [item for item in output if item.get("type") == "function_call"]
                if not calls:
                    break
                for c in calls:
                    out = agent.run_tool(c["name"], c.get("arguments", ""))
                    history.append({"type": "function_call_output", "call_id": c["call_id"], "output": out})
        return history

    def _call(self, history: list[dict[str, Any]], label: str, note: str) -> Any:
        """Make one model call, show its row (and with ``--events`` its events); return the response."""
        call = len(self.rows) + 1
        self.screen.status(f"… call {call} (turn {label}): waiting for the model")
        response = self.client.responses.create(model=self.model, input=history, tools=agent.TOOLS)
        o = self.outcomes[-1]
        decided, shadow = o.decision.value, o.mode == "shadow"
        would = shadow and decided == "chained"  # what chaining would have sent
        deleted = would and o.anchor_id in self.deleted
        decision = ("would resend" if deleted else "would chain") if would else decided
        reason = "stale_anchor" if deleted else o.reason.value
        reason += f" at {o.diverged_at}" if o.diverged_at is not None else ""
        equivalent = None
        if self.server is not None:
            from .._canonical import canonical_item

            seen = self.server.state.resolved_context(response.id)
            equivalent = [canonical_item(i) for i in seen] == [canonical_item(i) for i in history]
        self.rows.append(Row(call, o, decision, reason, equivalent))
        parts = ["" if reason == "chained" else reason, note]
        if decided == "resent":
            parts.append(f"{short_id(o.anchor_id)} refused: resent in full")
        elif deleted:
            parts.append(f"{short_id(o.anchor_id)} would be refused: resend in full")
        if would:  # the plan's bytes, and the resend a refusal would cost
            planned = o.bytes_planned + (o.bytes_stateless if deleted else 0)
            less = _saved(planned, o.bytes_stateless)
            change = f"{less:.0%} less" if less >= 0 else f"{-less:.0%} more"
            parts.insert(0, f"chaining would send {planned:,} B ({change})")
        if equivalent is False:
            parts.append("CONTEXT MISMATCH: the server saw another history")
        anchor = short_id(o.anchor_id if decided == "chained" else None, self.screen.text("…"))
        items = (
            f"{o.items_total if decided == 'resent' else o.items_sent}/{o.items_total}"  # the last request's
        )
        saved = f"{_saved(o.bytes_sent, o.bytes_stateless):.0%}"
        sizes = [f"{o.bytes_sent:,}", f"{o.bytes_stateless:,}", saved]
        cells = [str(call), label, decision, anchor, items, *sizes]
        self.screen.row(cells, "; ".join(filter(None, parts)), DECISIONS.get(decision, ""))
        for line in self.events.lines if self.args.events else ():
            self.screen.para(line, indent="        · ")
        self.events.lines.clear()
        return response

    def _summary(self, record: DemoRecord) -> None:
        """The run in a few lines: its totals (``tracker.stats``' own), why calls were not chained, hints."""
        screen, rows, stats, turns = self.screen, self.rows, self.tracker.stats, self.args.turns
        sent, stateless = stats.bytes_sent, stats.bytes_stateless
        shadow = any(row.outcome.mode == "shadow" for row in rows)
        counts = [f"{d} {n}" for d in DECISIONS if (n := sum(1 for row in rows if row.decision == d))]
        wire = f"{len(self.tap.bodies)} requests on the wire"
        wire += " (all in full: shadow mode)" if shadow else ""
        screen.write("\n")
        screen.para(f"summary: {len(rows)} calls, {wire}: {', '.join(counts)}")
        say = functools.partial(screen.para, indent="  ")
        share = _share(sent, stateless)
        say(f"input bytes: {sent:,} sent vs {stateless:,} stateless ({share}): saved {stateless - sent:,}")
        if shadow:  # what chaining plans, plus the full resend each refusal it cannot see would cost
            refused = [row.outcome.bytes_stateless for row in rows if row.decision == "would resend"]
            would, n = stats.bytes_planned + sum(refused), len(refused)
            hit = f", counting the {n} refusal{'s' if n > 1 else ''} it would have hit" if n else ""
            say(f"shadow: chaining would have sent {would:,} ({_share(would, stateless)} of stateless){hit}")
        if self.server is not None:
            ok = f"{sum(1 for r in rows if r.equivalent)} of {len(rows)}"
            say(f"equivalence: the server's context was exactly the agent's history on {ok} calls")
        notes = fallback_notes(rows)
        if notes:
            say("why some calls were not chained:")
            for note in notes:
                screen.para(note, indent="    ")
        say(f"tracker.stats: {stats}")
        if not shadow and turns < BENCHMARK_TURNS:
            say(
                f"why this saves less than the README's benchmark: savings grow with the conversation, "
                f"since each chained call sends only its new items while a stateless one resends the whole "
                f"history; this run has {turns} turns and deliberate fallbacks, the benchmark "
                f"{BENCHMARK_TURNS} turns sending 2.5% of the stateless bytes (try --turns {BENCHMARK_TURNS})"
            )
        if record.store == "memory":
            say("the anchors were kept in memory: nothing is left for 'anchortrack explain' to read")
        else:
            say(f"see what the next call would send: anchortrack explain {record.request_file}")


def short_id(response_id: str | None, ellipsis: str = "…") -> str:
    """A response id cut to 13 characters, *ellipsis* included."""
    rid = response_id or "-"
    return rid if len(rid) <= 13 else rid[: 13 - len(ellipsis)] + ellipsis


def _share(part: int, whole: int) -> str:
    """*part* as a share of *whole*, the stateless bytes (``-`` when nothing went stateless)."""
    return f"{part / whole:.0%}" if whole else "-"


def _saved(part: int, whole: int) -> float:
    """The share of *whole*, the stateless bytes, that sending only *part* saves."""
    return 1 - part / whole if whole else 0.0


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
        why = WOULD_RESEND_TEXT if group[0].decision == "would resend" else REASON_TEXT[o.reason]
        if o.diverged_at is not None:
            why = f"item {o.diverged_at} differs from the closest view recorded so far, so the history"
            why += " went out in full"
        numbers = [row.call for row in group]
        which = ", ".join(map(str, numbers[:8])) + (", …" if len(numbers) > 8 else "")
        notes.append(f"{reason} (call{'s' if len(numbers) > 1 else ''} {which}): {why}")
    return notes
