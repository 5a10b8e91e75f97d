"""
What the benchmarks and the tests both start: a real ``redis-server`` and the local Responses server,
each in its own process on a loopback port.

    server = RedisServer().start()      # a free port unless one is given
    store = RedisStore.from_url(server.url)
    server.stop()                       # the store now fails fast
    server.start()                      # same port, empty data
    server.pause(); server.resume()     # SIGSTOP / SIGCONT: a hung server
    server.stop()

    with server_process() as base_url:  # the local server's CPU and memory are not the caller's
        client = OpenAI(base_url=base_url, api_key="x")

``RedisServer`` needs ``redis-server`` on PATH (Debian: ``apt-get install redis-server``);
``server_process`` the ``server`` extra. Depends on the standard library only (the local server
is imported by the child process). The tests import these through ``tests/_redis.py`` and
``tests/_server.py``.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """
    One ``redis-server`` process without persistence, bound to 127.0.0.1.

    Args:
        port: The port to listen on; a free one if not given. It stays the
            same across `stop` and `start`, so clients reconnect to it.
        executable: The server binary.
        startup_timeout: Seconds to wait for the server to answer PING.
    """

    def __init__(
        self,
        port: int | None = None,
        *,
        executable: str = "redis-server",
        startup_timeout: float = 10.0,
    ) -> None:
        self.port = port if port is not None else free_port()
        self.executable = executable
        self.startup_timeout = startup_timeout
        self._process: subprocess.Popen[bytes] | None = None
        self._dir: Path | None = None  # the server's working directory while it runs

    @property
    def url(self) -> str:
        """The ``redis://`` URL of the server (database 0)."""
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def running(self) -> bool:
        """Whether the server process is alive."""
        return self._process is not None and self._process.poll() is None

    def start(self) -> RedisServer:
        """
        Start the server and wait until it answers PING.

        Raises:
            RuntimeError: ``redis-server`` is not on PATH, or did not start.
        """
        if self.running:
            return self
        self.stop()  # tidy up after a server that exited by itself
        binary = shutil.which(self.executable)
        if binary is None:
            raise RuntimeError(
                f"{self.executable!r} is not on PATH: the Redis tests need a real server"
                " (Debian/Ubuntu: apt-get install -y redis-server)"
            )
        self._dir = Path(tempfile.mkdtemp(prefix="anchortrack-redis-"))
        log = self._dir / "redis.log"
        args = [
            binary,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "no",
            "--dir", str(self._dir),
            "--logfile", str(log),
            "--daemonize", "no",
        ]  # fmt: skip
        self._process = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                break
            if self.ping():
                return self
            time.sleep(0.02)
        tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
        self.stop()
        raise RuntimeError(f"redis-server did not start on port {self.port}:\n{tail}")

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL), wait for it, delete its directory."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGCONT)  # a paused server would not see SIGTERM
            process.terminate()
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)
        directory, self._dir = self._dir, None
        if directory is not None:
            shutil.rmtree(directory, ignore_errors=True)

    def restart(self) -> RedisServer:
        """Stop the server and start it again on the same port (empty)."""
        self.stop()
        return self.start()

    def close(self) -> None:
        """Stop the server; the same as `stop`, for ``contextlib.closing``."""
        self.stop()

    def pause(self) -> None:
        """Freeze the server (SIGSTOP): connections stay open, nothing answers."""
        assert self._process is not None, "the server is not running"
        self._process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """Let a paused server run again (SIGCONT)."""
        assert self._process is not None, "the server is not running"
        self._process.send_signal(signal.SIGCONT)

    def ping(self) -> bool:
        """Whether the server answers PING now."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


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
