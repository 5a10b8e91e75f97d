"""
Fixtures for the third-party suite: vLLM's agentic-api gateway in front of a fake model.

agentic-api (``pip install 'anchortrack[thirdparty]'``) is a Rust binary in a
Python wheel.
It keeps responses in SQLite; with ``sqlite::memory:`` a restart forgets every
one of them, which is how these tests make anchors stale (it has no
``DELETE /v1/responses/{id}``).
In CI (``CI=true``) a missing binary fails the suite; elsewhere it is skipped.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import openai
import pytest

import anchortrack
from anchortrack import canonical_item
from anchortrack._wire import http_client_classes
from anchortrack.stores import MemoryStore

from ..conftest import Wire
from ._upstream import MODEL, FakeModel


__all__ = ["MODEL", "AgenticAPI", "Wire"]


def _agentic_binary() -> str | None:
    """The ``agentic-server`` binary the agentic-api wheel installs, if any."""
    try:
        from agentic_api.binary import find_packaged_binary  # type: ignore[import-not-found]

        return str(find_packaged_binary("agentic-server"))
    except Exception:  # not installed, or the wheel's layout changed: fall back to PATH
        return shutil.which("agentic-server")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class AgenticAPI:
    """One ``agentic-server`` process on a loopback port, in front of *upstream*."""

    def __init__(self, binary: str, upstream: FakeModel, home: Path) -> None:
        self.binary = binary
        self.upstream = upstream
        self.home = home
        self.port = _free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.log = home / "agentic-server.log"

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> None:
        env = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": str(self.home),
            "OPENAI_API_KEY": "test",
            "NO_COLOR": "1",
        }
        command = [
            self.binary,
            "--llm-api-base",
            self.upstream.base_url,
            "--gateway-host",
            "127.0.0.1",
            "--gateway-port",
            str(self.port),
            "--db-url",
            "sqlite::memory:",
            "--llm-ready-timeout-s",
            "20",
            "--llm-ready-interval-s",
            "0.1",
        ]
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"agentic-server exited: {self.log.read_text()[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"agentic-server did not listen: {self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
            self.process = None

    def restart(self) -> None:
        """Forget every stored response (its store is in memory)."""
        self.stop()
        self.start()


@pytest.fixture(scope="session", name="agentic_binary")
def _agentic_binary_fixture() -> str:
    binary = _agentic_binary()
    if binary is None:
        message = "agentic-api is not installed: pip install 'anchortrack[thirdparty]'"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{message} (CI must run the third-party suite)", pytrace=False)
        pytest.skip(message)
    return binary


@pytest.fixture(scope="module", name="upstream")
def _upstream() -> Iterator[FakeModel]:
    model = FakeModel().start()
    yield model
    model.stop()


@pytest.fixture(scope="module", name="gateway")
def _gateway(
    agentic_binary: str, upstream: FakeModel, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[AgenticAPI]:
    gateway = AgenticAPI(agentic_binary, upstream, tmp_path_factory.mktemp("agentic"))
    gateway.start()
    yield gateway
    gateway.stop()


@pytest.fixture(name="raw_client")
def _raw_client(gateway: AgenticAPI, wire: Wire) -> Iterator[openai.OpenAI]:
    sync, _ = http_client_classes()
    client = openai.OpenAI(
        base_url=gateway.base_url,
        api_key="test",
        max_retries=0,
        http_client=sync(event_hooks={"request": [wire.hook]}),
    )
    yield client
    client.close()


@pytest.fixture(name="raw_aclient")
async def _raw_aclient(gateway: AgenticAPI, wire: Wire) -> AsyncIterator[openai.AsyncOpenAI]:
    _, asyn = http_client_classes()
    client = openai.AsyncOpenAI(
        base_url=gateway.base_url,
        api_key="test",
        max_retries=0,
        http_client=asyn(event_hooks={"request": [wire.ahook]}),
    )
    yield client
    await client.close()


@pytest.fixture(name="client")
def _client(raw_client: openai.OpenAI) -> openai.OpenAI:
    return anchortrack.wrap(raw_client, store=MemoryStore())


@pytest.fixture(name="aclient")
def _aclient(raw_aclient: openai.AsyncOpenAI) -> openai.AsyncOpenAI:
    return anchortrack.wrap(raw_aclient, store=MemoryStore())


def canon(items: Sequence[Any]) -> list[dict[str, Any]]:
    """Canonical forms of the items a model received (ids and statuses aside)."""
    return [canonical_item(item) for item in items]


#: Request keys that are transport or the server's own defaults, not the model's task:
#: agentic-api adds ``parallel_tool_calls: false`` to what it stores, and forwards
#: ``store`` only for the requests it passes through unstored.
_NOT_TASK = ("input", "stream", "store", "parallel_tool_calls")


def model_view(body: dict[str, Any]) -> dict[str, Any]:
    """What the model was asked: the context in canonical form, and every parameter of the task."""
    items = body.get("input")
    items = [{"role": "user", "content": items}] if isinstance(items, str) else list(items or [])
    view = {k: v for k, v in body.items() if k not in _NOT_TASK}
    view["input"] = canon(items)
    if "tools" in view:  # agentic-api spells an unset field as null in what it stored
        view["tools"] = [{k: v for k, v in tool.items() if v is not None} for tool in view["tools"]]
    return view


def sent(wire: Wire, index: int = -1) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(wire.bodies[index])
    return body
