"""
End to end with shared stores: conversations continued by other processes,
and calls that keep working while the store is down.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from structlog.testing import capture_logs

import anchortrack
from anchortrack.server import ResponsesServer, WireTap
from anchortrack.stores import RedisStore, SQLiteStore

from .._redis import RedisServer
from ..helpers import assert_server_saw, scope_of, sent


ROOT = Path(__file__).resolve().parents[2]


class Worker:
    """A separate Python process running turns through its own wrapped client."""

    def __init__(self, store: str, base_url: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.e2e._worker", store, base_url],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def turn(self, history: list[Any]) -> dict[str, Any]:
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        self.process.stdin.write(json.dumps(history) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        assert line, "the worker process died"
        reply: dict[str, Any] = json.loads(line)
        return reply

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=20)
        finally:
            if self.process.poll() is None:
                self.process.kill()


@contextlib.contextmanager
def workers(n: int, store: str, base_url: str) -> Iterator[list[Worker]]:
    started = [Worker(store, base_url) for _ in range(n)]
    try:
        yield started
    finally:
        for worker in started:
            worker.close()


@pytest.fixture(name="redis_server")
def _redis_server() -> Iterator[RedisServer]:
    with RedisServer() as server:
        yield server


def test_three_processes_continue_one_conversation_through_sqlite(
    server: ResponsesServer, tmp_path: Path
) -> None:
    """Each process chains to the previous process's response, via one SQLite file."""
    store = f"sqlite:{tmp_path / 'anchors.db'}"
    history: list[Any] = [{"role": "user", "content": "started in process 1"}]
    previous = None
    with workers(3, store, server.base_url) as procs:
        for n, worker in enumerate(procs):
            reply = worker.turn(history)
            assert_server_saw(server, reply["id"], history)
            if previous is None:
                assert not reply["chained"]
            else:
                assert reply["chained"]
                assert previous == server.state.requests[-1]["previous_response_id"]
            previous = reply["id"]
            history = [
                *history,
                *reply["output"],
                {"role": "user", "content": f"continued by process {n + 2}"},
            ]


def test_two_redis_workers_alternate_turns_of_several_conversations(
    server: ResponsesServer, redis_server: RedisServer
) -> None:
    """Every turn after the first is chained, whichever worker serves it; contexts are exact."""
    conversations: dict[str, list[Any]] = {
        name: [{"role": "system", "content": "shared prompt"}, {"role": "user", "content": f"{name}: hello"}]
        for name in ("alpha", "beta", "gamma")
    }
    with workers(2, redis_server.url, server.base_url) as (one, two):
        for turn in range(4):
            for k, (name, history) in enumerate(conversations.items()):
                worker = (one, two)[(turn + k) % 2]
                reply = worker.turn(history)
                assert_server_saw(server, reply["id"], history)
                assert reply["chained"] == (turn > 0)
                conversations[name] = [
                    *history,
                    *reply["output"],
                    {"role": "user", "content": f"{name}: {turn}"},
                ]


def _turn(
    client: openai.OpenAI, history: list[Any], server: ResponsesServer | None = None
) -> tuple[list[Any], str]:
    """One turn; checks equivalence when given the server; returns the next history and the id."""
    resp = client.responses.create(model="scripted", input=history)
    if server is not None:
        assert_server_saw(server, resp.id, history)
    return [*history, *resp.output, {"role": "user", "content": f"after {resp.id}"}], resp.id


def test_redis_down_mid_conversation_keeps_chaining_then_writes_the_backlog(
    server: ResponsesServer, raw_client: openai.OpenAI, redis_server: RedisServer, wire: WireTap
) -> None:
    """
    I4: stopping Redis never fails a call; one warning per outage.

    The calls keep chaining from the tracker's own recent anchors; the
    responses recorded meanwhile wait in the backlog, and when Redis returns
    (empty), the backlog is written to it.
    """
    store = RedisStore.from_url(redis_server.url)
    client = anchortrack.wrap(raw_client, store=store)
    tracker = anchortrack.tracker(client)
    tracker.store_cooldown = 0.2
    history: list[Any] = [{"role": "user", "content": "one"}]
    history, first = _turn(client, history)
    history, _ = _turn(client, history)
    assert first == sent(wire)["previous_response_id"]

    redis_server.stop()
    ids = []
    with capture_logs() as logs:
        for _ in range(3):
            history, response_id = _turn(client, history, server)
            ids.append(response_id)
    assert [ids[0], ids[1]] == [sent(wire, -2)["previous_response_id"], sent(wire)["previous_response_id"]]
    assert "previous_response_id" in sent(wire, -3)
    degraded = [e for e in logs if e["event"] == "anchortrack.store_degraded"]
    assert 1 == len(degraded)
    assert "warning" == degraded[0]["log_level"]
    assert 0 == tracker.stats.count("stateless", "store_unavailable")
    assert 3 == len(tracker.backlog)

    redis_server.start()
    time.sleep(0.3)
    with capture_logs() as logs:
        history, resumed = _turn(client, history, server)
        history, _ = _turn(client, history, server)
    assert resumed == sent(wire)["previous_response_id"]
    assert ["anchortrack.store_recovered", "anchortrack.backlog_flushed"] == [
        e["event"] for e in logs if "store_" in e["event"] or "backlog_" in e["event"]
    ]
    assert 0 == len(tracker.backlog)
    assert {"queued": 3, "written": 3, "dropped": {"overflow": 0, "expired": 0}, "size": 0} == (
        tracker.stats.snapshot()["backlog"]
    )
    scope = scope_of(client).key
    assert all(store.get(scope, response_id) is not None for response_id in ids)
    store.close()


def test_locked_sqlite_costs_no_call_and_warns(
    server: ResponsesServer, raw_client: openai.OpenAI, tmp_path: Path, wire: WireTap
) -> None:
    """
    I4: a SQLite file write-locked by another process never costs a call.

    Reads still work (WAL), so the anchors whose writes failed are planned
    from the backlog; the failing writes are one outage with one warning, and
    the backlog is written once the lock is gone.
    """
    path = tmp_path / "anchors.db"
    store = SQLiteStore(path)
    store.find("probe", [b"x"])
    client = anchortrack.wrap(raw_client, store=store)
    anchortrack.tracker(client).store_cooldown = 0.0
    history: list[Any] = [{"role": "user", "content": "one"}]

    locker = sqlite3.connect(path, isolation_level=None)
    locker.execute("BEGIN EXCLUSIVE")
    try:
        with capture_logs() as logs:
            history, first = _turn(client, history, server)
            history, _ = _turn(client, history, server)
        assert first == sent(wire)["previous_response_id"]
        assert 1 == sum(e["event"] == "anchortrack.store_degraded" for e in logs)
        assert anchortrack.tracker(client).stats.snapshot()["store_errors"]["put"] >= 2
    finally:
        locker.execute("ROLLBACK")
        locker.close()

    history, after = _turn(client, history, server)
    history, _ = _turn(client, history, server)
    assert after == sent(wire)["previous_response_id"]
    assert 0 == len(anchortrack.tracker(client).backlog)
    assert store.get(scope_of(client).key, first) is not None
