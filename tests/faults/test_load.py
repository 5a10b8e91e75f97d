"""
The bounded store-fault load test (`tests.faults.load`): Redis frozen, killed, restarted; stale anchors.

Over 100 concurrent async conversations plus a sync thread pool, once without
faults and once with them: no wrong context, no caller error, every call
returns, and after the last fault chaining is back to within 5 percentage
points of the fault-free run. ``python -m tests.faults.load`` prints the
figures (chained fraction per second, latency percentiles).
"""

from __future__ import annotations

import pytest

from .._redis import RedisServer
from .load import LAST_FAULT, run_load


@pytest.mark.slow
def test_store_faults_under_load_cost_no_call_and_chaining_comes_back(healthy_redis: RedisServer) -> None:
    baseline = run_load(healthy_redis, faults=False)
    faulty = run_load(healthy_redis, faults=True)
    healthy_redis.start()
    report = {"baseline": baseline.summary(), "faults": faulty.summary()}

    for run in (baseline, faulty):
        assert [] == run.errors, report
        assert 0 == run.mismatches, report
        assert 0 == run.unfinished, report
    assert len(faulty.events) == 6, report  # every fault happened
    async_stats, sync_stats = faulty.snapshots["async"], faulty.snapshots["sync"]
    assert async_stats["store_errors"], report
    assert sync_stats["store_errors"], report
    assert async_stats["resends"].get("stale_anchor", 0) + sync_stats["resends"].get("stale_anchor", 0) > 0
    assert async_stats["backlog"]["written"] + sync_stats["backlog"]["written"] > 0, report
    after, fault_free = faulty.chained_fraction(LAST_FAULT), baseline.chained_fraction(LAST_FAULT)
    assert after >= fault_free - 0.05, report
