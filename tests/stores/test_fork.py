"""
A process forked while other threads use anchortrack: the child's first call
never waits for a lock that a thread of the parent held at the fork.

Prefork servers and ``multiprocessing`` with the fork start method do this.
Each test holds one lock on purpose when it forks (so that the case is not
left to chance) while other threads hammer a wrapped client sharing the store.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import openai
import pytest

import anchortrack
from anchortrack.server import ResponsesServer
from anchortrack.stores import MemoryStore, _open

from ..helpers import user


pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")

#: How long the parent waits for the child's call before it declares the child hung.
CHILD_WAIT = 30.0


def _raw(server: ResponsesServer) -> openai.OpenAI:
    """A plain client that opens a new connection per request (none is shared with a child)."""
    http = httpx.Client(limits=httpx.Limits(max_keepalive_connections=0))
    return openai.OpenAI(base_url=server.base_url, api_key="test", http_client=http, max_retries=0)


@pytest.fixture(name="hammered")
def _hammered(server: ResponsesServer) -> Iterator[tuple[openai.OpenAI, MemoryStore]]:
    """A wrapped client, and threads running conversations on another one that shares its store."""
    store = MemoryStore()
    client = anchortrack.wrap(_raw(server), store=store)
    other = anchortrack.wrap(_raw(server), store=store)
    stop = threading.Event()
    errors: list[BaseException] = []

    def hammer(n: int) -> None:
        try:
            while not stop.is_set():
                history: list[Any] = [user(f"thread {n}")]
                for turn in range(3):
                    reply = other.responses.create(model="scripted", input=history)
                    history += [*reply.output, user(f"turn {turn}")]
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=hammer, args=(n,), daemon=True) for n in range(3)]
    for t in threads:
        t.start()
    yield client, store
    stop.set()
    for t in threads:
        t.join(30)
    assert [] == errors


def _held(lock: Any) -> Callable[[], None]:
    """Hold *lock* on another thread until the returned function is called."""
    taken, done = threading.Event(), threading.Event()

    def hold() -> None:
        with lock:
            taken.set()
            done.wait(60)

    threading.Thread(target=hold, daemon=True).start()
    assert taken.wait(30)
    return done.set


def _fork_and_call(call: Callable[[], object]) -> int:
    """Fork; the child runs *call* and exits 0 if it returned; return the child's exit status."""
    pid = os.fork()
    if pid == 0:  # the child: never back into pytest
        code = 1
        try:
            call()
            code = 0
        finally:
            os._exit(code)
    deadline = time.monotonic() + CHILD_WAIT
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    pytest.fail(f"the forked child's first call did not complete within {CHILD_WAIT:.0f} s")


@pytest.mark.parametrize("lock", ["store", "recent views"])
def test_a_forked_child_calls_through_a_client_wrapped_before_the_fork(
    hammered: tuple[openai.OpenAI, MemoryStore], lock: str
) -> None:
    """The child continues a conversation the parent started; the lock a parent thread held is free."""
    client, store = hammered
    history: list[Any] = [user("one")]
    reply = client.responses.create(model="scripted", input=history)
    history += [*reply.output, user("two")]
    release = _held(store._lock if lock == "store" else anchortrack.tracker(client).recent._lock)
    try:
        status = _fork_and_call(lambda: client.responses.create(model="scripted", input=history))
    finally:
        release()

    assert 0 == status


def test_a_forked_child_wraps_a_client_with_the_default_store(
    server: ResponsesServer, hammered: tuple[openai.OpenAI, MemoryStore]
) -> None:
    """Wrapping without store= in the child takes the default store's lock: fresh there too."""
    release = _held(_open._default_lock)
    try:
        status = _fork_and_call(
            lambda: anchortrack.wrap(_raw(server)).responses.create(model="scripted", input=[user("hi")])
        )
    finally:
        release()

    assert 0 == status
