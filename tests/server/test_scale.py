"""The server under a team's load: chains cost their own items, memory is bounded, ids name one item."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from anchortrack.server import ResponsesServer
from anchortrack.server._records import MemoryResponseStore, ResponseStore, SQLiteResponseStore

from ..helpers import FakeClock, user
from .helpers import post_json
from .test_store import record


def _reply(answer: dict[str, Any]) -> str:
    text = answer["output"][-1]["content"][0]["text"]
    assert isinstance(text, str)
    return text


def _chain(server: ResponsesServer, depth: int) -> str:
    """A conversation *depth* responses deep; the id of its last response."""
    previous: str | None = None
    for turn in range(depth):
        body: dict[str, Any] = {"model": "scripted", "input": f"turn {turn}"}
        if previous is not None:
            body["previous_response_id"] = previous
        status, answer = post_json(server, body)
        assert 200 == status, answer
        previous = answer["id"]
    assert previous is not None
    return previous


class _Reads:
    """Counts the records a store reads and decodes (``get`` and ``link``), while on."""

    def __init__(self, store: ResponseStore, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        for name in ("get", "link"):
            monkeypatch.setattr(store, name, self._counted(getattr(store, name)))

    def _counted(self, read: Callable[[str], Any]) -> Callable[[str], Any]:
        def counted(response_id: str) -> Any:
            self.count += 1
            return read(response_id)

        return counted


def test_a_request_costs_its_own_items_not_its_chains_depth(
    any_server: ResponsesServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The next request of a 300-deep conversation reads no more stored records than that of a 10-deep
    one (no ancestor is read or decoded), and still sees the whole chain."""
    tips = {depth: _chain(any_server, depth) for depth in (10, 300)}
    reads = _Reads(any_server.state.store, monkeypatch)
    cost: dict[int, int] = {}
    seen: dict[int, str] = {}
    for depth, tip in tips.items():
        reads.count = 0
        status, answer = post_json(
            any_server, {"model": "scripted", "input": "next", "previous_response_id": tip}
        )
        assert 200 == status, answer
        cost[depth], seen[depth] = reads.count, _reply(answer)

    assert cost[300] <= 3 * max(cost[10], 1), cost
    assert "[items:601]" in seen[300]  # 300 inputs, 300 outputs, then "next"
    assert "[items:21]" in seen[10]


def test_a_cached_chain_is_checked_live_in_the_store(tmp_path: Path) -> None:
    """A SQLite chain whose middle response another process's store expired (or deleted) is refused,
    naming that response, though this server resolved the chain from its cache a moment before."""
    path = tmp_path / "shared.db"
    with ResponsesServer(store=f"sqlite:{path}") as srv:
        ids = [_chain(srv, 1)]
        for turn in range(4):
            body = {"model": "scripted", "input": f"t{turn}", "previous_response_id": ids[-1]}
            ids.append(post_json(srv, body)[1]["id"])
        other = SQLiteResponseStore(path)
        try:
            assert other.expire(ids[2])
            status, refused = post_json(
                srv, {"model": "scripted", "input": "x", "previous_response_id": ids[-1]}
            )
            assert other.delete(ids[1])
            status_deleted, _ = post_json(
                srv, {"model": "scripted", "input": "x", "previous_response_id": ids[1]}
            )
        finally:
            other.close()

    assert 400 == status
    assert "previous_response_not_found" == refused["error"]["code"]
    assert ids[2] in refused["error"]["message"]
    assert 400 == status_deleted


def test_a_cached_chain_expires_with_its_oldest_response() -> None:
    """Retention counts on a cached chain too: once its first response is older than the retention, a
    request chaining from its newest response is refused, naming the first."""
    clock = FakeClock(1_000_000.0)
    with ResponsesServer(store=MemoryResponseStore(retention=100, clock=clock)) as srv:
        first = _chain(srv, 1)
        clock.advance(60)
        body = {"model": "scripted", "input": "more", "previous_response_id": first}
        second = post_json(srv, body)[1]["id"]
        assert 200 == post_json(srv, {**body, "previous_response_id": second})[0]  # the cache holds it
        clock.advance(50)
        status, refused = post_json(srv, {**body, "previous_response_id": second})

    assert 400 == status
    assert f"Previous response with id '{first}' not found." == refused["error"]["message"]


@pytest.fixture(name="small_server")
def _small_server() -> Iterator[ResponsesServer]:
    with ResponsesServer(store=MemoryResponseStore(max_responses=5)) as srv:
        yield srv


def test_the_memory_store_keeps_at_most_max_responses(small_server: ResponsesServer) -> None:
    """With max_responses=5 the store holds 5 responses; a chain through an evicted one is refused with
    previous_response_not_found (which clients recover from) and the newest chain still works."""
    ids = [post_json(small_server, {"model": "scripted", "input": "first"})[1]["id"]]
    for turn in range(4):  # a chain of 5: it fits
        body = {"model": "scripted", "input": f"t{turn}", "previous_response_id": ids[-1]}
        status, answer = post_json(small_server, body)
        assert 200 == status, answer
        ids.append(answer["id"])
    fresh = [post_json(small_server, {"model": "scripted", "input": f"new {n}"})[1]["id"] for n in range(3)]

    store = small_server.state.store
    assert 5 == store.count()
    assert [None, None, None] == [store.get(response_id) for response_id in ids[:3]]
    assert store.get(ids[3]) is not None
    status, refused = post_json(
        small_server, {"model": "scripted", "input": "x", "previous_response_id": ids[-1]}
    )
    assert (400, "previous_response_not_found") == (status, refused["error"]["code"])
    status, answer = post_json(
        small_server, {"model": "scripted", "input": "x", "previous_response_id": fresh[-1]}
    )
    assert 200 == status
    assert 5 == store.count()


def test_the_memory_bound_holds_rows_and_their_decoded_links() -> None:
    """Eviction frees a record's row and its decoded chain data alike."""
    store = MemoryResponseStore(max_responses=100)
    for n in range(1000):
        store.save(record(f"resp_{n}"))
        store.link(f"resp_{n}")

    assert 100 == store.count() == len(store._rows)
    assert len(store._links) <= 100
    assert store.get("resp_899") is None
    assert store.get("resp_900") is not None
    with pytest.raises(ValueError, match="max_responses"):
        MemoryResponseStore(max_responses=0)


@pytest.mark.parametrize("form", ["item_reference", "bare_reference"])
def test_a_reused_id_resolves_to_the_first_item_stored_under_it(
    any_server: ResponsesServer, form: str
) -> None:
    """An id names the item first stored under it: after a later request stores other content under the
    same id (a redacted copy sent back in full), a full request naming the id and a chain through the
    first holder resolve the same context (issue 35, item 2)."""
    status, first = post_json(any_server, {"model": "scripted", "input": [user("hello")]})
    assert 200 == status
    message = first["output"][0]
    redacted = {**message, "content": [{"type": "output_text", "text": "[redacted]", "annotations": []}]}
    status, _ = post_json(
        any_server, {"model": "scripted", "input": [user("hello"), redacted, user("go on")]}
    )
    assert 200 == status
    pointer = (
        {"type": "item_reference", "id": message["id"]} if form == "item_reference" else {"id": message["id"]}
    )

    status_full, by_full = post_json(
        any_server, {"model": "scripted", "input": [user("hello"), pointer, user("more")], "store": False}
    )
    status_chained, by_chain = post_json(
        any_server, {"model": "scripted", "input": [user("more")], "previous_response_id": first["id"]}
    )

    assert (200, 200) == (status_full, status_chained)
    assert [user("hello"), message, user("more")] == any_server.state.resolved_context(by_full["id"])
    digests = [re.findall(r"\[ctx:\w+\]", _reply(answer)) for answer in (by_full, by_chain)]
    assert len(digests[0]) == 1
    assert digests[0] == digests[1]


def test_a_requests_per_item_work_and_time_do_not_grow_with_depth(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Chaining from a 300-deep response encodes, inspects and counts as many items as chaining from a
    10-deep one (its own input and output: the parent's facts are cached), and, measured alternately in
    one run on a real SQLite file, takes at most twice its CPU time."""
    from anchortrack.server import _chain, _facts, _model
    from anchortrack.server._state import ServerState

    state = ServerState(f"sqlite:{tmp_path / 'deep.db'}", record=False)
    tips: dict[int, str] = {}
    previous: str | None = None
    for turn in range(300):
        body: dict[str, Any] = {"model": "m", "input": f"turn {turn}"}
        if previous is not None:
            body["previous_response_id"] = previous
        pending = state.prepare(body)
        state.save_final(pending)
        previous = tips[turn + 1] = pending.response["id"]

    operations = 0

    def counted(function: Callable[..., Any]) -> Callable[..., Any]:
        def count(*args: Any) -> Any:
            nonlocal operations
            operations += 1
            return function(*args)

        return count

    for module, name in [(_facts, "canonical_json"), (_facts, "is_reference"), (_chain, "is_reference")]:
        monkeypatch.setattr(module, name, counted(getattr(module, name)))
    monkeypatch.setattr(_model, "_is_user_message", counted(_model._is_user_message))

    def next_request(depth: int) -> tuple[int, float, str]:
        nonlocal operations
        operations, started = 0, time.process_time()
        pending = state.prepare({"model": "m", "input": "next", "previous_response_id": tips[depth]})
        state.save_final(pending)
        return operations, time.process_time() - started, _reply(pending.response)

    counts: dict[int, set[int]] = {10: set(), 300: set()}
    seconds: dict[int, float] = {10: 0.0, 300: 0.0}
    for _ in range(40):
        for depth in (10, 300):
            count, spent, text = next_request(depth)
            counts[depth].add(count)
            seconds[depth] += spent
            assert f"[items:{2 * depth + 1}]" in text
    state.close()

    assert counts[10] == counts[300]
    assert seconds[300] <= 2 * seconds[10], seconds
