"""
Helpers for the third-party suite: vLLM's agentic-api gateway in front of a fake model.

agentic-api (``pip install -e . --group thirdparty``) is a Rust binary in a
Python wheel.
It keeps responses in SQLite; with ``sqlite::memory:`` a restart forgets every
one of them, which is how these tests make anchors stale (it has no
``DELETE /v1/responses/{id}``).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

from .._redis import free_port
from ..helpers import canon
from ._upstream import MODEL, FakeModel


__all__ = ["MODEL", "AgenticAPI", "agentic_binary", "model_view"]


def agentic_binary() -> str | None:
    """The ``agentic-server`` binary the agentic-api wheel installs, if any."""
    try:
        from agentic_api.binary import find_packaged_binary  # type: ignore[import-not-found]

        return str(find_packaged_binary("agentic-server"))
    except Exception:  # not installed, or the wheel's layout changed: fall back to PATH
        return shutil.which("agentic-server")


class AgenticAPI:
    """One ``agentic-server`` process on a loopback port, in front of *upstream*."""

    def __init__(self, binary: str, upstream: FakeModel, home: Path) -> None:
        self.binary = binary
        self.upstream = upstream
        self.home = home
        self.port = free_port()
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
