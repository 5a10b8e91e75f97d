"""
The cost of scale: Redis and SQLite holding 1,000,000 anchors.

1. Bytes per anchor: Redis ``MEMORY USAGE`` of an anchor's two keys (its view
   key and its response id key, over a sample of 1,000) and the server's
   ``used_memory`` growth over the load; SQLite's file size (after a WAL
   checkpoint) divided by the anchors it holds.
2. Plan latency at that size: one request planned against the store (the
   history fingerprinted with a warm memo, its prefixes looked up in one
   ``find``, the anchor chosen) for histories of 100 and 1,000 items;
   median and p99 of 200 plans.
3. Redis round trips per plan and per record: the commands (or pipelines)
   the client sends over 200 plans and 200 records, beside the server's own
   ``INFO commandstats`` deltas (which count a script's inner calls too).
4. SQLite under 4 worker processes that plan (100-item histories) and record
   at once for a bounded time: throughput, p99, and every error a caller
   would see (``database is locked`` must not be one).

The anchors are loaded through each store's own write path, pipelined for
Redis (the store's Lua script) and batched for SQLite (its upsert), so the
data is exactly what ``put`` writes. Loopback only; starts its own
``redis-server``. Needs the ``redis`` extra. About 3 minutes on 2 cores.

    python benchmarks/bench_scale.py            # 1,000,000 anchors
    python benchmarks/bench_scale.py 100000     # a quicker run
"""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis


ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_overhead import plan_once, typical_items  # noqa: E402

import anchortrack  # noqa: E402
from anchortrack import Scope  # noqa: E402
from anchortrack.stores import Anchor, AnchorStore, RedisStore, SQLiteStore  # noqa: E402
from benchmarks._support import RedisServer  # noqa: E402


ANCHORS = 1_000_000
BATCH = 2_000
PLANS = 200
WORKERS = 4
WORKER_SECONDS = 10.0
SCOPE = Scope("http://bench/v1")
OTHER_SCOPE = "0123456789abcdef"  # the filler anchors' scope: a busy store's other sessions


def filler(i: int, now: float) -> Anchor:
    """The *i*-th filler anchor: a 16-byte view, an OpenAI-sized response id."""
    v = hashlib.blake2b(i.to_bytes(8, "little"), digest_size=16).digest()
    return Anchor(v, "resp_" + hashlib.blake2b(v, digest_size=24).hexdigest(), 7, now, now + 3600)


def load_redis(store: RedisStore, url: str, n: int) -> None:
    """Write *n* filler anchors with the store's own put script, pipelined (no read timeout)."""
    from anchortrack.stores.redis import PUT

    now = time.time()
    loader = redis.Redis.from_url(url)
    put = loader.register_script(PUT)
    for start in range(0, n, BATCH):
        pipe = loader.pipeline(transaction=False)
        for i in range(start, min(n, start + BATCH)):
            keys, args = store._put_call(OTHER_SCOPE, filler(i, now))
            put(keys, args, client=pipe)
        pipe.execute()
    loader.close()


def load_sqlite(store: SQLiteStore, n: int) -> None:
    """Insert *n* filler anchors with the store's own upsert, in large transactions."""
    from anchortrack.stores.sqlite import _UPSERT, _row

    store.find(OTHER_SCOPE, [b"x" * 16])  # creates the schema
    now = time.time()
    conn = sqlite3.connect(store.path)
    for start in range(0, n, BATCH * 10):
        rows = [_row(OTHER_SCOPE, filler(i, now)) for i in range(start, min(n, start + BATCH * 10))]
        with conn:
            conn.executemany(_UPSERT, rows)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


def plan_latencies(store: AnchorStore, items: int, plans: int = PLANS) -> tuple[float, float]:
    """Median and p99 (ms) of planning a chaining request of *items* items against *store*."""
    history = typical_items(items)
    anchortrack.record_response(
        history[: items - 2],
        type(
            "R", (), {"id": "resp_scale", "status": "completed", "output": history[items - 2 : items - 1]}
        )(),
        scope=SCOPE,
        store=store,
    )
    tracker = anchortrack.Tracker(store)
    assert plan_once(tracker, store, SCOPE, history)  # warms the memo, as in a loop
    times = []
    for _ in range(plans):
        t = time.perf_counter()
        plan_once(tracker, store, SCOPE, history)
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3, quantile(times, 0.99) * 1e3


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def commandstats(client: redis.Redis) -> dict[str, int]:
    return {name: int(stats["calls"]) for name, stats in client.info("commandstats").items()}


class RoundTrips:
    """Counts the commands (or pipelines) the client sends: each one waits for its answer once."""

    def __init__(self) -> None:
        self.sent = 0
        self._send = redis.connection.AbstractConnection.send_packed_command

    def __enter__(self) -> RoundTrips:
        send = self._send

        def counting(connection: Any, command: Any, check_health: bool = True) -> None:
            self.sent += 1
            send(connection, command, check_health)  # type: ignore[no-untyped-call]

        redis.connection.AbstractConnection.send_packed_command = counting  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        redis.connection.AbstractConnection.send_packed_command = self._send  # type: ignore[method-assign]


def redis_round_trips(
    store: RedisStore, observer: redis.Redis
) -> tuple[float, float, dict[str, int], dict[str, int]]:
    """
    Round trips per plan and per record (what the client sent, over PLANS of each), and the
    server's command counts for them (a script's own GET/SET calls are counted there too,
    but run inside the server).
    """
    history = typical_items(100)
    tracker = anchortrack.Tracker(store)
    plan_once(tracker, store, SCOPE, history)
    store.put(OTHER_SCOPE, filler(-1 % 2**63, time.time()))  # the put script is loaded

    def delta(before: dict[str, int]) -> dict[str, int]:
        after = commandstats(observer)
        out = {
            k.removeprefix("cmdstat_"): v - before.get(k, 0)
            for k, v in after.items()
            if v != before.get(k, 0)
        }
        out.pop("info", None)
        return out

    before = commandstats(observer)
    with RoundTrips() as planned:
        for _ in range(PLANS):
            plan_once(tracker, store, SCOPE, history)
    plans = delta(before)
    now = time.time()
    before = commandstats(observer)
    with RoundTrips() as recorded:
        for i in range(PLANS):
            store.put(OTHER_SCOPE, filler(ANCHORS * 10 + i, now))
    records = delta(before)
    return planned.sent / PLANS, recorded.sent / PLANS, plans, records


def worker(path: str, index: int, seconds: float, out: Any) -> None:
    """Plan and record against one SQLite file until *seconds* pass; send latencies and errors."""
    store = SQLiteStore(path)
    scope = Scope("http://bench/v1", namespace=f"worker-{index}")
    history = typical_items(100)
    tracker = anchortrack.Tracker(store)
    latencies: list[float] = []
    errors: list[str] = []
    now, i = time.time(), 0
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        t = time.perf_counter()
        try:
            plan_once(tracker, store, scope, history)
            store.put(scope.key, filler(ANCHORS * 100 + index * 10_000_000 + i, now))
        except Exception as error:
            errors.append(f"{type(error).__name__}: {error}")
        latencies.append(time.perf_counter() - t)
        i += 1
    store.close()
    out.put((latencies, errors))


def sqlite_workers(path: str) -> tuple[float, float, float, list[str]]:
    """Throughput (plan+record per second), median and p99 (ms), and the errors of WORKERS processes."""
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(path, i, WORKER_SECONDS, out)) for i in range(WORKERS)]
    for p in procs:
        p.start()
    results = [out.get(timeout=WORKER_SECONDS + 120) for _ in procs]
    for p in procs:
        p.join(timeout=30)
    latencies = [t for lat, _ in results for t in lat]
    errors = [e for _, errs in results for e in errs]
    return (
        len(latencies) / WORKER_SECONDS,
        statistics.median(latencies) * 1e3,
        quantile(latencies, 0.99) * 1e3,
        errors,
    )


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else ANCHORS
    started = time.perf_counter()
    print(f"{n:,} anchors (16-byte views, 53-character resp_ ids); plans are medians of {PLANS}\n")
    with RedisServer() as server, tempfile.TemporaryDirectory() as tmp:
        observer = redis.Redis.from_url(server.url)
        base = int(observer.info("memory")["used_memory"])
        rstore = RedisStore.from_url(server.url, prefix="scale")
        t = time.perf_counter()
        load_redis(rstore, server.url, n)
        load_s = time.perf_counter() - t
        used = (int(observer.info("memory")["used_memory"]) - base) / n
        now = time.time()
        sample = [filler(i, now) for i in range(0, n, max(1, n // 1000))]
        usage = statistics.mean(
            int(observer.memory_usage(k) or 0)
            for a in sample
            for k in (
                rstore.key_schema.view_keys(OTHER_SCOPE, [a.view])[0],
                rstore.key_schema.response_key(OTHER_SCOPE, a.response_id),
            )
        )
        print(f"redis   loaded in {load_s:.0f} s; {observer.dbsize():,} keys")
        print(f"redis   MEMORY USAGE per anchor (view key + response id key): {2 * usage:.0f} bytes")
        print(f"redis   used_memory growth per anchor:                         {used:.0f} bytes")
        for items in (100, 1000):
            med, p99 = plan_latencies(rstore, items)
            print(f"redis   plan of {items:>5} items: median {med:.3f} ms, p99 {p99:.3f} ms")
        per_plan, per_record, plans, records = redis_round_trips(rstore, observer)
        print(
            f"redis   round trips per plan: {per_plan:.2f}; per record: {per_record:.2f}"
            f" (server commands, scripts' own included: plans {plans}, records {records})"
        )
        rstore.close()
        observer.close()

        path = str(Path(tmp) / "scale.db")
        sstore = SQLiteStore(path)
        t = time.perf_counter()
        load_sqlite(sstore, n)
        load_s = time.perf_counter() - t
        size = os.path.getsize(path)
        print(
            f"\nsqlite  loaded in {load_s:.0f} s; file {size / 1e6:.0f} MB: {size / n:.0f} bytes per anchor"
        )
        for items in (100, 1000):
            med, p99 = plan_latencies(sstore, items)
            print(f"sqlite  plan of {items:>5} items: median {med:.3f} ms, p99 {p99:.3f} ms")
        sstore.close()
        rate, med, p99, errors = sqlite_workers(path)
        locked = sum("locked" in e for e in errors)
        print(
            f"sqlite  {WORKERS} processes planning (100 items) + recording for {WORKER_SECONDS:.0f} s:"
            f" {rate:.0f} plan+record/s, median {med:.2f} ms, p99 {p99:.2f} ms,"
            f" {len(errors)} errors ({locked} 'database is locked')"
        )
        for e in sorted(set(errors))[:5]:
            print(f"        {e}")
    print(f"\ntotal {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
