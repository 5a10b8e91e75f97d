"""
The store-fault load run: many conversations on one Redis store while Redis is frozen, killed and restarted.

One run drives, for *duration* seconds, *n_async* concurrent conversations
through one wrapped ``AsyncOpenAI`` client and *n_sync* conversations through
one wrapped ``OpenAI`` client shared by a thread pool, against the local
server on loopback, with anchors in a real ``redis-server``. With faults on,
on a fixed timeline: Redis is frozen (SIGSTOP) then resumed, the server
forgets the latest response of a tenth of the conversations (stale anchors),
Redis is killed and restarted empty, and stale anchors are injected again.
The same run without faults is the baseline.

Every call's context is checked against the full history afterwards
(equivalence), every caller error is counted, and the figures — chained
fraction per second, latency percentiles — come back in a `LoadResult`.

Run both and print the figures::

    python -m tests.faults.load
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import statistics
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import openai
import structlog

import anchortrack
from anchortrack.server import ResponsesServer
from anchortrack.stores import RedisStore

from .._redis import RedisServer
from ..helpers import canon, user


#: (seconds from the start, what happens) on the faulty run.
TIMELINE: tuple[tuple[float, str], ...] = (
    (3.0, "pause"),
    (4.5, "resume"),
    (5.0, "stale"),
    (6.0, "kill"),
    (6.5, "stale"),
    (7.5, "restart"),
)
#: Calls started at or after this are "after the last fault".
LAST_FAULT = max(t for t, _ in TIMELINE)
STALE_SHARE = 0.1


@dataclass
class Call:
    """One caller's call, as the caller saw it."""

    kind: str  # "async" or "sync"
    started: float  # seconds from the run's start
    latency: float
    chained: bool  # the server resolved it through previous_response_id
    response_id: str
    history: list[Any]


@dataclass
class LoadResult:
    """What one run measured."""

    faults: bool
    duration: float
    calls: list[Call] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    mismatches: int = 0
    unfinished: int = 0
    events: list[tuple[float, str]] = field(default_factory=list)
    snapshots: dict[str, Any] = field(default_factory=dict)

    def chained_fraction(
        self, since: float = 0.0, until: float | None = None, kind: str | None = None
    ) -> float:
        chosen = [
            c
            for c in self.calls
            if c.started >= since and (until is None or c.started < until) and kind in (None, c.kind)
        ]
        return sum(c.chained for c in chosen) / len(chosen) if chosen else float("nan")

    def per_second(self) -> list[tuple[int, int, float]]:
        """(second, calls started in it, chained fraction) for every second of the run."""
        rows = []
        for second in range(int(self.duration)):
            chosen = [c for c in self.calls if second <= c.started < second + 1]
            fraction = sum(c.chained for c in chosen) / len(chosen) if chosen else float("nan")
            rows.append((second, len(chosen), fraction))
        return rows

    def latency(self, quantile: float, since: float = 0.0) -> float:
        values = sorted(c.latency for c in self.calls if c.started >= since)
        if not values:
            return float("nan")
        return values[min(len(values) - 1, int(quantile * len(values)))]

    def summary(self) -> dict[str, Any]:
        return {
            "faults": self.faults,
            "calls": len(self.calls),
            "caller_errors": len(self.errors),
            "equivalence_mismatches": self.mismatches,
            "unfinished_callers": self.unfinished,
            "chained_fraction": round(self.chained_fraction(), 4),
            "chained_fraction_after_last_fault": round(self.chained_fraction(LAST_FAULT), 4),
            "p50_seconds": round(self.latency(0.5), 4),
            "p99_seconds": round(self.latency(0.99), 4),
            "p50_after_last_fault": round(self.latency(0.5, LAST_FAULT), 4),
            "p99_after_last_fault": round(self.latency(0.99, LAST_FAULT), 4),
            "mean_seconds": round(statistics.fmean(c.latency for c in self.calls), 4) if self.calls else None,
            "per_second": [(s, n, round(f, 3)) for s, n, f in self.per_second()],
            "trackers": self.snapshots,
        }


def run_load(
    redis_server: RedisServer,
    *,
    faults: bool,
    n_async: int = 100,
    n_sync: int = 12,
    duration: float = 15.0,
    seed: int = 7,
) -> LoadResult:
    """One run (see the module); *redis_server* must be running, and is left running."""
    result = LoadResult(faults=faults, duration=duration)
    rng = random.Random(seed)
    prefix = f"load{uuid.uuid4().hex[:8]}"
    latest: dict[str, str] = {}  # conversation -> its latest response id
    lock = threading.Lock()
    with ResponsesServer(store="memory") as server:
        sync_store = RedisStore.from_url(redis_server.url, prefix=prefix)
        async_store = RedisStore.from_url(redis_server.url, prefix=prefix)
        # The SDK's default retries (of connection errors: an idle keep-alive
        # connection the server closes as it is reused) are left on, as in production.
        raw = openai.OpenAI(base_url=server.base_url, api_key="test", timeout=60)
        client = anchortrack.wrap(raw, store=sync_store)
        start = time.monotonic()
        end = start + duration

        def note(call: Call, name: str) -> None:
            with lock:
                result.calls.append(call)
                latest[name] = call.response_id

        def sync_conversation(name: str, think: float) -> None:
            history: list[Any] = [user(f"{name}: hello")]
            turn = 0
            time.sleep(think * rng.random())
            while time.monotonic() < end:
                began = time.monotonic()
                try:
                    reply = client.responses.create(model="scripted", input=history)
                except Exception as error:
                    with lock:
                        result.errors.append(f"{name}: {type(error).__name__}: {error} {error.__cause__!r}")
                    return
                note(
                    Call("sync", began - start, time.monotonic() - began,
                         reply.previous_response_id is not None, reply.id, list(history)),
                    name,
                )  # fmt: skip
                turn += 1
                history = [*history, *reply.output, user(f"{name}: turn {turn}")]
                time.sleep(think)

        async def async_main() -> None:
            araw = openai.AsyncOpenAI(base_url=server.base_url, api_key="test", timeout=60)
            aclient = anchortrack.wrap(araw, store=async_store)

            async def conversation(name: str, think: float) -> None:
                history: list[Any] = [user(f"{name}: hello")]
                turn = 0
                await asyncio.sleep(think * rng.random())
                while time.monotonic() < end:
                    began = time.monotonic()
                    try:
                        reply = await aclient.responses.create(model="scripted", input=history)
                    except Exception as error:
                        result.errors.append(f"{name}: {type(error).__name__}: {error} {error.__cause__!r}")
                        return
                    note(
                        Call("async", began - start, time.monotonic() - began,
                             reply.previous_response_id is not None, reply.id, list(history)),
                        name,
                    )  # fmt: skip
                    turn += 1
                    history = [*history, *reply.output, user(f"{name}: turn {turn}")]
                    await asyncio.sleep(think)

            tasks = [
                asyncio.ensure_future(conversation(f"a{i}", rng.uniform(0.2, 0.6))) for i in range(n_async)
            ]
            _, pending = await asyncio.wait(tasks, timeout=duration + 60) if tasks else (set(), set())
            result.unfinished += len(pending)
            for task in pending:
                task.cancel()
            result.snapshots["async"] = anchortrack.tracker(aclient).stats.snapshot()
            await async_store.aclose()
            await araw.close()

        def fault(action: str) -> None:
            if action == "pause":
                redis_server.pause()
            elif action == "resume":
                redis_server.resume()
            elif action == "kill":
                redis_server.stop()
            elif action == "restart":
                redis_server.start()
            elif action == "stale":
                with lock:
                    names = sorted(latest)
                for name in rng.sample(names, max(1, int(STALE_SHARE * len(names)))):
                    with contextlib.suppress(KeyError):  # not stored yet: nothing to forget
                        server.state.drop(latest[name])

        def controller() -> None:
            for at, action in TIMELINE if faults else ():
                time.sleep(max(0.0, start + at - time.monotonic()))
                fault(action)
                result.events.append((round(time.monotonic() - start, 3), action))

        control = threading.Thread(target=controller, daemon=True)
        control.start()
        with ThreadPoolExecutor(max_workers=max(1, n_sync)) as pool:
            futures = [pool.submit(sync_conversation, f"s{i}", rng.uniform(0.2, 0.6)) for i in range(n_sync)]
            asyncio.run(async_main())
            for future in futures:
                try:
                    future.result(timeout=60)
                except Exception:
                    result.unfinished += 1
        control.join(timeout=30)
        result.snapshots["sync"] = anchortrack.tracker(client).stats.snapshot()
        sync_store.close()
        raw.close()
        result.mismatches = sum(
            canon(c.history) != canon(server.state.resolved_context(c.response_id)) for c in result.calls
        )
    return result


def _report(faulty: LoadResult, baseline: LoadResult) -> str:
    lines = ["second  calls(base)  chained(base)  calls(faults)  chained(faults)"]
    for (s, n0, f0), (_, n1, f1) in zip(baseline.per_second(), faulty.per_second(), strict=True):
        lines.append(f"{s:>6}  {n0:>11}  {f0:>13.3f}  {n1:>13}  {f1:>15.3f}")
    for name, run in (("baseline", baseline), ("faults", faulty)):
        summary = run.summary()
        summary.pop("per_second")
        summary.pop("trackers")
        lines.append(f"{name}: {json.dumps(summary)}")
    lines.append(f"fault timeline: {faulty.events}")
    lines.extend(f"caller error: {error}" for error in [*baseline.errors, *faulty.errors][:10])
    return "\n".join(lines)


def main() -> int:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))
    server = RedisServer().start()
    try:
        baseline = run_load(server, faults=False)
        faulty = run_load(server, faults=True)
    finally:
        server.close()
    print(_report(faulty, baseline))
    return 0


if __name__ == "__main__":
    sys.exit(main())
