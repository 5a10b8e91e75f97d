"""The server's state and request logic, free of HTTP.

`ServerState` runs a create request through validation → chain resolution → context checks → model, saves the
response, and keeps what tests look at."""

from __future__ import annotations

import asyncio
import copy
import hashlib
import logging
import math
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Protocol

from anchortrack.server import _errors
from anchortrack.server._chain import (
    CHAINABLE_STATUSES,
    DEFAULT_MAX_DEPTH,
    chain_items,
    resolve_chain,
    resolve_context,
    resolve_items,
)
from anchortrack.server._events import in_progress_snapshot, stream_events
from anchortrack.server._facts import EMPTY_FACTS, Context, Facts, check_context, context_facts
from anchortrack.server._items import Item, item_type
from anchortrack.server._model import ModelReply, ScriptedModel, build_response, new_id
from anchortrack.server._records import (
    DEFAULT_MAX_RESPONSES,
    DEFAULT_RETENTION,
    ChainLink,
    Clock,
    Head,
    MemoryResponseStore,
    ResponseStore,
    SQLiteResponseStore,
    StoredResponse,
)
from anchortrack.server._request import CreateRequest, parse_create_request


logger = logging.getLogger("anchortrack.server")
#: Most item ids the server remembers the holder of (a lookup past it searches the store).
ITEM_INDEX_LIMIT = 100_000
#: Most responses whose resolved chain is kept (about 40 MB for 1,024 chains of 1,000 shared items).
CONTEXT_CACHE_LIMIT = 1024


@dataclass(frozen=True)
class Ancestry:
    """A chain's responses (oldest first) as `Head` s, with every item they stored, as of the store's
    *generation* (read before the chain was walked or checked)."""

    heads: tuple[Head, ...]
    items: tuple[Item, ...]
    generation: object = None
    owners: frozenset[str] = frozenset()
    oldest: float = math.inf  # the earliest creation time of the chain
    facts: Facts = EMPTY_FACTS  # the facts of items

    @staticmethod
    def of(chain: Sequence[ChainLink], generation: object) -> Ancestry:
        heads = tuple(link.head for link in chain)
        items = tuple(chain_items(chain))
        owners = frozenset(head.owner for head in heads)
        oldest = min((h.created_at for h in heads), default=math.inf)
        return Ancestry(heads, items, generation, owners, oldest, Facts.of(items))


EMPTY = Ancestry((), ())


class ContextCache:
    """The `Ancestry` of the latest saved responses, by id (thread-safe), so a chained request costs its own
    items.  An entry is used only while its whole chain is live, chainable, one owner's and unchanged: known
    without a read while the store's generation is the one it was checked at and its oldest response is within
    retention, else by one batched read of the heads."""

    def __init__(self, limit: int = CONTEXT_CACHE_LIMIT) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, Ancestry] = OrderedDict()

    def lookup(self, response_id: str, owner: str | None, store: ResponseStore) -> Ancestry | None:
        """*response_id*'s ancestry while its whole chain is live, chainable and *owner*'s (any, for None)."""
        with self._lock:
            entry = self._entries.get(response_id)
            if entry is not None:
                self._entries.move_to_end(response_id)
        if entry is None or (owner is not None and entry.owners != {owner}):
            return None
        generation = store.generation()
        if generation == entry.generation and store.now() < entry.oldest + store.retention:
            return entry  # nothing was removed since it was checked, and nothing of it expired
        live = store.heads([head.id for head in entry.heads])
        fresh = all(live.get(head.id) == head for head in entry.heads)
        with self._lock:
            if fresh:
                entry = self._entries[response_id] = replace(entry, generation=generation)
            else:
                self._entries.pop(response_id, None)
        return entry if fresh else None

    def add(self, saved: Head, parent: Ancestry, items: Sequence[Item], facts: Facts) -> None:
        """Keep *saved*'s ancestry: *parent*'s as checked when the request was resolved (its generation stays
        the entry's), then *items*; *facts* are of them all."""
        oldest, owners = min(parent.oldest, saved.created_at), parent.owners | {saved.owner}
        heads = (*parent.heads, saved)
        entry = Ancestry(heads, (*parent.items, *items), parent.generation, owners, oldest, facts)
        with self._lock:
            self._entries[saved.id] = entry
            self._entries.move_to_end(saved.id)
            while len(self._entries) > self.limit:
                self._entries.popitem(last=False)


def open_store(
    spec: str,
    *,
    retention: float = DEFAULT_RETENTION,
    clock: Clock = time.time,
    max_responses: int = DEFAULT_MAX_RESPONSES,
) -> ResponseStore:
    """Open a store from its command-line spelling, ``"memory"`` or ``"sqlite:PATH"`` (ValueError otherwise,
    or for a negative retention)."""
    if not retention >= 0:
        raise ValueError(f"retention must be a non-negative number of seconds, got {retention!r}")
    if spec == "memory":
        return MemoryResponseStore(retention=retention, clock=clock, max_responses=max_responses)
    if spec.startswith("sqlite:") and len(spec) > len("sqlite:"):
        return SQLiteResponseStore(spec[len("sqlite:") :], retention=retention, clock=clock)
    raise ValueError(f"unknown store {spec!r}: expected 'memory' or 'sqlite:PATH'")


class Model(Protocol):
    """What the server needs from a model backend (``ScriptedModel`` is one)."""

    def respond(
        self, context: Sequence[Item], *, instructions: str | Sequence[Any] | None = None
    ) -> ModelReply:
        """Answer the resolved *context*."""


@dataclass(frozen=True)
class Turn:
    """A validated create request, not yet answered: *chain*, its stored ancestors when they were read (empty
    when *ancestry* came from the `ContextCache`); *context*, the chain's items, then the new input, resolved.
    """

    request: CreateRequest
    chain: list[ChainLink]
    context: list[Item]
    response_id: str
    created_at: float
    owner: str = ""
    ancestry: Ancestry = EMPTY


class AsyncModel(Protocol):
    """An asynchronous model backend that answers every HTTP create (the upstream provider is one); its
    methods raise `APIError` for a call that failed before a response existed."""

    async def reply(self, turn: Turn) -> ModelReply:
        """Answer *turn* (non-streamed)."""

    async def open_stream(self, turn: Turn) -> AsyncIterator[dict[str, Any] | ModelReply]:
        """Start answering *turn* as a stream, once the backend accepted it: output item events (no sequence
        numbers, no lifecycle events), then the final `ModelReply`."""


@dataclass(frozen=True)
class PendingResponse(Turn):
    """An answered `Turn` not yet (fully) saved: its *response* object, sent after *delay* seconds."""

    response: dict[str, Any] = field(default_factory=dict)
    delay: float = 0.0

    @property
    def input_items(self) -> list[Item]:
        """The request's own input items as resolved (what is stored, so a chain replays them alike)."""
        return self.context[len(self.context) - len(self.request.input_items) :]


class ServerState:
    """Everything the running server knows; thread-safe.

    Args:
        store: A `ResponseStore`, or its spelling ``"memory"`` / ``"sqlite:PATH"``.
        retention: Seconds responses are kept (only when *store* is a spelling).
        max_responses: Most responses a spelled ``"memory"`` store keeps (the oldest are evicted).
        max_depth: Most stored responses one chain may hold.
        model: The backend; a `ScriptedModel` by default.
        clock: Time source for timestamps and (for a spelled store) retention.
        record: Keep what tests look at (`requests`, WebSocket client frames, `resolved_context`). It grows
            with traffic and holds ``store: false`` content: ``anchortrack serve`` records only with
            ``--test-hooks``.
        backend: An asynchronous backend (e.g. an upstream provider) that answers instead of *model*.

    Attributes:
        zdr: Refuse every ``previous_response_id`` with OpenAI's zero-data-retention error.
        stale_in_stream: Refuse a streamed request's unknown ``previous_response_id`` as llama-stack does:
            HTTP 200, then one ``{"error": {…, "code": "404"}}`` event.
        announce_per_request: Say on every response that request properties apply per request (``False``
            serves like a server anchortrack does not know).
        ignore_previous_response_id: Accept ``previous_response_id`` and answer as if it were absent, as a
            server that does not chain does (for tests of finding such a server).
    """

    def __init__(
        self,
        store: ResponseStore | str = "memory",
        *,
        retention: float = DEFAULT_RETENTION,
        max_depth: int = DEFAULT_MAX_DEPTH,
        model: Model | None = None,
        clock: Clock | None = None,
        record: bool = True,
        backend: AsyncModel | None = None,
        max_responses: int = DEFAULT_MAX_RESPONSES,
    ) -> None:
        self._clock: Clock = clock or time.time
        self._owns_store = isinstance(store, str)
        if isinstance(store, str):
            store = open_store(store, retention=retention, clock=self._clock, max_responses=max_responses)
        self.store, self.max_depth = store, max_depth
        self.model: Model = model or ScriptedModel()
        self.backend = backend
        self.zdr = self.stale_in_stream = self.ignore_previous_response_id = False
        self.announce_per_request = True
        self.record = record
        self._lock = threading.Lock()
        self._requests: list[Any] = []
        # response id → (parent id, its input items, its output items)
        self._seen: dict[str, tuple[str | None, list[Item], list[Item]]] = {}
        # item id → owner → the first stored response seen holding it (oldest ids dropped: ITEM_INDEX_LIMIT)
        self._items: dict[str, dict[str, str]] = {}
        self._contexts = ContextCache()

    @property
    def requests(self) -> list[Any]:
        """Copies of every ``POST /v1/responses`` JSON body received, in arrival order."""
        with self._lock:
            return copy.deepcopy(self._requests)

    def reset_requests(self) -> None:
        with self._lock:
            self._requests.clear()

    def resolved_context(self, response_id: str) -> list[Item]:
        """The items the model saw for *response_id* (stored or not, while `record` is on), oldest first, item
        references and by-id reasoning items resolved; no instructions, not the response's own output.

        Raises:
            KeyError: The server created no such response (or was not recording).
        """
        with self._lock:
            if response_id not in self._seen:
                raise KeyError(response_id)
            parent, own_input, _ = self._seen[response_id]
            items = _unwind(response_id, own_input, parent, lambda ancestor: self._seen[ancestor])
            return copy.deepcopy(items)

    def resolve_input(self, items: list[Item]) -> list[Item]:
        """The context the model would see for *items* sent without ``previous_response_id`` (or APIError)."""
        return copy.deepcopy(resolve_context(items, self.stored_item))

    def stored_item(self, item_id: str, owner: str | None = None) -> Item | None:
        """The item with this id of *owner*'s (any, for None) oldest live stored response holding it, or None.

        An id names the item first stored under it, for good, as on OpenAI: a later input reusing the id with
        other content is stored as sent but does not change what the id resolves to.  When the index names no
        live holder (deleted, expired, saved before a restart), the store is searched, oldest first."""
        with self._lock:
            known = dict(self._items.get(item_id, {}))
        for holder, response_id in known.items():
            link = self.link(response_id) if owner in (None, holder) else None
            if link is not None and (item := link.item(item_id)) is not None:
                return item
        found = self.store.find_item(item_id, owner)
        if owner is not None and found is not None:
            with self._lock:  # the store's oldest live holder replaces the index's dead one
                self._items.setdefault(item_id, {})[owner] = found[0]
        return None if found is None else found[1]

    def link(self, response_id: str, owner: str | None = None) -> ChainLink | None:
        """The chain data of a live stored response of *owner* (any, for None), or None."""
        found = self.store.link(response_id)
        return found if found is not None and owner in (None, found.owner) else None

    def _get(self, response_id: str, owner: str | None) -> StoredResponse:
        record = self.store.get(response_id)
        if record is None or owner not in (None, record.owner):
            raise _errors.response_not_found(response_id)
        return record

    def expire(self, response_id: str) -> None:
        """Make a stored response look expired (chaining fails, retrieving 404s); KeyError if none is live."""
        if not self.store.expire(response_id):
            raise KeyError(response_id)

    def drop(self, response_id: str) -> None:
        """Delete a stored response from the store; KeyError if none has this id."""
        if not self.store.delete(response_id):
            raise KeyError(response_id)

    def close(self) -> None:
        """Close the store if this state opened it."""
        if self._owns_store:
            self.store.close()

    def record_request(self, body: object) -> None:
        """Remember a received body while `record` is on (called for every parsed POST, rejected or not)."""
        if self.record:
            snapshot = copy.deepcopy(body)
            with self._lock:
                self._requests.append(snapshot)

    def prepare(
        self,
        body: object,
        *,
        owner: str | None = None,
        link: Callable[[str], ChainLink | None] | None = None,
        generate: bool = True,
    ) -> PendingResponse:
        """`resolve` *body*, then answer it with the model (*generate* ``False``: without it, a ``completed``
        response with no output, as a WebSocket warm-up)."""
        turn = self.resolve(body, owner=owner, link=link)
        reply = self.model.respond(turn.context, instructions=turn.request.instructions) if generate else None
        return self.finish(turn, reply or ModelReply(status="completed"))

    def resolve(
        self, body: object, *, owner: str | None = None, link: Callable[[str], ChainLink | None] | None = None
    ) -> Turn:
        """Validate *body*, resolve its chain and check its context.

        Args:
            owner: Digest of the caller's API key: only its stored responses and items resolve, and the
                response belongs to it.  ``None`` (in-process callers) resolves every owner's and saves the
                response as keyless.
            link: Resolve parents through this lookup instead of the store's (the WebSocket endpoint puts its
                connection-local cache in front of the store); the zero-data-retention refusal is then the
                lookup's business.

        Raises:
            APIError: For every refusal, in OpenAI's shape.
        """
        request = parse_create_request(body)
        chain: list[ChainLink] = []
        ancestry = Ancestry((), (), self.store.generation())
        if (parent := request.previous_response_id) is not None:
            if self.zdr and link is None:
                raise _errors.zero_data_retention()
            cached = None if link is not None else self._contexts.lookup(parent, owner, self.store)
            if cached is not None and len(cached.heads) <= self.max_depth:
                ancestry = cached  # no ancestor read: the parent's resolved chain, checked live
            else:
                lookup = link or (lambda response_id: self.link(response_id, owner))
                chain = resolve_chain(parent, lookup, max_depth=self.max_depth)
                ancestry = Ancestry.of(chain, ancestry.generation)
        inputs = resolve_items(ancestry.items, request.input_items, partial(self.stored_item, owner=owner))
        context = Context([*ancestry.items, *inputs], ancestry.facts.extend(inputs))
        check_context(context)
        return Turn(request, chain, context, new_id("resp"), self._clock(), owner or "", ancestry)

    def finish(self, turn: Turn, reply: ModelReply, *, record: bool = True) -> PendingResponse:
        """The response for *turn* answered by *reply*; *record* its context for tests."""
        response = build_response(
            turn.request,
            reply,
            response_id=turn.response_id,
            created_at=turn.created_at,
            context=turn.context,
            announce=self.announce_per_request,
        )
        pending = PendingResponse(**vars(turn), response=response, delay=reply.delay)
        if record and self.record:
            with self._lock:
                for link in turn.chain:
                    self._seen.setdefault(link.id, (link.previous_response_id, link.input_items, link.output))
                own = (turn.request.previous_response_id, pending.input_items, reply.output)
                self._seen[turn.response_id] = own
        return pending

    def _record(self, pending: PendingResponse, response: dict[str, Any]) -> StoredResponse:
        head = (response["id"], pending.request.previous_response_id, response["status"], pending.input_items)
        return StoredResponse(*head, response, owner=pending.owner)

    def save_in_progress(self, pending: PendingResponse) -> None:
        """Store the response as ``in_progress`` (streams, before ``response.created``)."""
        if pending.request.store:
            self.store.save(self._record(pending, in_progress_snapshot(pending.response)))

    def save_final(self, pending: PendingResponse, *, overwrite: bool = False) -> None:
        """Store the finished response (before its id or terminal event is sent)."""
        if not pending.request.store:
            return
        record, parent = self._record(pending, pending.response), pending.request.previous_response_id
        saved = self.store.save(record, overwrite=overwrite, expected_previous_response_id=parent)
        self._remember_context(pending, saved)
        with self._lock:  # what ids resolve to (the inputs are resolved: no pointers among them)
            for item in [*pending.input_items, *pending.response["output"]]:
                if isinstance(item_id := item.get("id"), str):  # one key's ids never shadow another's
                    self._items.setdefault(item_id, {}).setdefault(pending.owner, pending.response["id"])
            while len(self._items) > ITEM_INDEX_LIMIT:
                del self._items[next(iter(self._items))]

    def _remember_context(self, pending: PendingResponse, saved: StoredResponse) -> None:
        """Cache *saved*'s resolved chain: the parent's this request resolved, plus its own items."""
        if saved.status not in CHAINABLE_STATUSES:
            return
        parent = pending.ancestry
        if saved.previous_response_id is None:
            parent = replace(EMPTY, generation=parent.generation)
        resolved = len(pending.context) - len(pending.request.input_items)
        parent_id = parent.heads[-1].id if parent.heads else None
        if len(parent.items) != resolved or saved.previous_response_id != parent_id:
            return  # stored otherwise than resolved (a WebSocket parent stored as its whole context)
        head = Head(saved.id, saved.previous_response_id, saved.status, saved.owner, saved.created_at)
        facts = context_facts(pending.context).extend(saved.output)
        self._contexts.add(head, parent, [*saved.input_items, *saved.output], facts)

    def save_final_or_log(self, pending: PendingResponse) -> bool:
        """Save the finished *pending* over its in-progress record; a failure is logged and gives False."""
        try:
            self.save_final(pending, overwrite=True)
        except Exception as exc:
            logger.error("anchortrack.server.save_failed", exc_info=exc)
            return False
        return True

    async def live_events(
        self, pending: PendingResponse, to_save: PendingResponse | None
    ) -> AsyncGenerator[dict[str, Any], None]:
        """*pending*'s events as a live stream sends them (HTTP and WebSocket alike), its delay waited after
        ``response.in_progress``; *to_save* (if any) is saved before the terminal event (an ``error`` event
        when that fails), and even if closed early.  Close it with `contextlib.aclosing`."""
        events = stream_events(pending.response)
        finished = False
        try:
            for event in events[:2]:
                yield event
            if pending.delay > 0:
                await asyncio.sleep(pending.delay)
            for event in events[2:-1]:
                yield event
            finished = True
            if to_save is not None and not self.save_final_or_log(to_save):
                failed = _errors.error_event("server_error", _errors.SAVE_FAILED)
                yield {**failed, "sequence_number": events[-1]["sequence_number"]}
                return
            yield events[-1]
        finally:
            if not finished and to_save is not None:
                self.save_final_or_log(to_save)

    def get_response(self, response_id: str, owner: str | None = None) -> dict[str, Any]:
        """The stored response object of *owner* (any, for None); APIError 404 if none."""
        return self._get(response_id, owner).response

    def delete_response(self, response_id: str, owner: str | None = None) -> dict[str, Any]:
        """Delete a stored response of *owner* (any, for None): OpenAI's deletion object, or APIError 404."""
        self._get(response_id, owner)
        if not self.store.delete(response_id):
            raise _errors.response_not_found(response_id)
        return {"id": response_id, "object": "response.deleted", "deleted": True}

    def input_items(
        self,
        response_id: str,
        owner: str | None = None,
        *,
        after: str | None = None,
        limit: int = 20,
        order: str = "desc",
    ) -> dict[str, Any]:
        """One page of the items used to generate a stored response, read from the store now; the walk stops
        at the first ancestor no longer stored, an item without an ``id`` is listed with a stable one.

        Raises:
            APIError: 404 when the response is not stored (or another key's); 400 for a bad ``limit`` or
                ``order``.
        """
        if not 1 <= limit <= 100:
            message = f"Invalid 'limit': expected a value between 1 and 100, but got {limit}."
            raise _errors.invalid_value("limit", message)
        if order not in ("asc", "desc"):
            message = f"Invalid value: '{order}'. Supported values are: 'asc' and 'desc'."
            raise _errors.invalid_value("order", message)
        record = self._get(response_id, owner)

        def ancestor(parent: str) -> tuple[str | None, list[Item], list[Item]] | None:
            found = self.store.get(parent)
            if found is None or found.owner != record.owner:
                return None
            return found.previous_response_id, _listed(found.id, found.input_items), found.output

        own_input = _listed(record.id, record.input_items)
        items = _unwind(record.id, own_input, record.previous_response_id, ancestor, self.max_depth)
        if order == "desc":
            items.reverse()
        ids = [item.get("id") for item in items]
        start = 0 if after is None else ids.index(after) + 1 if after in ids else len(items)
        page = items[start : start + limit]
        first, last = (page[0]["id"], page[-1]["id"]) if page else (None, None)
        more = start + limit < len(items)
        return {"object": "list", "data": page, "first_id": first, "last_id": last, "has_more": more}


def _unwind(
    response_id: str,
    own_input: list[Item],
    parent: str | None,
    step: Callable[[str], tuple[str | None, list[Item], list[Item]] | None],
    max_depth: float = math.inf,
) -> list[Item]:
    """The items of *response_id*'s chain, oldest first, ending with its *own_input*; *step* gives an
    ancestor's ``(parent, input items, output items)``, or None where the walk stops."""
    segments = [own_input]
    seen = {response_id}
    while parent is not None and parent not in seen and len(seen) <= max_depth:
        seen.add(parent)
        found = step(parent)
        if found is None:
            break
        parent, inputs, outputs = found
        segments += [outputs, inputs]
    return [item for segment in reversed(segments) for item in segment]


def _listed(response_id: str, items: list[Item]) -> list[Item]:
    """*items* with a stable made-up id on each that arrived without one."""
    listed = []
    for index, item in enumerate(items):
        if not isinstance(item.get("id"), str):
            digest = hashlib.sha256(f"{response_id}:{index}".encode()).hexdigest()[:48]
            item = {"id": f"{item_type(item.get('type', 'message')).prefix}_{digest}", **item}
        listed.append(item)
    return listed
