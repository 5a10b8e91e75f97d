"""
Redis with an ``allkeys-*`` eviction policy drops any key, so an anchor's
reverse key (``r:``) can go while its view key (``v:``) stays: such an
anchor must never be handed out, or evicting it by response id would miss it
and every worker would chain to it again until its expiry.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import openai
import pytest
import redis

import anchortrack
from anchortrack.server import ResponsesServer, WireTap
from anchortrack.stores import RedisStore
from tests._redis import RedisServer

from ..helpers import assert_server_saw, sent, user
from .helpers import SCOPE, make_anchor


@pytest.fixture
def evicting_redis() -> Iterator[RedisServer]:
    """A redis-server of this test's own, which evicts any key when it runs out of memory."""
    server = RedisServer().start()
    client = redis.Redis.from_url(server.url)
    client.config_set("maxmemory-policy", "allkeys-random")
    client.close()
    yield server
    server.close()


@pytest.fixture
def raw(evicting_redis: RedisServer) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(evicting_redis.url)
    yield client
    client.close()


def test_every_anchor_found_after_real_eviction_can_be_evicted(
    raw: redis.Redis, evicting_redis: RedisServer
) -> None:
    """Redis evicts at random under maxmemory; whatever find still returns, evict then forgets."""
    store = RedisStore.from_url(evicting_redis.url, prefix="p")
    now = time.time()
    anchors = [make_anchor(i, now) for i in range(2000)]
    for a in anchors:
        store.put(SCOPE, a)
    used = int(raw.info("memory")["used_memory"])
    raw.config_set("maxmemory", str(int(used * 0.85)))
    raw.set("filler", "x" * 1000)  # a write: Redis evicts until it is under maxmemory
    raw.config_set("maxmemory", "0")
    orphans = [
        a
        for a in anchors
        if raw.exists(f"p:{{{SCOPE}}}:v:{a.view.hex()}")
        and not raw.exists(f"p:{{{SCOPE}}}:r:{a.response_id}")
    ]
    assert orphans, "Redis evicted no reverse key whose view key it kept: nothing to test"

    found = store.find(SCOPE, [a.view for a in anchors])
    for anchor in found.values():
        store.evict(SCOPE, anchor.response_id)

    assert {} == store.find(SCOPE, [a.view for a in anchors])
    assert found  # anchors with both keys kept are still found
    store.close()


def test_find_restores_an_evicted_reverse_key_so_that_evict_reaches_the_anchor(
    raw: redis.Redis, evicting_redis: RedisServer
) -> None:
    """The anchor is still found (the server may still hold it); its r: key is back, so evict forgets it."""
    store = RedisStore.from_url(evicting_redis.url, prefix="p")
    now = time.time()
    kept, orphan = make_anchor("kept", now), make_anchor("orphan", now, parent="resp_root")
    store.put(SCOPE, kept)
    store.put(SCOPE, orphan)
    reverse = f"p:{{{SCOPE}}}:r:{orphan.response_id}"
    raw.delete(reverse)  # as allkeys eviction would

    assert {kept.view: kept, orphan.view: orphan} == store.find(SCOPE, [kept.view, orphan.view])
    assert orphan == store.get(SCOPE, orphan.response_id)
    expires = [
        int(raw.execute_command("PEXPIRETIME", k)) for k in (reverse, f"p:{{{SCOPE}}}:v:{orphan.view.hex()}")
    ]
    assert 0 < expires[1]
    assert abs(expires[0] - expires[1]) <= 1  # the view key's own expiry

    store.evict(SCOPE, orphan.response_id)

    assert {kept.view: kept} == store.find(SCOPE, [kept.view, orphan.view])
    store.close()


def _raw(server: ResponsesServer, wire: WireTap) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=server.base_url, api_key="test", http_client=wire.http_client(), max_retries=0
    )


def test_the_next_worker_does_not_chain_to_a_dead_anchor_redis_half_evicted(
    server: ResponsesServer, evicting_redis: RedisServer, raw: redis.Redis
) -> None:
    """
    The server forgot a response and Redis evicted its r: key: it is refused once, then forgotten.

    Before, each worker continuing that conversation chained to it, was
    refused, resent, and evicted nothing: the v: key stayed to the TTL.
    """
    prefix = f"w{uuid.uuid4().hex[:8]}"
    wire = WireTap()
    workers = [
        anchortrack.wrap(_raw(server, wire), store=RedisStore.from_url(evicting_redis.url, prefix=prefix))
        for _ in range(3)
    ]
    history: list[Any] = [user("one")]
    first = workers[0].responses.create(model="scripted", input=history)
    history += [*first.output, user("two")]
    second = workers[0].responses.create(model="scripted", input=history)
    history += [*second.output, user("three")]
    assert first.id == sent(wire)["previous_response_id"]

    server.state.drop(second.id)  # the server forgot it ...
    for key in raw.scan_iter(f"{prefix}:*:r:{second.id}"):  # ... and Redis evicted its reverse key
        raw.delete(key)

    for worker in workers[1:]:
        reply = worker.responses.create(model="scripted", input=history)
        assert_server_saw(server, reply.id, history)

    refused = [body for body in map(json.loads, wire.bodies) if body.get("previous_response_id") == second.id]
    assert 1 == len(refused)  # the second worker's try; the third chained from the anchor before
    assert first.id == sent(wire)["previous_response_id"]


def test_find_restores_an_evicted_children_set_so_that_evict_reaches_the_descendants(
    raw: redis.Redis, evicting_redis: RedisServer
) -> None:
    """
    Redis evicted a parent's c: set and kept its children's keys: find puts each child found back in
    it (until the child's own expiry), so evicting the parent forgets the child and the grandchild.
    """
    store = RedisStore.from_url(evicting_redis.url, prefix="p")
    now = time.time()
    root = make_anchor("root", now)
    child = make_anchor("child", now, ttl=7200.0, parent=root.response_id)
    grandchild = make_anchor("grandchild", now, parent=child.response_id)
    for anchor in (root, child, grandchild):
        store.put(SCOPE, anchor)
    children = f"p:{{{SCOPE}}}:c:{root.response_id}"
    raw.delete(children)  # as allkeys eviction would
    views = [root.view, child.view, grandchild.view]

    assert {a.view: a for a in (root, child, grandchild)} == store.find(SCOPE, views)
    assert {child.response_id.encode()} == raw.smembers(children)
    view_expiry = int(raw.execute_command("PEXPIRETIME", f"p:{{{SCOPE}}}:v:{child.view.hex()}"))
    assert abs(int(raw.execute_command("PEXPIRETIME", children)) - view_expiry) <= 1

    store.evict(SCOPE, root.response_id)

    assert {} == store.find(SCOPE, views)
    store.close()


def test_a_dead_anchors_descendants_are_forgotten_with_it_after_redis_evicted_its_children_set(
    server: ResponsesServer, evicting_redis: RedisServer, raw: redis.Redis
) -> None:
    """
    Redis evicted a response's c: set, and a worker then continued a conversation chained from it
    (its find puts the child back in the set). The server forgets the response: the one refusal, on
    another branch, forgets its descendants too, so the first conversation is not refused again.
    """
    prefix = f"w{uuid.uuid4().hex[:8]}"
    wire = WireTap()
    workers = [
        anchortrack.wrap(_raw(server, wire), store=RedisStore.from_url(evicting_redis.url, prefix=prefix))
        for _ in range(3)
    ]
    history: list[Any] = [user("one")]
    first = workers[0].responses.create(model="scripted", input=history)
    branch = [*history, *first.output, user("two")]
    second = workers[0].responses.create(model="scripted", input=branch)
    for key in raw.scan_iter(f"{prefix}:*:c:{first.id}"):  # Redis evicted the first one's children set
        raw.delete(key)
    branch += [*second.output, user("three")]
    third = workers[1].responses.create(model="scripted", input=branch)
    branch += [*third.output, user("four")]
    assert second.id == sent(wire)["previous_response_id"]

    server.state.drop(first.id)  # the server forgot the first response, and with it what chains from it
    workers[2].responses.create(model="scripted", input=[*history, *first.output, user("other")])
    assert first.id == json.loads(wire.bodies[-2])["previous_response_id"]  # refused, resent in full

    before = len(wire.bodies)
    reply = workers[2].responses.create(model="scripted", input=branch)

    assert_server_saw(server, reply.id, branch)
    assert 1 == len(wire.bodies) - before  # not chained to a forgotten descendant, refused and resent
    assert "previous_response_id" not in sent(wire)
