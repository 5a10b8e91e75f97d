"""
The anchor stores side by side: round trips, latency and memory.

For each backend (MemoryStore, SQLiteStore on a temporary file, RedisStore on
a redis-server this script starts on a free loopback port):

1. Round trips per plan (``find``) and per record (``put``). For Redis they
   are counted two ways: requests written on the socket (a counting
   connection class) and the server's own ``INFO commandstats`` deltas.
   For SQLite the column shows SQL statements instead (trace callback).
2. Latency of one ``find`` of 100 views (5 recorded) plus one ``put``,
   averaged over 2,000 operations on a store holding 2,000 anchors, sync and
   async, and as a ratio to MemoryStore.
3. MemoryStore's memory per anchor: ``tracemalloc`` over 100,000 anchors
   with 16-byte views and 30-character response ids; plain, with a 16-byte
   properties digest, with that and a 16-byte MAC (a secret key), and plain
   but each chained from the one before (a parent, as in a tool loop).
4. MemoryStore's ``find`` as the planner uses it when it looks up every
   prefix: 400 prefix views, 200 of them recorded (one anchor per earlier
   response, each chained from the one before), then reads longest first
   until the first usable anchor.

Needs ``redis-server`` on PATH and the ``redis`` extra. Takes about 60 s.

    python benchmarks/bench_stores.py
"""

from __future__ import annotations

import asyncio
import gc
import hashlib
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis


ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from anchortrack._failopen import FailOpen, Put  # noqa: E402
from anchortrack._flow import Find  # noqa: E402
from anchortrack._stats import Stats  # noqa: E402
from anchortrack.stores import Anchor, AnchorStore, MemoryStore, RedisStore, SQLiteStore  # noqa: E402
from benchmarks._support import RedisServer  # noqa: E402


SCOPE = "0123456789abcdef"
OPS = 2_000
VIEWS_PER_FIND = 100
HITS_PER_FIND = 5
PRELOAD = 2_000
MEMORY_ANCHORS = 100_000
FIND_VIEWS = 400
FIND_HELD = 200


def digest(label: str) -> bytes:
    return hashlib.blake2b(label.encode(), digest_size=16).digest()


def anchor(label: str, now: float) -> Anchor:
    v = digest(label)
    return Anchor(v, f"resp_{v.hex()[:25]}", 7, now, now + 3600)


class CountingConnection(redis.Connection):
    """Counts requests written to the socket: one per round trip."""

    sent = 0

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        CountingConnection.sent += 1
        super().send_packed_command(command, check_health)  # type: ignore[no-untyped-call]


def workload(now: float) -> tuple[list[Anchor], list[list[bytes]], list[Anchor]]:
    """Preloaded anchors, the view lists to find, the anchors to put."""
    preload = [anchor(f"pre-{i}", now) for i in range(PRELOAD)]
    finds = []
    for op in range(OPS):
        hits = [preload[(op * 7 + k) % PRELOAD].view for k in range(HITS_PER_FIND)]
        misses = [digest(f"miss-{op}-{k}") for k in range(VIEWS_PER_FIND - HITS_PER_FIND)]
        finds.append(misses[:50] + hits + misses[50:])
    puts = [anchor(f"new-{op}", now) for op in range(OPS)]
    return preload, finds, puts


def time_sync(store: AnchorStore, finds: list[list[bytes]], puts: list[Anchor]) -> float:
    """Mean seconds of one find plus one put."""
    started = time.perf_counter()
    for views, a in zip(finds, puts, strict=True):
        found = store.find(SCOPE, views)
        assert len(found) == HITS_PER_FIND
        store.put(SCOPE, a)
    return (time.perf_counter() - started) / len(puts)


async def time_async(store: AnchorStore, finds: list[list[bytes]], puts: list[Anchor]) -> float:
    """Mean seconds of one find plus one put as an async client makes them (a store's native async twins,
    else its sync methods inline or in a worker thread); closes the store in the same loop."""
    failopen = FailOpen(store, Stats(), timeout=30.0)
    started = time.perf_counter()
    for views, a in zip(finds, puts, strict=True):
        found = await failopen.aperform(Find(SCOPE, views))
        assert len(found) == HITS_PER_FIND
        await failopen.aperform(Put(SCOPE, a, time.monotonic() + 30.0))
    elapsed = (time.perf_counter() - started) / len(puts)
    await store.aclose()  # type: ignore[attr-defined]
    return elapsed


def commandstats(client: redis.Redis) -> dict[str, int]:
    return {name: int(stats["calls"]) for name, stats in client.info("commandstats").items()}


def count_per_op(op: Callable[[int], object], counter: Callable[[], int], n: int = 200) -> float:
    before = counter()
    for i in range(n):
        op(i)
    return (counter() - before) / n


def redis_round_trips(url: str, now: float) -> tuple[float, float, dict[str, int]]:
    """Socket requests per find and per put, plus the server's command deltas."""
    store = RedisStore.from_url(url, prefix="rt", connection_class=CountingConnection)
    store.put(SCOPE, anchor("warm", now))  # loads the Lua scripts once
    views = [digest(f"rt-{k}") for k in range(VIEWS_PER_FIND)]
    observer = redis.Redis.from_url(url)
    stats_before = commandstats(observer)
    per_find = count_per_op(lambda i: store.find(SCOPE, views), lambda: CountingConnection.sent)
    per_put = count_per_op(
        lambda i: store.put(SCOPE, anchor(f"rt-{i}", now)), lambda: CountingConnection.sent
    )
    stats_after = commandstats(observer)
    delta = {
        name.removeprefix("cmdstat_"): stats_after[name] - stats_before.get(name, 0)
        for name in stats_after
        if stats_after[name] != stats_before.get(name, 0) and name != "cmdstat_info"
    }
    observer.close()
    store.close()
    return per_find, per_put, delta


def sqlite_statements(path: Path, now: float) -> tuple[float, float]:
    """SQL statements per find and per put (the sweep runs every 1,000 puts)."""
    store = SQLiteStore(path)
    store.put(SCOPE, anchor("warm", now))
    statements: list[str] = []
    conn = store._conn
    assert conn is not None
    conn.set_trace_callback(statements.append)
    views = [digest(f"rt-{k}") for k in range(VIEWS_PER_FIND)]
    per_find = count_per_op(lambda i: store.find(SCOPE, views), lambda: len(statements))
    per_put = count_per_op(lambda i: store.put(SCOPE, anchor(f"rt-{i}", now)), lambda: len(statements))
    store.close()
    return per_find, per_put


def memory_per_anchor(
    n: int = MEMORY_ANCHORS, properties: bytes = b"", mac: bytes | None = None, *, parent: bool = False
) -> float:
    """Bytes per anchor; with *parent*, each anchor is chained from the one recorded before it."""
    now = time.time()
    inputs = [(digest(f"m-{i}"), f"resp_{i:025d}") for i in range(n)]
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    store = MemoryStore(n)
    previous = None
    for v, rid in inputs:  # fresh view objects, as the tracker's digests are
        store.put(
            SCOPE,
            Anchor(v[:8] + v[8:], rid, 7, now, now + 3600, properties=properties, mac=mac, parent=previous),
        )
        previous = rid if parent else None
    gc.collect()
    used = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert len(store) == n
    return used / n


def find_in_a_loop(store: MemoryStore, rounds: int = 200, repeats: int = 7) -> float:
    """Best mean seconds of one find of FIND_VIEWS prefix views plus the planner's reads."""
    now = time.time()
    hashes = [digest(f"prefix-{i}") for i in range(1, FIND_VIEWS + 2)]  # h(1) .. h(n), n = FIND_VIEWS + 1
    candidates = list(reversed(hashes[:-1]))  # what the planner asks for, longest first
    previous = None
    for k in range(FIND_HELD):  # a response every second item, each chained from the one before
        rid = f"resp_{k:048x}"
        count = (k + 1) * FIND_VIEWS // FIND_HELD
        store.put(SCOPE, Anchor(hashes[count - 1], rid, count, now, now + 3600, parent=previous))
        previous = rid

    def plan() -> Anchor:
        found = store.find(SCOPE, candidates)
        for i in range(len(hashes) - 1, 0, -1):  # as `anchortrack._plan.choose` reads it
            anchor = found.get(hashes[i - 1])
            if anchor is not None and anchor.count == i:
                return anchor
        raise AssertionError("no anchor found")

    assert plan().count == FIND_VIEWS
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        for _ in range(rounds):
            plan()
        best = min(best, (time.perf_counter() - started) / rounds)
    return best


def main() -> None:
    started = time.perf_counter()
    now = time.time()
    preload, finds, puts = workload(now)
    with RedisServer() as server, tempfile.TemporaryDirectory() as tmp:
        factories: dict[str, Callable[[str], AnchorStore]] = {
            "memory": lambda name: MemoryStore(),
            "sqlite": lambda name: SQLiteStore(Path(tmp) / f"{name}.db"),
            "redis": lambda name: RedisStore.from_url(server.url, prefix=name),
        }
        results: dict[str, tuple[float, float]] = {}
        for backend, make in factories.items():
            sync_store, async_store = make(f"{backend}-sync"), make(f"{backend}-async")
            for a in preload:
                sync_store.put(SCOPE, a)
                async_store.put(SCOPE, a)
            sync_s = time_sync(sync_store, finds, puts)
            async_s = asyncio.run(time_async(async_store, finds, puts))
            sync_store.close()  # type: ignore[attr-defined]
            results[backend] = (sync_s, async_s)

        rt_find, rt_put, delta = redis_round_trips(server.url, now)
        sql_find, sql_put = sqlite_statements(Path(tmp) / "statements.db", now)
    per_anchor = memory_per_anchor()
    with_properties = memory_per_anchor(properties=digest("properties"))
    with_mac = memory_per_anchor(properties=digest("properties"), mac=digest("mac"))
    with_parent = memory_per_anchor(parent=True)
    find_s = min(find_in_a_loop(MemoryStore()) for _ in range(3))

    base_sync, base_async = results["memory"]
    print(
        f"find of {VIEWS_PER_FIND} views ({HITS_PER_FIND} recorded) + put, "
        f"{OPS:,} operations, {PRELOAD:,} anchors preloaded\n"
    )
    print(f"{'backend':<8} {'sync µs':>9} {'ratio':>7} {'async µs':>9} {'ratio':>7}   per find / per put")
    for backend, (sync_s, async_s) in results.items():
        if backend == "redis":
            trips = f"{rt_find:.2f} / {rt_put:.2f} round trips"
        elif backend == "sqlite":
            trips = f"{sql_find:.2f} / {sql_put:.2f} SQL statements (local file)"
        else:
            trips = "in-process"
        print(
            f"{backend:<8} {sync_s * 1e6:>9.1f} {sync_s / base_sync:>6.1f}x"
            f" {async_s * 1e6:>9.1f} {async_s / base_async:>6.1f}x   {trips}"
        )
    print(f"\nredis-server command deltas for 200 finds + 200 puts: {delta}")
    print(
        f"MemoryStore: {per_anchor:.0f} bytes per anchor (tracemalloc, {MEMORY_ANCHORS:,} anchors);"
        f" {with_properties:.0f} with a properties digest, {with_mac:.0f} with one and a MAC,"
        f" {with_parent:.0f} chained from the one before"
    )
    print(
        f"MemoryStore.find of {FIND_VIEWS} views ({FIND_HELD} recorded) plus the planner's reads:"
        f" {find_s * 1e6:.1f} µs"
    )
    print(f"\ntotal {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
