"""
Helpers for running real frameworks over a wrapped client: a `Lab` that runs one conversation
twice and pairs every request a framework made with what it meant to send.

Method.  Each test runs the same conversation through the framework twice, on one local server
whose scripted model draws item ids and call ids from a counter restarted for every run:

* the **reference** run uses a plain ``openai`` client: what the framework does without
  anchortrack (every body it sends is its full history, or its own chained request);
* the **tracked** run uses ``anchortrack.wrap`` of the same kind of client.  A spy sits in
  *front* of anchortrack — on ``create`` / ``parse`` of the tracked ``responses`` resource class,
  patched for the test — and deep-copies the ``input`` and ``previous_response_id`` the framework
  passed, before anchortrack plans anything.  That copy is, by definition, what the framework
  meant to send.

The server logs every answered request (body and response id) in order, so the n-th spied call
is the n-th answered request of the run (a count mismatch — an extra retry, a lost request —
fails the test).  Then for every tracked request:

1. equivalence: the context the server resolved equals the spied history, by canonical form
   (when the framework chained by itself, the spied history is its parent's context, the
   parent's output, then its input);
2. chaining: the body's ``previous_response_id`` and ``input`` (each test states what it expects),
   and nothing the anchor's view already holds is sent again;
3. same behaviour: the framework passed the same histories and the same other arguments as in
   the reference run, and produced the same final text.

The scripted model stamps ``[ctx:<12 hex>]`` — a digest of the *raw* JSON of the resolved
context — into its texts (and into reasoning ``encrypted_content``).  A chained context holds the
server's stored output items while a stateless one holds the framework's re-serialised copies,
so that digest differs between the two runs even when the contexts are equivalent; comparisons
across runs blank it (`scrub`).  The ``[items:N]`` tag, the text and every other field are kept.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import copy
import itertools
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import openai

import anchortrack
from anchortrack._canonical import canonical_item
from anchortrack.server import ResponsesServer, ScriptedModel, ServerState
from anchortrack.stores import MemoryStore

from ..helpers import canon


#: A tool loop of two parallel calls, two rounds: three requests per run.
WEATHER_LOOP = 'weather please\n!call weather {"city": "Paris"}\n!call weather {"city": "Oslo"}\n!rounds 2'
#: The final text the scripted model gives once the loop above is done (ctx blanked).
WEATHER_DONE = "tool results: sunny in Paris | sunny in Oslo | sunny in Paris | sunny in Oslo"

_CTX_TAG = re.compile(r"\[ctx:[0-9a-f]{12}\]")


def weather(city: str) -> str:
    """Weather for a city."""
    return f"sunny in {city}"


class Ids:
    """Deterministic item ids for the scripted model, restarted at the start of every run."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counter = itertools.count(1)

    def __call__(self, prefix: str) -> str:
        with self._lock:
            return f"{prefix}_{next(self._counter):048x}"

    def restart(self) -> None:
        with self._lock:
            self._counter = itertools.count(1)


class AnsweringState(ServerState):
    """The server state, also logging each answered request's body and response id in order."""

    def __init__(self, ids: Ids) -> None:
        super().__init__("memory", model=ScriptedModel(id_factory=ids))
        self.answered: list[tuple[dict[str, Any], str]] = []
        self._answered_lock = threading.Lock()

    def prepare(self, body: object, **options: Any) -> Any:
        pending = super().prepare(body, **options)
        with self._answered_lock:
            self.answered.append((copy.deepcopy(body), pending.response["id"]))
        return pending


@dataclass(frozen=True)
class Exchange:
    """One request a framework made, seen from both ends."""

    #: ``input`` and ``previous_response_id`` as the framework passed them (tracked runs only).
    meant: Mapping[str, Any] | None
    #: The JSON body the server received.
    body: dict[str, Any]
    response_id: str

    @property
    def anchor(self) -> str | None:
        """The ``previous_response_id`` on the wire."""
        value = self.body.get("previous_response_id")
        return value if isinstance(value, str) else None

    @property
    def sent(self) -> list[Any]:
        """The ``input`` items on the wire."""
        return as_items(self.body.get("input"))

    @property
    def meant_items(self) -> list[Any]:
        assert self.meant is not None, "not a tracked run"
        return as_items(self.meant["input"])


@dataclass
class Run:
    """One pass of a conversation, on plain or wrapped clients."""

    client: openai.OpenAI
    aclient: openai.AsyncOpenAI
    tracked: bool
    answered_from: int
    spied_from: int
    answered_to: int | None = None
    spied_to: int | None = None
    exchanges: list[Exchange] = field(default_factory=list)


def given(value: object) -> Any:
    """*value*, or None for the SDK's ``omit`` / ``NOT_GIVEN`` sentinels."""
    return None if isinstance(value, (openai.Omit, openai.NotGiven)) else value


def as_items(value: object) -> list[Any]:
    """A create ``input`` as a list of items (a string is one user message)."""
    value = given(value)
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return list(value)


def scrub(value: Any) -> Any:
    """*value* with the scripted model's raw-context digests blanked (see the module docstring)."""
    if isinstance(value, str):
        return _CTX_TAG.sub("[ctx:*]", value)
    if isinstance(value, Mapping):
        out = {}
        for key, item in value.items():
            if key == "encrypted_content" and isinstance(item, str):
                with contextlib.suppress(binascii.Error, UnicodeDecodeError):
                    item = scrub(base64.b64decode(item, validate=True).decode())
            out[key] = scrub(item)
        return out
    if isinstance(value, (list, tuple)):
        return [scrub(item) for item in value]
    return value


def kinds(items: Sequence[Any]) -> list[str]:
    """The item types of a history (``message`` for shorthand messages)."""
    out = []
    for item in items:
        data = canonical_item(item)
        out.append(str(data.get("type", "message")))
    return out


class Lab:
    """Runs conversations on plain and wrapped clients and pairs requests with intentions."""

    def __init__(self, server: ResponsesServer, ids: Ids, spied: list[dict[str, Any]]) -> None:
        self.server = server
        self.ids = ids
        self.spied = spied
        self.runs: list[Run] = []

    @property
    def state(self) -> AnsweringState:
        state = self.server.state
        assert isinstance(state, AnsweringState)
        return state

    def _client(self) -> tuple[openai.OpenAI, openai.AsyncOpenAI]:
        url = self.server.base_url
        return (
            openai.OpenAI(base_url=url, api_key="test", max_retries=0),
            openai.AsyncOpenAI(base_url=url, api_key="test", max_retries=0),
        )

    def _begin(self, client: openai.OpenAI, aclient: openai.AsyncOpenAI, *, tracked: bool) -> Run:
        self._close_last()
        self.ids.restart()
        run = Run(
            client=client,
            aclient=aclient,
            tracked=tracked,
            answered_from=len(self.state.answered),
            spied_from=len(self.spied),
        )
        self.runs.append(run)
        return run

    def _close_last(self) -> None:
        if self.runs and self.runs[-1].answered_to is None:
            last = self.runs[-1]
            last.answered_to = len(self.state.answered)
            last.spied_to = len(self.spied)

    def plain(self) -> Run:
        """Start the reference run: plain openai clients, no anchortrack."""
        client, aclient = self._client()
        return self._begin(client, aclient, tracked=False)

    def tracked(self, **wrap_options: Any) -> Run:
        """Start the tracked run: wrapped clients sharing one fresh anchor store."""
        client, aclient = self._client()
        store = wrap_options.pop("store", None) or MemoryStore()
        return self._begin(
            anchortrack.wrap(client, store=store, **wrap_options),
            anchortrack.wrap(aclient, store=store, **wrap_options),
            tracked=True,
        )

    def exchanges(self, run: Run) -> list[Exchange]:
        """Every request of *run*, in order (ends the run if it is the last one)."""
        if run is self.runs[-1]:
            self._close_last()
        answered = self.state.answered[run.answered_from : run.answered_to]
        if not run.tracked:
            return [Exchange(meant=None, body=body, response_id=rid) for body, rid in answered]
        spied = self.spied[run.spied_from : run.spied_to]
        assert len(spied) == len(answered), (
            f"the framework made {len(spied)} create calls but the server answered {len(answered)}"
        )
        return [
            Exchange(meant=meant, body=body, response_id=rid)
            for meant, (body, rid) in zip(spied, answered, strict=True)
        ]

    # -- the three checks ------------------------------------------------------------

    def meant_context(self, exchange: Exchange) -> list[Any]:
        """The context the framework asked for: its history, after its own anchor if it chained."""
        assert exchange.meant is not None
        parent = exchange.meant.get("previous_response_id")
        if not isinstance(parent, str):
            return exchange.meant_items
        before = self.state.resolved_context(parent) + self.state.get_response(parent)["output"]
        return before + exchange.meant_items

    def view_length(self, exchange: Exchange) -> int:
        """How many items the server holds for a response: its context and its output."""
        return len(self.state.resolved_context(exchange.response_id)) + len(
            self.state.get_response(exchange.response_id)["output"]
        )

    def assert_equivalent(self, run: Run) -> list[Exchange]:
        """I1 for every request of a tracked run; returns its exchanges."""
        exchanges = self.exchanges(run)
        assert exchanges, "the framework made no request"
        for number, exchange in enumerate(exchanges):
            resolved = self.state.resolved_context(exchange.response_id)
            assert canon(self.meant_context(exchange)) == canon(resolved), f"request {number}"
        return exchanges

    def assert_chained_minimal(self, run: Run) -> list[Exchange]:
        """
        Every request after the first chains on the one before it and sends only what that
        response's view lacks (never anything the server already holds).
        """
        exchanges = self.exchanges(run)
        assert exchanges[0].anchor is None
        for number, (before, exchange) in enumerate(itertools.pairwise(exchanges), start=1):
            assert before.response_id == exchange.anchor, f"request {number} is not chained"
            assert exchange.sent, f"request {number} chains with an empty delta"
            assert len(exchange.meant_items) - self.view_length(before) == len(exchange.sent), (
                f"request {number} re-sends items"
            )
            assert canon(exchange.meant_items[-len(exchange.sent) :]) == canon(exchange.sent)
        return exchanges

    def assert_same_behaviour(self, reference: Run, run: Run) -> None:
        """The framework sent the same histories and other arguments as without anchortrack."""
        ref = self.exchanges(reference)
        got = self.exchanges(run)
        assert len(ref) == len(got), "a different number of requests"
        for number, (plain, tracked) in enumerate(zip(ref, got, strict=True)):
            assert scrub(canon(plain.sent)) == scrub(canon(tracked.meant_items)), f"request {number}"
            assert _others(plain.body) == _others(tracked.body), f"request {number}"


def _others(body: Mapping[str, Any]) -> dict[str, Any]:
    """A body without the fields anchortrack may rewrite."""
    return {k: v for k, v in body.items() if k not in ("input", "previous_response_id")}


def spy(store: list[dict[str, Any]], original: Any, *, is_async: bool) -> Any:
    """*original* (``create`` or ``parse``), deep-copying what each call meant to send into *store*."""

    def record(params: Mapping[str, Any]) -> None:
        store.append(
            {
                "input": copy.deepcopy(params.get("input")),
                "previous_response_id": given(params.get("previous_response_id")),
            }
        )

    if is_async:

        async def aspied(self: Any, **params: Any) -> Any:
            record(params)
            return await original(self, **params)

        return aspied

    def spied(self: Any, **params: Any) -> Any:
        record(params)
        return original(self, **params)

    return spied
