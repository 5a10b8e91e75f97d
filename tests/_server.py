"""
The local Responses server in a subprocess, for tests and benchmarks (its CPU and memory are not theirs).

Depends on the standard library, anchortrack and the tests' own port helper only.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator

from ._redis import free_port


@contextlib.contextmanager
def server_process() -> Iterator[str]:
    """Yield the base URL of a local server running in its own process."""
    port = free_port()
    code = (
        "import sys, time; from anchortrack.server import ResponsesServer\n"
        "with ResponsesServer(port=int(sys.argv[1])):\n"
        "    time.sleep(3600)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"{base}/responses/resp_none", timeout=1)
            except urllib.error.HTTPError:
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("the local server did not start") from None
                time.sleep(0.05)
        yield base
    finally:
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(10)
