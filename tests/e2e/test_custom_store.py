"""A store of one's own is four sync methods: a sync and an async client both chain through it."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

import openai
import pytest

import anchortrack
from anchortrack import Anchor, AnchorStore
from anchortrack.server import ResponsesServer, WireTap

from ..helpers import assert_server_saw, scope_of, sent, user


class DictStore:
    """The smallest store: the four methods over a dict; it notes the threads it ran on."""

    ttl = 3600.0
    secret_key = None

    def __init__(self) -> None:
        self.anchors: dict[tuple[str, bytes], Anchor] = {}
        self.threads: set[str] = set()

    def _note(self) -> None:
        self.threads.add(threading.current_thread().name)

    def find(self, scope: str, views: Sequence[bytes]) -> Mapping[bytes, Anchor]:
        self._note()
        return {v: a for v in views if (a := self.anchors.get((scope, v))) is not None}

    def get(self, scope: str, response_id: str) -> Anchor | None:
        self._note()
        return next(
            (a for (s, _), a in self.anchors.items() if s == scope and a.response_id == response_id), None
        )

    def put(self, scope: str, anchor: Anchor) -> None:
        self._note()
        self.anchors[scope, anchor.view] = anchor

    def evict(self, scope: str, response_id: str) -> None:
        self._note()
        self.anchors = {
            k: a for k, a in self.anchors.items() if k[0] != scope or a.response_id != response_id
        }


def test_four_sync_methods_are_a_store() -> None:
    """The protocol asks for the four sync methods only; `wrap` takes such a store."""
    store = DictStore()
    assert isinstance(store, AnchorStore)
    assert not hasattr(store, "afind")


async def test_an_async_client_chains_through_a_sync_only_store(
    server: ResponsesServer, raw_aclient: openai.AsyncOpenAI, wire: WireTap
) -> None:
    """Over loopback HTTP: each turn chains from the last, the store's methods run off the event loop."""
    store = DictStore()
    aclient = anchortrack.wrap(raw_aclient, store=store)
    history: list[Any] = [user("one")]
    replies = []
    for n in range(3):
        reply = await aclient.responses.create(model="scripted", input=history)
        assert_server_saw(server, reply.id, history)
        replies.append(reply)
        history.extend([*reply.output, user(f"turn {n}")])
        if n:
            assert replies[n - 1].id == sent(wire)["previous_response_id"]

    stats = anchortrack.tracker(aclient).stats
    assert 2 == stats.count("chained")
    assert 3 == stats.snapshot()["recorded"]
    assert {} == stats.snapshot()["store_errors"]
    assert store.threads == {"anchortrack-store"}  # never on the event loop's thread
    assert any(a.response_id == replies[-1].id for a in store.anchors.values())
    assert store.get(scope_of(aclient).key, replies[-1].id) is not None


def test_a_sync_client_chains_through_the_same_store(
    server: ResponsesServer, raw_client: openai.OpenAI, wire: WireTap
) -> None:
    """The same four methods serve a sync client (in the store's worker threads, with its deadline)."""
    store = DictStore()
    client = anchortrack.wrap(raw_client, store=store)
    history: list[Any] = [user("one")]
    first = client.responses.create(model="scripted", input=history)
    history.extend([*first.output, user("two")])
    second = client.responses.create(model="scripted", input=history)
    assert_server_saw(server, second.id, history)
    assert first.id == sent(wire)["previous_response_id"]
    assert 1 == anchortrack.tracker(client).stats.count("chained")


@pytest.mark.parametrize("failing", ["find", "put"])
async def test_a_failing_sync_only_store_fails_open_for_an_async_client(
    server: ResponsesServer, raw_aclient: openai.AsyncOpenAI, wire: WireTap, failing: str
) -> None:
    """A method that raises fails open, as with any store: the call goes through, the backlog chains it."""
    store = DictStore()

    def broken(*args: object) -> None:
        raise ConnectionError("down")

    setattr(store, failing, broken)
    aclient = anchortrack.wrap(raw_aclient, store=store)
    history: list[Any] = [user("one")]
    first = await aclient.responses.create(model="scripted", input=history)
    history.extend([*first.output, user("two")])
    second = await aclient.responses.create(model="scripted", input=history)
    assert_server_saw(server, second.id, history)
    assert first.id == sent(wire)["previous_response_id"]  # from the tracker's backlog
    assert 1 <= anchortrack.tracker(aclient).stats.snapshot()["store_errors"][failing]
