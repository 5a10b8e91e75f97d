"""
Which stores the tracker runs inline, without a deadline: `MemoryStore` and
subclasses that do not replace its store methods, never a subclass that may
block in one it overrides.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

import openai

import anchortrack
from anchortrack.server import ResponsesServer, WireTap
from anchortrack.stores import Anchor, MemoryStore
from anchortrack.stores._base import runs_inline

from ..helpers import assert_server_saw, sent, user


class LoggingStore(MemoryStore):
    """Adds state, replaces no store method: still inline."""

    label = "logging"


class SlowFind(MemoryStore):
    """A store whose ``find`` does I/O that can hang (here: waits for an event)."""

    def __init__(self) -> None:
        super().__init__()
        self.hang = False
        self.asleep = threading.Event()
        self.woke = threading.Event()
        self.release = threading.Event()

    def find(self, scope: str, views: Sequence[bytes]) -> Mapping[bytes, Anchor]:
        if self.hang:
            self.asleep.set()
            self.release.wait(10)
            self.woke.set()
        return super().find(scope, views)


class VouchedFind(SlowFind):
    """Overrides ``find`` and declares itself non-blocking again: its own word."""

    never_blocks = True


class SlowAsyncPut(LoggingStore):
    async def aput(self, scope: str, anchor: Anchor) -> None:
        self.put(scope, anchor)


class Undeclared:
    """A custom store that says nothing: it gets a deadline."""


class Declared:
    never_blocks = True


def test_which_stores_run_inline() -> None:
    """Overriding any store method below the class that declares ``never_blocks`` loses it."""
    assert runs_inline(MemoryStore())
    assert runs_inline(LoggingStore())
    assert not runs_inline(SlowFind())
    assert not runs_inline(SlowAsyncPut())
    assert runs_inline(VouchedFind())
    assert not runs_inline(Undeclared())
    assert runs_inline(Declared())

    patched = MemoryStore()
    patched.evict = lambda scope, response_id: None  # type: ignore[method-assign]
    assert not runs_inline(patched)

    class Refused(MemoryStore):
        never_blocks = False

    assert not runs_inline(Refused())


def _turn(client: openai.OpenAI, server: ResponsesServer, history: list[Any], n: int) -> Any:
    reply = client.responses.create(model="scripted", input=history)
    assert_server_saw(server, reply.id, history)
    history.extend([*reply.output, user(f"turn {n}")])
    return reply


def test_a_memory_store_subclass_that_hangs_in_find_never_holds_the_call(
    server: ResponsesServer, raw_client: openai.OpenAI, wire: WireTap
) -> None:
    """The subclass does not inherit ``never_blocks``: its find gets the store deadline."""
    store = SlowFind()
    client = anchortrack.wrap(raw_client, store=store)
    tracker = anchortrack.tracker(client)
    tracker.store_timeout = 0.2
    history: list[Any] = [user("one")]
    _turn(client, server, history, 1)
    second = _turn(client, server, history, 2)

    store.hang = True
    try:
        _turn(client, server, history, 3)

        assert store.asleep.is_set()
        assert not store.woke.is_set()  # the call came back while find still hangs
        assert second.id == sent(wire)["previous_response_id"]  # from the tracker's own recent anchors
        assert {"find": 1} == tracker.stats.snapshot()["store_errors"]
    finally:
        store.hang = False
        store.release.set()
