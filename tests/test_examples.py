"""The examples run against the local server by default and show what they claim."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _run(name: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert 0 == done.returncode, done.stderr
    return done.stdout


def test_tool_loop_example_chains_the_tool_outputs() -> None:
    """examples/tool_loop.py runs a real tool loop and sends fewer items than the history holds."""
    out = _run("tool_loop.py")

    assert "2 tool call(s)" in out
    assert "answer: tool results:" in out
    sent, total = out.split("sent ")[1].split(" items")[0].split(" of ")
    assert int(sent) < int(total)


def test_middleware_example_shows_where_it_chains_and_falls_back() -> None:
    """examples/middleware.py chains after an injection and falls back after a redaction."""
    lines = _run("middleware.py").splitlines()

    assert lines[0].startswith("call 0 (plain turn): stateless (no_history)")
    assert lines[1].startswith("call 1 (append retrieved context): chained")
    assert lines[2].startswith("call 2 (redact an early message): stateless (prefix_diverged)")
    assert lines[3].startswith("call 3 (plain turn): chained")
