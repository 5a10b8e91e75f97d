"""
The benchmarks' building blocks still run against today's code, at toy sizes.

A benchmark is run by hand, not by CI, so nothing else notices when a store's schema or a
record's layout moves under it; these tests do. They assert what each block promises (rows
loaded, a plan that chains, sizes in a sane range), never a timing.
"""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import openai
import pytest

from anchortrack.stores import MemoryStore, SQLiteStore


ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def benchmarks() -> Iterator[dict[str, ModuleType]]:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import bench_floor
        import bench_heavy
        import bench_overhead
        import bench_proof
        import bench_scale
        import bench_stores

        yield {
            "floor": bench_floor,
            "heavy": bench_heavy,
            "overhead": bench_overhead,
            "proof": bench_proof,
            "scale": bench_scale,
            "stores": bench_stores,
        }
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


def test_scale_loads_sqlite_through_the_store_schema_and_plans_against_it(
    benchmarks: dict[str, ModuleType], tmp_path: Path
) -> None:
    scale = benchmarks["scale"]
    store = SQLiteStore(tmp_path / "scale.db")
    scale.load_sqlite(store, 300)
    with sqlite3.connect(tmp_path / "scale.db") as conn:
        query = "SELECT count(*) FROM anchors WHERE scope = ?"
        (rows,) = conn.execute(query, (scale.OTHER_SCOPE,)).fetchone()
    assert rows == 300
    median, p99 = scale.plan_latencies(store, 40, plans=3)  # asserts that the plan chains
    assert 0 < median <= p99
    store.close()


def test_stores_memory_and_lazy_find_blocks_run(benchmarks: dict[str, ModuleType]) -> None:
    stores = benchmarks["stores"]
    plain = stores.memory_per_anchor(2_000)
    chained = stores.memory_per_anchor(2_000, parent=True)
    assert 50 < plain < 1_000
    assert 50 < chained < 1_000
    assert stores.find_in_a_loop(MemoryStore(), rounds=2, repeats=1) > 0


def test_overhead_plan_times_chain_at_every_size(benchmarks: dict[str, ModuleType]) -> None:
    times = benchmarks["overhead"].plan_times(100, repeats=2)  # plan_once asserts the warm plan chains
    assert set(times) == {"cold", "same", "copies", "dumps"}
    assert all(t > 0 for t in times.values())


def test_proof_is_timed_on_histories_it_proves_whole(benchmarks: dict[str, ModuleType]) -> None:
    from anchortrack.server import ResponsesServer

    with ResponsesServer() as server:
        m = benchmarks["proof"].measure(server.base_url, calls=6, rounds=1)  # asserts every proof is whole
    assert set(m) == {"cold_call", "warm_call", "cold_item", "warm_item", "hand_call"}
    assert all(value > 0 for value in m.values())


def test_floor_loop_chains_and_reports_every_ratio(benchmarks: dict[str, ModuleType]) -> None:
    from anchortrack.server import ResponsesServer

    with ResponsesServer() as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="bench", max_retries=0)
        assert benchmarks["floor"].floor_loop(client, 6) == 5  # every call after the first chains
        m = benchmarks["floor"].measure(server.base_url, calls=4, repeats=1)
    assert set(m) == {"floor", "wrapped", "machinery", "chained"}
    assert m["chained"] == 3 / 4
    assert all(m[key] > 0 for key in ("floor", "wrapped", "machinery"))


def test_heavy_loops_chain_and_send_what_a_hand_loop_sends(benchmarks: dict[str, ModuleType]) -> None:
    from anchortrack.server import ResponsesServer

    heavy = benchmarks["heavy"]
    with ResponsesServer() as server:
        for loop in heavy.LOOPS:  # measure asserts the chaining and the equal bytes
            m = heavy.measure(server.base_url, loop, 3, rounds=1, size=70_000)
            assert 0 < m["bytes_chained"] < m["bytes_stateless"]
            assert all(m[key] > 0 for key in ("cpu_hand", "cpu_wrapped", "cpu_unwrapped", "ratio"))
            assert heavy.report(loop, 3, m).startswith(f"| {loop} | 3 |")
        memory = heavy.memo_memory(server.base_url, 3)
    assert 2 * heavy.SHOT_BYTES < memory["counted"] < 4 * heavy.SHOT_BYTES  # two screenshots sent
    assert memory["after_drop"] < 2 * heavy.SHOT_BYTES  # the dropped ones let go


def test_scale_counts_one_redis_round_trip_per_plan_and_per_record(
    benchmarks: dict[str, ModuleType],
) -> None:
    """What the benchmark prints as round trips is what the client sent, not the scripts' inner calls."""
    import redis

    from anchortrack.stores import RedisStore
    from benchmarks._support import RedisServer

    scale = benchmarks["scale"]
    with RedisServer() as server:
        store, observer = RedisStore(redis.Redis.from_url(server.url)), redis.Redis.from_url(server.url)
        scale.load_redis(store, server.url, 50)
        per_plan, per_record, plans, _ = scale.redis_round_trips(store, observer)
        assert (1.0, 1.0) == (per_plan, per_record)
        assert sum(plans.values()) > scale.PLANS  # the server also counts what the find script runs
        store.close()
        observer.close()


def test_serve_load_runs_tool_conversations_through_a_real_serve(tmp_path: Path) -> None:
    """bench_serve's blocks at toy sizes: a `serve` process in front of its fake provider answers every
    request of concurrent tool-calling conversations, over kept-alive upstream connections."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import bench_serve
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))

    with bench_serve.FakeProvider(backlog=8) as provider:
        with bench_serve.serve(ROOT, tmp_path, "--upstream", provider.base_url) as server:
            load = bench_serve.run_load(server, provider, conversations=2, turns=4)
        with bench_serve.serve(ROOT, tmp_path) as server:
            depth = bench_serve.run_depth(server, 20)
    assert (load["requests"], load["errors"]) == (8, 0)
    assert 1 <= load["upstream_connections"] <= 2
    assert 8 == provider.requests
    assert depth["wall_ratio"] > 0
    assert depth["cpu_ms_at_20"] >= 0
