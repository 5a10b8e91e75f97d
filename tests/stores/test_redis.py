"""
`RedisStore` beyond the contract, against a real redis-server: key schema,
TTLs, round trips, client kinds, no content at rest, and failing fast.
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest
import redis
import redis.asyncio

from anchortrack.stores import RedisStore
from tests._redis import RedisServer, free_port

from ..helpers import FakeClock
from .helpers import SCOPE, make_anchor, view


class CountingConnection(redis.Connection):
    """A connection that counts the requests it writes (one per round trip)."""

    sent = 0

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        CountingConnection.sent += 1
        super().send_packed_command(command, check_health)  # type: ignore[no-untyped-call]


@pytest.fixture
def prefix() -> str:
    """A key prefix of this test's own."""
    return f"t{uuid.uuid4().hex[:12]}"


@pytest.fixture
def raw(redis_server: RedisServer) -> Iterator[redis.Redis]:
    """A plain client, to look at what the store wrote."""
    client = redis.Redis.from_url(redis_server.url)
    yield client
    client.close()


@pytest.fixture
async def store(redis_server: RedisServer, prefix: str, clock: FakeClock) -> AsyncIterator[RedisStore]:
    """A store with both clients, from the URL."""
    s = RedisStore.from_url(redis_server.url, prefix=prefix, clock=clock)
    yield s
    await s.aclose()


def keys_of(raw: redis.Redis, prefix: str) -> dict[str, bytes]:
    """Every key under *prefix* with its value."""
    names: list[bytes] = raw.keys(f"{prefix}:*")  # type: ignore[assignment]
    found: dict[str, Any] = {}
    for name in sorted(names):
        if raw.type(name) == b"set":
            found[name.decode()] = set(raw.smembers(name))  # type: ignore[arg-type]
        else:
            found[name.decode()] = raw.get(name) or b""
    return found


def test_key_schema_and_values(store: RedisStore, raw: redis.Redis, prefix: str) -> None:
    """One view key and one reverse key per anchor, named and encoded as documented."""
    a = make_anchor(
        "a", store._clock(), response_id="resp_abc", count=4, properties=b"\x01" * 16, mac=b"\xab" * 16
    )
    store.put(SCOPE, a)

    assert {
        f"{prefix}:{{{SCOPE}}}:v:{a.view.hex()}": (
            f"2|4|{a.created_at!r}|{a.expires_at!r}|{'01' * 16}|{'ab' * 16}|resp_abc".encode()
        ),
        f"{prefix}:{{{SCOPE}}}:r:resp_abc": a.view.hex().encode(),
    } == keys_of(raw, prefix)


def test_key_schema_with_a_parent(store: RedisStore, raw: redis.Redis, prefix: str) -> None:
    """With a parent: a version-3 value (the parent's byte length, then both ids) and a children set."""
    a = make_anchor("a", store._clock(), response_id="resp_kid", count=4, parent="resp_pärent")
    store.put(SCOPE, a)

    assert {
        f"{prefix}:{{{SCOPE}}}:c:resp_pärent": {b"resp_kid"},
        f"{prefix}:{{{SCOPE}}}:v:{a.view.hex()}": (
            f"3|4|{a.created_at!r}|{a.expires_at!r}|||12|resp_pärentresp_kid".encode()
        ),
        f"{prefix}:{{{SCOPE}}}:r:resp_kid": a.view.hex().encode(),
    } == keys_of(raw, prefix)
    assert a == store.get(SCOPE, "resp_kid")


def test_children_sets_live_as_long_as_their_longest_lived_member(
    store: RedisStore, raw: redis.Redis, prefix: str
) -> None:
    """A parent's children set expires with the child that expires last, never before."""
    now = time.time()
    store.put(SCOPE, make_anchor("a", now, ttl=600, parent="resp_p"))
    store.put(SCOPE, make_anchor("b", now, ttl=60, parent="resp_p"))

    expire_ms = raw.execute_command("PEXPIRETIME", f"{prefix}:{{{SCOPE}}}:c:resp_p")  # type: ignore[no-untyped-call]
    assert 600 == round(expire_ms / 1000 - now)


def test_every_key_expires_at_the_anchor_expiry(store: RedisStore, raw: redis.Redis, prefix: str) -> None:
    """Both keys carry the anchor's absolute expiry (PXAT)."""
    now = time.time()
    store.put(SCOPE, make_anchor("a", now, ttl=600))
    store.put(SCOPE, make_anchor("b", now, ttl=60))

    for name in keys_of(raw, prefix):
        expire_ms = raw.execute_command("PEXPIRETIME", name)  # type: ignore[no-untyped-call]
        assert expire_ms > 0, name
        assert round(expire_ms / 1000 - now) in (60, 600)


def test_no_content_at_rest(store: RedisStore, raw: redis.Redis, prefix: str) -> None:
    """I5: keys and values hold digests, ids, counts and times, nothing else."""
    secret = "the user's secret message"
    for i in range(20):
        properties, mac = (view(f"p{i}"), view(f"m{i}")) if i % 2 else (b"", None)
        store.put(
            SCOPE, make_anchor(f"{secret} {i}", store._clock(), count=i, properties=properties, mac=mac)
        )

    stored = keys_of(raw, prefix)

    assert 40 == len(stored)
    number = r"[0-9.e+-]+"
    for name, value in stored.items():
        assert secret not in name
        assert b"secret" not in value
        if ":v:" in name:
            assert re.fullmatch(rf"{prefix}:\{{{SCOPE}\}}:v:[0-9a-f]{{32}}", name)
            assert re.fullmatch(
                rf"2\|\d+\|{number}\|{number}\|(?:[0-9a-f]{{32}})?\|(?:[0-9a-f]{{32}})?\|resp_[0-9a-f]{{25}}",
                value.decode(),
            )
        else:
            assert re.fullmatch(rf"{prefix}:\{{{SCOPE}\}}:r:resp_[0-9a-f]{{25}}", name)
            assert re.fullmatch(r"[0-9a-f]{32}", value.decode())


def test_keys_really_expire(redis_server: RedisServer, raw: redis.Redis, prefix: str) -> None:
    """Redis itself deletes the keys at expires_at; a past expiry writes nothing."""
    store = RedisStore.from_url(redis_server.url, prefix=prefix)
    now = time.time()
    soon = make_anchor("soon", now, ttl=1.0)
    store.put(SCOPE, soon)
    store.put(SCOPE, make_anchor("past", now - 10, ttl=1.0))

    assert 2 == len(keys_of(raw, prefix))
    assert soon == store.get(SCOPE, soon.response_id)

    deadline = time.monotonic() + 5
    while keys_of(raw, prefix) and time.monotonic() < deadline:
        time.sleep(0.05)

    assert {} == keys_of(raw, prefix)
    assert None is store.get(SCOPE, soon.response_id)
    store.close()


def test_one_round_trip_per_operation(redis_server: RedisServer, prefix: str) -> None:
    """find, put, get and evict are one EVALSHA each."""
    store = RedisStore.from_url(redis_server.url, prefix=prefix, connection_class=CountingConnection)
    now = time.time()
    store.put(SCOPE, make_anchor("warm", now))  # loads the scripts once
    store.find(SCOPE, [view("warm")])
    store.get(SCOPE, "x")
    store.evict(SCOPE, "x")
    counts = {}
    for name, call in [
        ("put", lambda: store.put(SCOPE, make_anchor("a", now))),
        ("find", lambda: store.find(SCOPE, [view(i) for i in range(1000)])),
        ("get", lambda: store.get(SCOPE, make_anchor("a", now).response_id)),
        ("evict", lambda: store.evict(SCOPE, make_anchor("a", now).response_id)),
        ("empty find", lambda: store.find(SCOPE, [])),
    ]:
        before = CountingConnection.sent
        call()  # type: ignore[no-untyped-call]
        counts[name] = CountingConnection.sent - before
    store.close()

    assert {"put": 1, "find": 1, "get": 1, "evict": 1, "empty find": 0} == counts


async def test_one_store_object_serves_sync_and_async(store: RedisStore, clock: FakeClock) -> None:
    """from_url gives both clients: what one side writes, the other reads."""
    a, b = make_anchor("a", clock.now), make_anchor("b", clock.now)
    store.put(SCOPE, a)
    await store.aput(SCOPE, b)

    assert {a.view: a, b.view: b} == await store.afind(SCOPE, [a.view, b.view])
    assert {a.view: a, b.view: b} == store.find(SCOPE, [a.view, b.view])


def test_from_url_store_works_across_event_loops(redis_server: RedisServer, prefix: str) -> None:
    """Each asyncio.run gets its own async client: no 'Event loop is closed'."""
    store = RedisStore.from_url(redis_server.url, prefix=prefix)
    a = make_anchor("a", time.time())
    store.put(SCOPE, a)

    for _ in range(3):
        assert {a.view: a} == asyncio.run(store.afind(SCOPE, [a.view]))
        assert a == asyncio.run(store.aget(SCOPE, a.response_id))

    async def close() -> None:
        await store.afind(SCOPE, [a.view])
        await store.aclose()

    asyncio.run(close())


async def test_wrong_client_kind_raises_type_error(redis_server: RedisServer) -> None:
    """Sync methods need a sync client, async ones an async client."""
    sync = redis.Redis.from_url(redis_server.url)
    asynchronous = redis.asyncio.Redis.from_url(redis_server.url)
    only_sync, only_async = RedisStore(sync), RedisStore(asynchronous)

    with pytest.raises(TypeError, match=r"RedisStore.afind\(\) needs a redis.asyncio.Redis"):
        await only_sync.afind(SCOPE, [view("a")])
    with pytest.raises(TypeError, match=r"RedisStore.put\(\) needs a sync redis.Redis"):
        only_async.put(SCOPE, make_anchor("a", time.time()))
    with pytest.raises(TypeError, match="async_client"):
        RedisStore(sync, async_client=sync)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="retry"):
        RedisStore.from_url(redis_server.url, retry=None)

    both = RedisStore(sync, async_client=asynchronous)
    a = make_anchor("a", time.time())
    both.put(SCOPE, a)
    assert a == await both.aget(SCOPE, a.response_id)
    await both.aevict(SCOPE, a.response_id)
    await both.aclose()  # not owned: leaves the clients open
    assert sync.ping()
    sync.close()
    await asynchronous.aclose()


def test_clients_that_decode_responses_work(redis_server: RedisServer, prefix: str) -> None:
    """Values are text, so a decode_responses=True client reads them too."""
    store = RedisStore(redis.Redis.from_url(redis_server.url, decode_responses=True), prefix=prefix)
    a = make_anchor("a", time.time(), response_id="resp_ünï")
    store.put(SCOPE, a)

    assert {a.view: a} == store.find(SCOPE, [a.view])
    assert a == store.get(SCOPE, a.response_id)

    store.evict(SCOPE, a.response_id)
    assert {} == store.find(SCOPE, [a.view])


def test_foreign_values_are_ignored(store: RedisStore, raw: redis.Redis, prefix: str) -> None:
    """Values of another format (a newer version, garbage) read as absent."""
    a = make_anchor("a", store._clock())
    store.put(SCOPE, a)
    foreigns = (
        "9|1|2.0|3.0|||resp_x",  # a newer version
        "1|1|2.0|3.0|resp_x",  # an older one
        "2|something|new",
        "3|1|2.0|3.0|||99|resp_x",  # a parent longer than the rest
        "3|1|2.0|3.0|||6|resp_x",  # a parent and no response id
    )
    for foreign in foreigns:
        raw.set(f"{prefix}:{{{SCOPE}}}:v:{a.view.hex()}", foreign)

        assert {} == store.find(SCOPE, [a.view])
        assert None is store.get(SCOPE, a.response_id)


# -- failing fast -------------------------------------------------------------


@pytest.fixture
def own_server() -> Iterator[RedisServer]:
    """A redis-server of this test's own, to stop and restart."""
    server = RedisServer().start()
    yield server
    server.close()


async def test_stopped_server_raises_promptly_then_recovers(own_server: RedisServer) -> None:
    """With Redis down, every operation raises at once; after a restart all works."""
    store = RedisStore.from_url(own_server.url)
    a = make_anchor("a", time.time())
    store.put(SCOPE, a)
    await store.aput(SCOPE, a)  # both clients now hold pooled connections

    own_server.stop()
    down = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)
    seconds: dict[str, float] = {}
    sync_calls: dict[str, Callable[[], object]] = {
        "find": lambda: store.find(SCOPE, [a.view]),
        "put": lambda: store.put(SCOPE, a),
        "get": lambda: store.get(SCOPE, a.response_id),
        "evict": lambda: store.evict(SCOPE, a.response_id),
    }
    for name, call in sync_calls.items():
        started = time.monotonic()
        with pytest.raises(down):
            call()
        seconds[name] = time.monotonic() - started
    async_calls: dict[str, Callable[[], Awaitable[object]]] = {
        "afind": lambda: store.afind(SCOPE, [a.view]),
        "aput": lambda: store.aput(SCOPE, a),
        "aget": lambda: store.aget(SCOPE, a.response_id),
        "aevict": lambda: store.aevict(SCOPE, a.response_id),
    }
    for name, acall in async_calls.items():
        started = time.monotonic()
        with pytest.raises(down):
            await acall()
        seconds[name] = time.monotonic() - started

    assert all(s < 0.6 for s in seconds.values()), seconds

    own_server.start()
    store.put(SCOPE, a)
    assert a == store.get(SCOPE, a.response_id)
    assert {a.view: a} == await store.afind(SCOPE, [a.view])
    await store.aclose()


async def test_unreachable_server_raises_promptly() -> None:
    """Nothing listening: connect fails at once, sync and async."""
    store = RedisStore.from_url(f"redis://127.0.0.1:{free_port()}/0")
    started = time.monotonic()

    with pytest.raises(redis.exceptions.ConnectionError):
        store.find(SCOPE, [view("a")])
    with pytest.raises(redis.exceptions.ConnectionError):
        await store.afind(SCOPE, [view("a")])

    assert time.monotonic() - started < 1.0
    await store.aclose()


def test_hung_server_times_out(own_server: RedisServer) -> None:
    """A server that accepts but does not answer trips the 0.25 s socket timeout."""
    store = RedisStore.from_url(own_server.url)
    store.find(SCOPE, [view("a")])
    pauser = redis.Redis.from_url(own_server.url)
    pauser.execute_command("CLIENT", "PAUSE", "600", "ALL")  # type: ignore[no-untyped-call]

    started = time.monotonic()
    with pytest.raises(redis.exceptions.TimeoutError):
        store.find(SCOPE, [view("a")])
    elapsed = time.monotonic() - started

    assert 0.2 <= elapsed < 0.6
    pauser.execute_command("CLIENT", "UNPAUSE")  # type: ignore[no-untyped-call]
    pauser.close()
    store.close()
