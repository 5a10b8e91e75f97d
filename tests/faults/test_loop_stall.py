"""
A slow caller is not a dead store: the caller's event loop blocks while a lookup is pending.

Redis is healthy and answers at once, but the application holds the loop for
1.2 s right after the lookup was sent, so every timer (the store client's
socket timeout, the tracker's deadline) fires late, together with the reply.
The lookup must not be blamed on the store: the turn still chains, and so do
the next ones, and no outage is declared.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

import openai
from structlog.testing import capture_logs

import anchortrack
from anchortrack.server import ResponsesServer, WireTap
from anchortrack.stores import Anchor, RedisStore

from .._redis import RedisServer
from ..helpers import assert_server_saw, sent, user


class SignallingStore(RedisStore):
    """A `RedisStore` that tells the test when a lookup is on its way."""

    lookup_sent: asyncio.Event | None = None

    async def afind(self, scope: str, views: Sequence[bytes]) -> dict[bytes, Anchor]:
        if self.lookup_sent is not None:
            self.lookup_sent.set()
        return await super().afind(scope, views)


async def _turn(aclient: openai.AsyncOpenAI, server: ResponsesServer, history: list[Any], n: int) -> Any:
    reply = await aclient.responses.create(model="scripted", input=history)
    assert_server_saw(server, reply.id, history)
    history.extend([*reply.output, user(f"turn {n}")])
    return reply


async def test_a_turn_beside_a_task_that_blocks_the_loop_still_chains(
    server: ResponsesServer, raw_aclient: openai.AsyncOpenAI, healthy_redis: RedisServer, wire: WireTap
) -> None:
    store = SignallingStore.from_url(healthy_redis.url, prefix=f"stall{time.monotonic_ns()}")
    aclient = anchortrack.wrap(raw_aclient, store=store)
    tracker = anchortrack.tracker(aclient)
    history: list[Any] = [user("one")]
    first = await _turn(aclient, server, history, 1)
    second = await _turn(aclient, server, history, 2)
    assert first.id == sent(wire)["previous_response_id"]

    store.lookup_sent = asyncio.Event()

    async def blocker() -> None:
        assert store.lookup_sent is not None
        await store.lookup_sent.wait()  # the lookup has just been written to the socket
        time.sleep(1.2)  # noqa: ASYNC251 - the application blocks its own event loop

    blocking = asyncio.ensure_future(blocker())
    with capture_logs() as logs:
        await _turn(aclient, server, history, 3)
        await blocking
        store.lookup_sent = None
        await _turn(aclient, server, history, 4)
        await _turn(aclient, server, history, 5)

    bodies = [sent(wire, i) for i in (-3, -2, -1)]
    assert second.id == bodies[0]["previous_response_id"]  # the turn beside the stall chained
    assert all("previous_response_id" in body for body in bodies)
    assert not [e for e in logs if e["event"] in ("anchortrack.store_degraded", "anchortrack.store_suspect")]
    snapshot = tracker.stats.snapshot()
    assert {} == snapshot["store_errors"]
    # Tried again, not blamed (unless, as the callbacks fell, the reply was read before the deadline's).
    assert sum(snapshot["store_stalls"].values()) <= 1
    assert 4 == tracker.stats.count("chained")
    await store.aclose()
