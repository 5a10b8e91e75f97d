"""
The fail-open guard alone: suspicion and probes, the deadline thread, the loop-stall detector, the backlog.

No network here; the store is a function.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from structlog.testing import capture_logs

from anchortrack._backlog import Backlog
from anchortrack._deadline import LoopWatch, StoreTimeout, StoreWorker
from anchortrack._flow import UNAVAILABLE
from anchortrack._guard import Breaker, Guard, State
from anchortrack._stats import Stats
from anchortrack.stores import Anchor


def broken() -> None:
    raise ConnectionError("down")


def _events(logs: list[dict[str, Any]]) -> list[str]:
    return [e["event"] for e in logs]


# -- suspicion, probes, outages ------------------------------------------------


def test_one_failure_is_only_a_suspicion_that_a_successful_probe_clears() -> None:
    """A single failure logs no warning and costs no cooldown: the next call probes and closes the breaker."""
    stats = Stats()
    guard = Guard(stats, cooldown=60.0)

    with capture_logs() as logs:
        assert UNAVAILABLE is guard.run("find", broken)
        assert State.SUSPECT is guard.breaker.state
        assert {} == guard.run("find", dict)

    assert State.CLOSED is guard.breaker.state
    assert ["anchortrack.store_suspect"] == _events(logs)
    assert {"find": 1} == stats.snapshot()["store_errors"]


def test_a_failed_probe_opens_the_breaker_then_one_probe_per_cooldown() -> None:
    """Suspect + failed probe = down (one warning); then one call every cooldown tries the store."""
    now = [0.0]
    guard = Guard(Stats(), cooldown=1.0, clock=lambda: now[0])
    calls = []

    def counted() -> None:
        calls.append(now[0])
        raise ConnectionError

    with capture_logs() as logs:
        guard.run("find", counted)  # suspect
        guard.run("find", counted)  # the probe fails: down
        for t in (0.5, 0.9, 1.0, 1.5, 2.0):
            now[0] = t
            guard.run("find", counted)
        now[0] = 3.5
        assert {} == guard.run("find", dict)

    assert [0.0, 0.0, 1.0, 2.0] == calls
    assert ["anchortrack.store_suspect", "anchortrack.store_degraded", "anchortrack.store_recovered"] == (
        _events(logs)
    )
    assert 3.5 == logs[-1]["outage_seconds"]


def test_only_one_probe_is_in_flight_and_a_cancelled_one_lets_the_next_go() -> None:
    """While the probe runs, other calls go without the store; a probe that never answered frees the slot."""
    breaker = Breaker(cooldown=0.0)
    first = breaker.enter("find")
    assert first is not None
    breaker.failed(first, "find", "TimeoutError")  # suspect

    probe = breaker.enter("find")
    assert probe is not None
    assert probe.probe
    assert breaker.enter("find") is None  # a second caller meanwhile
    assert breaker.enter("put") is None  # a write does not probe a read failure

    breaker.abandon(probe)  # e.g. the caller's task was cancelled
    again = breaker.enter("get")
    assert again is not None
    assert again.probe


def test_failures_of_calls_begun_before_the_suspicion_do_not_open_the_breaker() -> None:
    """Many calls failing together (one event) leave the store suspect; only a probe can confirm."""
    breaker = Breaker(cooldown=0.0)
    in_flight = [breaker.enter("find") for _ in range(5)]

    for attempt in in_flight:
        assert attempt is not None
        breaker.failed(attempt, "find", "TimeoutError")

    assert State.SUSPECT is breaker.state


def test_a_store_that_refuses_writes_is_probed_with_writes() -> None:
    """An outage that writes began is probed by writes only; reads go without the store meanwhile."""
    guard = Guard(Stats(), cooldown=0.0)
    reads = []
    guard.run("put", broken)
    guard.run("put", broken)
    assert State.OPEN is guard.breaker.state

    assert UNAVAILABLE is guard.run("find", lambda: reads.append(1))
    assert [] == reads
    guard.run("put", lambda: None)
    assert State.CLOSED is guard.breaker.state


# -- the deadline thread (sync stores) ---------------------------------------------


def test_a_sync_call_that_hangs_returns_at_its_deadline() -> None:
    """A sync store call that blocks is abandoned at the deadline; the worker thread carries on alone."""
    guard = Guard(Stats(), timeout=0.2)
    release = threading.Event()
    entered = threading.Event()

    def hang() -> bool:
        entered.set()
        return release.wait()

    assert UNAVAILABLE is guard.run("find", hang, inline=False)

    assert entered.is_set()
    assert not release.is_set()  # the caller came back while the store call still hung
    release.set()
    assert State.SUSPECT is guard.breaker.state
    assert {"a": 1} == guard.run("find", lambda: {"a": 1}, inline=False)


def test_the_worker_raises_the_stores_error_and_gives_up_at_the_deadline() -> None:
    """Errors come back as raised; a timeout is a StoreTimeout; threads exit when idle."""
    worker = StoreWorker(max_threads=2, idle_seconds=0.05)
    with pytest.raises(ConnectionError):
        worker.call(broken, 1.0)
    gate = threading.Event()
    with pytest.raises(StoreTimeout):
        worker.call(gate.wait, 0.05)
    assert 7 == worker.call(lambda: 7, 1.0)  # a second thread serves while the first is stuck
    gate.set()

    deadline = time.monotonic() + 5
    while worker.threads and time.monotonic() < deadline:
        time.sleep(0.02)
    assert 0 == worker.threads


def test_a_write_after_the_response_shares_one_deadline_budget() -> None:
    """A budget shorter than the timeout is the deadline."""
    guard = Guard(Stats(), timeout=3600.0)
    gate = threading.Event()

    assert UNAVAILABLE is guard.run("put", gate.wait, inline=False, budget=0.1)

    assert not gate.is_set()  # back long before the timeout, with the store call still hanging
    gate.set()


# -- event-loop stalls (async stores) ------------------------------------------------


async def test_the_loop_watch_measures_a_stall() -> None:
    """A blocked loop is measured within the span that asks, and not outside it."""
    watch = LoopWatch(asyncio.get_running_loop(), interval=0.01)
    start = watch.enter()
    await asyncio.sleep(0.03)
    assert watch.stalled_since(start) < 0.25

    time.sleep(0.3)  # noqa: ASYNC251 - the caller's own code holds the loop
    await asyncio.sleep(0.03)
    stalled = watch.stalled_since(start)
    later = watch.enter()
    watch.leave()
    watch.leave()

    assert stalled >= 0.25
    assert watch.stalled_since(later) < 0.25


async def test_an_async_call_that_timed_out_in_a_stalled_loop_is_tried_again() -> None:
    """The store answered in time but the loop was blocked: no failure, no suspicion, the answer is used."""
    stats = Stats()
    guard = Guard(stats, timeout=0.2)
    calls = []

    async def lookup() -> dict[str, int]:
        calls.append(1)
        if len(calls) == 1:
            await asyncio.sleep(0.01)
            raise TimeoutError  # as a client's own socket timeout does after a stall
        return {"found": 1}

    async def blocker() -> None:
        time.sleep(0.4)  # noqa: ASYNC251 - blocks the loop on purpose

    task = asyncio.ensure_future(blocker())
    with capture_logs() as logs:
        assert {"found": 1} == await guard.arun("find", lookup)
    await task

    assert State.CLOSED is guard.breaker.state
    assert 2 == len(calls)
    assert {} == stats.snapshot()["store_errors"]
    assert {"find": 1} == stats.snapshot()["store_stalls"]
    assert ["anchortrack.store_call_stalled"] == _events(logs)


async def test_an_async_store_that_is_late_on_a_free_loop_fails() -> None:
    """No stall, a late store: one timeout, failed open, suspect."""
    guard = Guard(Stats(), timeout=0.05)

    async def slow() -> None:
        await asyncio.sleep(1.0)

    assert UNAVAILABLE is await guard.arun("find", slow)
    assert State.SUSPECT is guard.breaker.state


# -- the backlog ------------------------------------------------------------------


def _anchor(label: str, now: float = 100.0, ttl: float = 50.0, parent: str | None = None) -> Anchor:
    return Anchor(label.encode().ljust(16, b"."), f"resp_{label}", 3, now, now + ttl, parent=parent)


def test_the_backlog_is_bounded_oldest_first_and_counts_what_it_drops() -> None:
    """Past the limit the oldest entries go; expired ones are not queued nor taken."""
    backlog = Backlog(limit=2)
    a, b, c = _anchor("a"), _anchor("b"), _anchor("c")

    assert (True, 0) == backlog.add("s", a, now=100.0)
    assert (True, 0) == backlog.add("s", b, now=100.0)
    assert (True, 1) == backlog.add("s", c, now=100.0)  # a is dropped
    assert (False, 0) == backlog.add("s", _anchor("old", now=0.0, ttl=1.0), now=100.0)

    assert {b.view: b} == backlog.find("s", [a.view, b.view], now=100.0)
    assert c == backlog.get("s", "resp_c", now=100.0)
    assert None is backlog.get("other", "resp_c", now=100.0)
    taken, expired = backlog.take(10, now=160.0)  # both expired by now
    assert ([], 2) == (taken, expired)
    assert 0 == len(backlog)


def test_the_backlog_evicts_descendants_and_replaces_by_view_and_id() -> None:
    """evict reaches what was chained from the response; a view or an id is held once."""
    backlog = Backlog()
    a = _anchor("a")
    b = _anchor("b", parent="resp_a")
    c = _anchor("c", parent="resp_b")
    other = _anchor("x")
    for anchor in (a, b, c, other):
        backlog.add("s", anchor, now=100.0)
    same_view = Anchor(other.view, "resp_y", 3, 100.0, 150.0)
    backlog.add("s", same_view, now=100.0)

    backlog.evict("s", "resp_a")

    assert [("s", same_view)] == backlog.take(10, now=100.0)[0]
