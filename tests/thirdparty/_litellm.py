"""
LiteLLM's proxy (``litellm[proxy]`` from PyPI, in a virtualenv of its own: its pinned dependencies are
not the project's) on loopback, without a database, with a master key.

The tests find its ``litellm`` executable in ``ANCHORTRACK_TEST_LITELLM``, else on ``PATH``.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

from .._redis import free_port


#: The environment variable naming the ``litellm`` executable.
LITELLM_ENV = "ANCHORTRACK_TEST_LITELLM"
MASTER_KEY = "sk-anchortrack-test"


def litellm_binary() -> tuple[str | None, bool]:
    """
    The ``litellm`` executable (``$ANCHORTRACK_TEST_LITELLM``, else the one on ``PATH``), and whether
    it was named: a named one that is not there is an error, not a reason to skip.
    """
    named = os.environ.get(LITELLM_ENV)
    if named:
        return (named if os.access(named, os.X_OK) else None), True
    return shutil.which("litellm"), False


def config(models: dict[str, str], *, plain_ids: bool) -> str:
    """A proxy config routing each model name to ``litellm_params`` *models* [name] (YAML lines)."""
    lines = ["model_list:"]
    for name, params in models.items():
        lines += [f"  - model_name: {name}", "    litellm_params:"]
        lines += [f"      {line}" for line in params.splitlines()]
    lines += ["general_settings:", f"  master_key: {MASTER_KEY}"]
    if plain_ids:
        lines.append("  disable_responses_id_security: true")
    return "\n".join(lines) + "\n"


class LiteLLM:
    """One ``litellm`` proxy process on a loopback port; `start` it, then `wait` until it listens."""

    def __init__(self, binary: str, config_text: str, home: Path) -> None:
        self.binary = binary
        self.home = home
        self.port = free_port()
        self.config = home / "config.yaml"
        self.config.write_text(config_text)
        self.log = home / "litellm.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> LiteLLM:
        env = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": str(self.home),
            "LITELLM_LOG": "ERROR",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # no fetch of the cost map
            "NO_COLOR": "1",
        }
        command = [self.binary, "--config", str(self.config), "--host", "127.0.0.1", "--port", str(self.port)]
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                command, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=self.home
            )
        return self

    def wait(self, timeout: float = 240) -> None:
        """Until the proxy listens (it imports for tens of seconds on a busy machine)."""
        assert self.process is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"litellm exited: {self.log.read_text()[-3000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"litellm did not listen: {self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
            self.process = None
