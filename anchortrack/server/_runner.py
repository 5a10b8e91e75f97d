"""`ResponsesServer`: the app served by uvicorn in a background thread; `uvicorn_config` for both it and
``anchortrack serve``.

A client cannot hold the server: headers and body must arrive within `Timeouts`, and a shutdown cancels
requests still in flight after `Timeouts.shutdown` seconds."""

from __future__ import annotations

import asyncio
import math
import socket
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import h11
import uvicorn
from starlette.types import ASGIApp
from uvicorn.protocols.http.h11_impl import H11Protocol, RequestResponseCycle

from anchortrack.server._app import create_app
from anchortrack.server._chain import DEFAULT_MAX_DEPTH
from anchortrack.server._records import DEFAULT_RETENTION, Clock, ResponseStore
from anchortrack.server._state import AsyncModel, Model, ServerState


@dataclass(frozen=True)
class Timeouts:
    """Seconds the server waits for a request's headers (from the connection's start or the previous
    response), then for its body, and at shutdown for requests in flight (then they are cancelled)."""

    header: float = 10.0
    body: float = 30.0
    shutdown: float = 5.0


class _TimedH11Protocol(H11Protocol):
    """uvicorn's HTTP/1.1 protocol, closing a connection whose request headers or body arrive too slowly."""

    timeouts = Timeouts()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._read_timer: asyncio.TimerHandle | None = None
        self._reading: str | None = None
        super().connection_made(transport)
        self._watch()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._watch()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._watch()

    def handle_websocket_upgrade(self, event: h11.Request) -> None:
        self._stop_timer()
        super().handle_websocket_upgrade(event)

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_timer()
        super().connection_lost(exc)

    def _watch(self) -> None:
        """Arm the timer of what the connection waits for: headers, a body, or nothing (answering)."""
        cycle: RequestResponseCycle | None = self.cycle  # None between requests, whatever uvicorn's type says
        reading = None if self.transport.is_closing() else "header"
        if reading and cycle is not None and not cycle.response_complete:
            reading = "body" if self.conn.their_state is h11.SEND_BODY else None
        if reading is None:
            self._stop_timer()
        elif self._reading != reading:  # a slow trickle does not restart the clock
            self._stop_timer()
            self._reading = reading
            self._read_timer = self.loop.call_later(getattr(self.timeouts, reading), self.transport.close)

    def _stop_timer(self) -> None:
        if self._read_timer is not None:
            self._read_timer.cancel()
        self._read_timer, self._reading = None, None


def uvicorn_config(app: ASGIApp, timeouts: Timeouts, **options: Any) -> uvicorn.Config:
    """The uvicorn configuration every server of this package runs with (*options* are uvicorn's)."""
    protocol = type("TimedH11Protocol", (_TimedH11Protocol,), {"timeouts": timeouts})
    return uvicorn.Config(
        app,
        lifespan="on",  # the app closes its upstream connections at shutdown
        ws="websockets-sansio",
        http=protocol,
        timeout_graceful_shutdown=max(1, math.ceil(timeouts.shutdown)),
        **options,
    )


def bind_listener(host: str, port: int) -> socket.socket:
    """A listening TCP socket on *host*:*port*, bound before uvicorn starts: ``0`` picks a free port known at
    once that nobody can take in between."""
    family, kind, proto, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except BaseException:
        sock.close()
        raise
    return sock


class ResponsesServer:
    """A local Responses API server on a loopback port, for tests and demos.

    Use it as a context manager (or call `start` and `stop`).

    Args:
        store: A `ResponseStore` or its spelling, ``"memory"`` or ``"sqlite:PATH"``.
        retention: Seconds stored responses are kept (for a spelled store).
        host: Interface to listen on.
        port: Port to listen on; ``0`` picks a free one.
        max_depth: Most stored responses one chain may hold.
        test_hooks: Also serve the ``/_test`` HTTP hooks (see ``create_app``).
        model: The model backend; the scripted model by default.
        clock: Time source for timestamps and retention.
        upstream: Answer with a Chat Completions provider instead: its base URL (see ``Upstream`` for the API
            key and options) or an asynchronous backend.
        state: Serve this state instead of building one (then the arguments that build one are ignored).
        api_keys: Serve only these bearer keys (401 otherwise); by default any key, or none.  Either way a
            response is visible only to its key.

    Attributes:
        state: The `ServerState` the running app shares.
    """

    def __init__(
        self,
        store: ResponseStore | str = "memory",
        retention: float = DEFAULT_RETENTION,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        max_depth: int = DEFAULT_MAX_DEPTH,
        test_hooks: bool = False,
        model: Model | None = None,
        clock: Clock | None = None,
        upstream: str | AsyncModel | None = None,
        state: ServerState | None = None,
        api_keys: Iterable[str] | None = None,
    ) -> None:
        if isinstance(upstream, str):
            from anchortrack.server._upstream import Upstream

            upstream = Upstream(upstream)
        self._owns_state = state is None
        self.state = state or ServerState(
            store, retention=retention, max_depth=max_depth, model=model, clock=clock, backend=upstream
        )
        self.app = create_app(self.state, test_hooks=test_hooks, api_keys=api_keys)
        self.host, self._requested_port = host, port
        self._port: int | None = None
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._stopped = False

    @property
    def port(self) -> int:
        """The port being served (known once started)."""
        if self._port is None:
            raise RuntimeError("the server is not started")
        return self._port

    @property
    def url(self) -> str:
        """The root URL, e.g. ``http://127.0.0.1:PORT``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def base_url(self) -> str:
        """The API base URL to give the openai client, e.g. ``http://127.0.0.1:PORT/v1``."""
        return f"{self.url}/v1"

    def start(self, timeout: float = 10.0) -> ResponsesServer:
        """Start serving in a background thread; return once connections are served.

        Raises:
            RuntimeError: Already started or stopped, or uvicorn did not start within *timeout* seconds.
        """
        if self._thread is not None or self._stopped:
            raise RuntimeError("a ResponsesServer can be started only once")
        sock = bind_listener(self.host, self._requested_port)
        self._port = int(sock.getsockname()[1])
        config = uvicorn_config(self.app, Timeouts(), log_config=None, access_log=False)
        server = uvicorn.Server(config)
        name = f"anchortrack-server-{self._port}"
        thread = threading.Thread(target=self._run, args=(server, sock), name=name, daemon=True)
        self._server, self._thread = server, thread
        thread.start()
        deadline = time.monotonic() + timeout
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the server did not start on {self.host}:{self._port}")
            time.sleep(0.005)
        return self

    @staticmethod
    def _run(server: uvicorn.Server, sock: socket.socket) -> None:
        try:
            server.run(sockets=[sock])
        finally:
            sock.close()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop serving, wait for the thread to end, and close a store this server opened."""
        if self._stopped:
            return
        self._stopped = True
        server, thread = self._server, self._thread
        if server is not None and thread is not None:
            server.should_exit = True
            thread.join(timeout)
            if thread.is_alive():
                server.force_exit = True
                thread.join(timeout)
        if self._owns_state:
            self.state.close()

    def __enter__(self) -> ResponsesServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        where = f"{self.host}:{self._port}" if self._port is not None else "not started"
        return f"<ResponsesServer {where}>"
