"""
Sync stores get the same deadline as async ones, the write after the response included.

A store that hangs — one that sleeps, a real ``redis-server`` frozen with
SIGSTOP, a ``redis.Redis`` built without socket timeouts — never holds the
caller past ``store_timeout``: each test checks that the call came back while
the store call was still hanging. A write that missed its deadline waits in
the backlog (and the conversation keeps chaining from it); when the store
answers again, chaining resumes and the backlog is written.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import openai
import pytest
import redis
import redis.asyncio
from structlog.testing import capture_logs

import anchortrack
from anchortrack.server import ResponsesServer, WireTap, http_client_classes
from anchortrack.stores import Anchor, MemoryStore, RedisStore

from .._redis import RedisServer
from ..helpers import assert_server_saw, scope_of, sent, user


class SleepingStore(MemoryStore):
    """A store whose chosen operations block until released (sync: the thread; async: the task)."""

    never_blocks = False  # it does block: the tracker must give it a deadline

    def __init__(self) -> None:
        super().__init__()
        self.sleepy: set[str] = set()
        self.release = threading.Event()
        self.asleep = threading.Event()

    def _nap(self, operation: str) -> None:
        if operation in self.sleepy:
            self.asleep.set()
            self.release.wait(30)

    def find(self, scope: str, views: Sequence[bytes]) -> dict[bytes, Anchor]:
        self._nap("find")
        return super().find(scope, views)

    def put(self, scope: str, anchor: Anchor) -> None:
        self._nap("put")
        super().put(scope, anchor)

    async def afind(self, scope: str, views: Sequence[bytes]) -> dict[bytes, Anchor]:
        await asyncio.to_thread(self._nap, "find")
        return super().find(scope, views)

    async def aput(self, scope: str, anchor: Anchor) -> None:
        await asyncio.to_thread(self._nap, "put")
        super().put(scope, anchor)


def _turn(client: openai.OpenAI, server: ResponsesServer, history: list[Any], n: int) -> Any:
    reply = client.responses.create(model="scripted", input=history)
    assert_server_saw(server, reply.id, history)
    history.extend([*reply.output, user(f"turn {n}")])
    return reply


async def _aturn(aclient: openai.AsyncOpenAI, server: ResponsesServer, history: list[Any], n: int) -> Any:
    reply = await aclient.responses.create(model="scripted", input=history)
    assert_server_saw(server, reply.id, history)
    history.extend([*reply.output, user(f"turn {n}")])
    return reply


# -- a store that sleeps ------------------------------------------------------------


@pytest.mark.parametrize("operation", ["find", "put"])
def test_a_sleeping_sync_store_never_holds_the_call(
    server: ResponsesServer, raw_client: openai.OpenAI, wire: WireTap, operation: str
) -> None:
    """A find or a write after the response that sleeps: the call comes back at the deadline."""
    store = SleepingStore()
    client = anchortrack.wrap(raw_client, store=store)
    tracker = anchortrack.tracker(client)
    tracker.store_timeout = 0.2
    history: list[Any] = [user("one")]
    _turn(client, server, history, 1)
    second = _turn(client, server, history, 2)

    store.sleepy = {operation}
    third = _turn(client, server, history, 3)

    assert store.asleep.is_set()
    assert not store.release.is_set()  # back while the store call still sleeps
    assert second.id == sent(wire)["previous_response_id"]  # from the tracker's own recent anchors
    if operation == "find":
        assert {"find": 1} == tracker.stats.snapshot()["store_errors"]
    else:
        assert 1 == len(tracker.backlog)  # the write that missed its deadline waits here

    store.sleepy = set()
    store.release.set()
    _turn(client, server, history, 4)
    _turn(client, server, history, 5)
    assert third.id == sent(wire, -2)["previous_response_id"]
    assert "previous_response_id" in sent(wire)
    assert 0 == len(tracker.backlog)


@pytest.mark.parametrize("operation", ["find", "put"])
async def test_a_sleeping_async_store_never_holds_the_call(
    server: ResponsesServer, raw_aclient: openai.AsyncOpenAI, wire: WireTap, operation: str
) -> None:
    """The async twin: the same deadline, the same backlog."""
    store = SleepingStore()
    aclient = anchortrack.wrap(raw_aclient, store=store)
    tracker = anchortrack.tracker(aclient)
    tracker.store_timeout = 0.2
    history: list[Any] = [user("one")]
    await _aturn(aclient, server, history, 1)
    await _aturn(aclient, server, history, 2)

    store.sleepy = {operation}
    third = await _aturn(aclient, server, history, 3)

    assert store.asleep.is_set()
    assert not store.release.is_set()
    store.sleepy = set()
    store.release.set()
    await _aturn(aclient, server, history, 4)
    await _aturn(aclient, server, history, 5)
    assert third.id == sent(wire, -2)["previous_response_id"]
    assert 0 == len(tracker.backlog)


# -- a real redis-server, frozen -------------------------------------------------------


@pytest.fixture(name="pausing_client")
def _pausing_client(server: ResponsesServer, wire: WireTap, healthy_redis: RedisServer) -> Iterator[Any]:
    """A raw sync client whose request hook freezes Redis when armed: after the lookup, before the write."""
    armed = threading.Event()

    def pause_when_armed(request: Any) -> None:
        if armed.is_set():
            armed.clear()
            healthy_redis.pause()

    sync_class, _ = http_client_classes()
    client = openai.OpenAI(
        base_url=server.base_url,
        api_key="test",
        max_retries=0,
        http_client=sync_class(event_hooks={"request": [wire.hook, pause_when_armed]}),
    )
    yield client, armed
    client.close()


@pytest.mark.parametrize("clients", ["from_url", "no_socket_timeouts"])
def test_redis_frozen_mid_call_never_holds_the_sync_caller(
    server: ResponsesServer,
    pausing_client: Any,
    healthy_redis: RedisServer,
    wire: WireTap,
    clients: str,
) -> None:
    """
    SIGSTOP between the lookup and the write after the response; then calls while it stays frozen.

    ``no_socket_timeouts`` is a ``redis.Redis`` that would wait forever: only
    the deadline thread brings the caller back.
    """
    raw, armed = pausing_client
    prefix = f"frozen{time.monotonic_ns()}"
    if clients == "from_url":
        store = RedisStore.from_url(healthy_redis.url, prefix=prefix)
    else:
        store = RedisStore(
            redis.Redis.from_url(healthy_redis.url),
            async_client=redis.asyncio.Redis.from_url(healthy_redis.url),
            prefix=prefix,
        )
    client = anchortrack.wrap(raw, store=store)
    tracker = anchortrack.tracker(client)
    tracker.store_timeout = 0.5
    tracker.store_cooldown = 0.1
    history: list[Any] = [user("one")]
    _turn(client, server, history, 1)
    second = _turn(client, server, history, 2)

    armed.set()
    try:
        with capture_logs() as logs:
            third = _turn(client, server, history, 3)  # chained; its write hangs
            fourth = _turn(client, server, history, 4)  # the lookup hangs: chains from the backlog
        assert not healthy_redis.ping()  # every call above came back while Redis was frozen
        assert second.id == sent(wire, -2)["previous_response_id"]
        assert third.id == sent(wire)["previous_response_id"]
        assert 2 == len(tracker.backlog)
        assert 1 == sum(e["event"] == "anchortrack.store_degraded" for e in logs)
    finally:
        healthy_redis.resume()

    time.sleep(0.2)  # the cooldown between probes
    with capture_logs() as logs:
        _turn(client, server, history, 5)
        _turn(client, server, history, 6)
    assert fourth.id == sent(wire, -2)["previous_response_id"]
    assert "previous_response_id" in sent(wire)
    assert "anchortrack.store_recovered" in [e["event"] for e in logs]
    assert 0 == len(tracker.backlog)
    scope = scope_of(client).key
    assert store.get(scope, third.id) is not None
    assert store.get(scope, fourth.id) is not None
    store.close()


async def test_redis_frozen_never_holds_the_async_caller(
    server: ResponsesServer, raw_aclient: openai.AsyncOpenAI, healthy_redis: RedisServer, wire: WireTap
) -> None:
    """The async twin: frozen between two turns; calls chain from the backlog, which then reaches Redis."""
    store = RedisStore.from_url(healthy_redis.url, prefix=f"afrozen{time.monotonic_ns()}")
    aclient = anchortrack.wrap(raw_aclient, store=store)
    tracker = anchortrack.tracker(aclient)
    tracker.store_timeout = 0.5
    tracker.store_cooldown = 0.1
    history: list[Any] = [user("one")]
    await _aturn(aclient, server, history, 1)
    await _aturn(aclient, server, history, 2)

    healthy_redis.pause()
    try:
        third = await _aturn(aclient, server, history, 3)  # the lookup hangs: stateless
        fourth = await _aturn(aclient, server, history, 4)  # chains from the backlog
        assert not healthy_redis.ping()
        assert third.id == sent(wire)["previous_response_id"]
    finally:
        healthy_redis.resume()

    await asyncio.sleep(0.2)
    await _aturn(aclient, server, history, 5)
    await _aturn(aclient, server, history, 6)
    assert fourth.id == sent(wire, -2)["previous_response_id"]
    assert 0 == len(tracker.backlog)
    assert await store.aget(scope_of(aclient).key, fourth.id) is not None
    await store.aclose()
