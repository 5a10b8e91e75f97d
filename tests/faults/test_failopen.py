"""
The fail-open mechanism alone: suspicion and probes, the deadline thread, the loop-stall retry, the backlog.

No network here; the store is a function.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
import warnings
from typing import Any

import pytest
from structlog.testing import capture_logs

from anchortrack._failopen import Backlog, FailOpen, StoreTimeout, _Workers
from anchortrack._flow import UNAVAILABLE
from anchortrack._stats import Stats
from anchortrack.stores import Anchor


class Inline:
    """A store that declares it never blocks: its calls run on the caller's thread."""

    never_blocks = True


class Blocking:
    """A store that may block: its sync calls run on a worker thread, with a deadline."""


def guard(stats: Stats | None = None, *, inline: bool = True, **options: Any) -> FailOpen:
    return FailOpen(Inline() if inline else Blocking(), stats or Stats(), **options)


def broken() -> None:
    raise ConnectionError("down")


def _events(logs: list[dict[str, Any]]) -> list[str]:
    return [e["event"] for e in logs]


# -- suspicion, probes, outages ------------------------------------------------


def test_one_failure_is_only_a_suspicion_that_a_successful_probe_clears() -> None:
    """A single failure logs no warning and costs no cooldown: the next call probes and clears it."""
    stats = Stats()
    store = guard(stats, cooldown=60.0)

    with capture_logs() as logs:
        assert UNAVAILABLE is store.call("find", broken)
        assert not store.healthy
        assert {} == store.call("find", dict)

    assert store.healthy
    assert ["anchortrack.store_suspect"] == _events(logs)
    assert {"find": 1} == stats.snapshot()["store_errors"]


def test_a_failed_probe_means_down_then_one_probe_per_cooldown() -> None:
    """Suspect + failed probe = down (one warning); then one call every cooldown tries the store."""
    now = [0.0]
    store = guard(cooldown=1.0, monotonic=lambda: now[0])
    calls = []

    def counted() -> None:
        calls.append(now[0])
        raise ConnectionError

    with capture_logs() as logs:
        store.call("find", counted)  # suspect
        store.call("find", counted)  # the probe fails: down
        for t in (0.5, 0.9, 1.0, 1.5, 2.0):
            now[0] = t
            store.call("find", counted)
        now[0] = 3.5
        assert {} == store.call("find", dict)

    assert [0.0, 0.0, 1.0, 2.0] == calls
    assert ["anchortrack.store_suspect", "anchortrack.store_degraded", "anchortrack.store_recovered"] == (
        _events(logs)
    )
    assert 3.5 == logs[-1]["outage_seconds"]


def test_only_one_probe_is_in_flight_and_a_cancelled_one_lets_the_next_go() -> None:
    """While the probe runs, other calls go without the store; a probe that never answered frees the slot."""
    store = guard(cooldown=0.0)
    store.call("find", broken)  # suspect
    seen: list[object] = []

    def probe() -> None:
        seen.append(store.call("find", lambda: "second caller"))
        seen.append(store.call("put", lambda: "a write"))  # a write does not probe a read failure
        raise KeyboardInterrupt  # e.g. the caller's task was cancelled

    with pytest.raises(KeyboardInterrupt):
        store.call("find", probe)

    assert [UNAVAILABLE, UNAVAILABLE] == seen
    assert {} == store.call("get", dict)  # the next call probes, and clears the suspicion
    assert store.healthy


def test_failures_of_calls_begun_before_the_suspicion_do_not_mean_down() -> None:
    """Many calls failing together (one event) leave the store suspect; only a probe can confirm."""
    store = guard(inline=False, cooldown=0.0)
    gate = threading.Barrier(5)

    def fails_together() -> None:
        gate.wait(5)
        raise ConnectionError

    with capture_logs() as logs:
        threads = [threading.Thread(target=store.call, args=("find", fails_together)) for _ in range(5)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    assert not store.healthy
    assert ["anchortrack.store_suspect"] == _events(logs)


def test_a_store_that_refuses_writes_is_probed_with_writes() -> None:
    """An outage that writes began is probed by writes only; reads go without the store meanwhile."""
    store = guard(cooldown=0.0)
    reads = []
    with capture_logs() as logs:
        store.call("put", broken)
        store.call("put", broken)
    assert "anchortrack.store_degraded" in _events(logs)

    assert UNAVAILABLE is store.call("find", lambda: reads.append(1))
    assert [] == reads
    store.call("put", lambda: None)
    assert store.healthy


# -- the deadline thread (sync stores) ---------------------------------------------


def test_a_sync_call_that_hangs_returns_at_its_deadline() -> None:
    """A sync store call that blocks is abandoned at the deadline; the worker thread carries on alone."""
    store = guard(inline=False, timeout=0.2)
    release = threading.Event()
    entered = threading.Event()

    def hang() -> bool:
        entered.set()
        return release.wait()

    assert UNAVAILABLE is store.call("find", hang)

    assert entered.is_set()
    assert not release.is_set()  # the caller came back while the store call still hung
    release.set()
    assert not store.healthy
    assert {"a": 1} == store.call("find", lambda: {"a": 1})


def test_the_worker_raises_the_stores_error_and_gives_up_at_the_deadline() -> None:
    """Errors come back as raised; a timeout is a StoreTimeout; threads exit when idle."""
    worker = _Workers(most=2, idle_seconds=0.05)
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
    store = guard(inline=False, timeout=3600.0)
    gate = threading.Event()

    assert UNAVAILABLE is store.call("put", gate.wait, budget=0.1)

    assert not gate.is_set()  # back long before the timeout, with the store call still hanging
    gate.set()


# -- event-loop stalls (async stores) ------------------------------------------------


async def test_an_async_call_that_timed_out_in_a_stalled_loop_is_tried_again() -> None:
    """The store answered in time but the loop was blocked: no failure, no suspicion, the answer is used."""
    stats = Stats()
    store = guard(stats, inline=False, timeout=0.2)
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
        assert {"found": 1} == await store.acall("find", lookup)
    await task

    assert store.healthy
    assert 2 == len(calls)
    assert {} == stats.snapshot()["store_errors"]
    assert {"find": 1} == stats.snapshot()["store_stalls"]
    assert ["anchortrack.store_call_stalled"] == _events(logs)
    assert logs[0]["stalled_seconds"] >= 0.25


async def test_an_async_store_that_is_late_on_a_free_loop_fails() -> None:
    """No stall, a late store: one timeout, failed open, suspect."""
    store = guard(inline=False, timeout=0.05)

    async def slow() -> None:
        await asyncio.sleep(1.0)

    assert UNAVAILABLE is await store.acall("find", slow)
    assert not store.healthy


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


def test_written_anchors_are_held_for_planning_but_do_not_wait() -> None:
    """Beside a store that may block, written anchors stay findable; only unwritten ones wait."""
    backlog = Backlog(limit=2, keep_written=True)
    a, b, c = _anchor("a"), _anchor("b"), _anchor("c")
    backlog.add("s", a, now=100.0, written=True)
    backlog.add("s", b, now=100.0)

    assert 1 == len(backlog)
    assert {a.view: a, b.view: b} == backlog.find("s", [a.view, b.view], now=100.0)
    assert ([("s", b)], 0) == backlog.take(10, now=100.0)
    assert 0 == len(backlog)
    assert b == backlog.get("s", "resp_b", now=100.0)  # taken to be written, still held
    backlog.add("s", b, now=100.0)  # its write failed: it waits again
    assert (True, 0) == backlog.add("s", c, now=100.0)  # a, written, makes room
    assert (True, 1) == backlog.add("s", _anchor("d"), now=100.0)  # b, unwritten, is lost


def test_a_batch_the_store_refused_goes_back_and_what_it_pushes_out_is_counted() -> None:
    """A flush's batch goes back to wait when the store fails; anchors it pushes out are counted as lost."""
    stats = Stats()
    store = guard(stats, clock=lambda: 100.0)
    store.backlog.limit = 2
    store.backlog.add("s", _anchor("a"), now=100.0)
    store.backlog.add("s", _anchor("b"), now=100.0)
    writes = store._writes()
    assert "resp_a" == next(writes).anchor.response_id  # the batch (a, b) left the backlog
    store.backlog.add("s", _anchor("c"), now=100.0)  # meanwhile, other writes failed and wait
    store.backlog.add("s", _anchor("d"), now=100.0)

    with pytest.raises(StopIteration):
        writes.send(UNAVAILABLE)

    assert ["resp_a", "resp_b"] == [anchor.response_id for _, anchor in store.backlog.take(9, now=100.0)[0]]
    snapshot = stats.snapshot()
    assert {"overflow": 2, "expired": 0} == snapshot["backlog"]["dropped"]
    assert {"store_unavailable": 2} == snapshot["not_recorded"]


def test_a_written_anchor_never_pushes_out_one_that_waits() -> None:
    """At the limit the oldest written anchor makes room, even for another written one; waiting ones stay."""
    backlog = Backlog(limit=2, keep_written=True)
    waiting, kept, newer = _anchor("w"), _anchor("k"), _anchor("n")
    backlog.add("s", waiting, now=100.0)
    backlog.add("s", kept, now=100.0, written=True)

    assert (True, 0) == backlog.add("s", newer, now=100.0, written=True)  # kept goes, not waiting
    assert 1 == len(backlog)
    assert {waiting.view: waiting, newer.view: newer} == backlog.find("s", [waiting.view, newer.view], 100.0)
    backlog.add("s", _anchor("v"), now=100.0)  # newer (written) makes room for a second waiting one
    assert (False, 0) == backlog.add("s", _anchor("x"), now=100.0, written=True)  # no room: not held
    assert 2 == len(backlog)
    assert ([("s", waiting)], 0) == backlog.take(1, now=100.0)
    assert (True, 0) == backlog.add("s", _anchor("y"), now=100.0)  # the taken one, written, makes room


# -- fork -------------------------------------------------------------------------


def test_a_forked_child_gets_fresh_locks_and_its_own_worker_threads() -> None:
    """Forked while parent threads hold its locks and run its worker: the child's calls still answer."""
    store = guard(inline=False, cooldown=0.0)
    assert 1 == store.call("find", lambda: 1)  # a worker thread now serves the parent
    store.call("find", broken)  # suspect: the next call takes the lock to probe
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with store._lock, store.backlog._lock:
            held.set()
            release.wait(10)

    threading.Thread(target=hold, daemon=True).start()
    assert held.wait(5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads (Python 3.12+)
        pid = os.fork()
    if pid == 0:  # the child: exit 0 only if every call answered
        ok = {"x": 1} == store.call("find", lambda: {"x": 1}) and store.healthy
        ok = ok and {} == store.backlog.find("s", [b"v"], 0.0)
        os._exit(0 if ok else 1)
    release.set()
    deadline = time.monotonic() + 20
    while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    if done[0] == 0:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    assert done[0] == pid, "the child hung"
    assert 0 == os.waitstatus_to_exitcode(done[1])
