"""``anchortrack serve``: run the local Responses API server in the foreground."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sqlite3
import sys
from typing import TYPE_CHECKING, Any

from .flags import command, fail, interrupt, port_number, positive_count, positive_seconds


if TYPE_CHECKING:
    from ..server import ServerState


#: The server's defaults, repeated so that ``--help`` imports nothing (tests check they match).
DEFAULT_MAX_DEPTH = 10_000
DEFAULT_RETENTION = 30 * 24 * 3600.0
DEFAULT_MAX_RESPONSES = 100_000
#: Environment variable listing the keys to serve, comma-separated.
API_KEYS_ENV = "ANCHORTRACK_SERVE_API_KEYS"


def register(subparsers: Any) -> None:
    """Add the ``serve`` subcommand to the ``anchortrack`` parser."""
    add = command(
        subparsers,
        "serve",
        serve,
        "run a local Responses API server (no API key needed)",
        "Serve the OpenAI Responses API with previous_response_id chaining and a deterministic scripted "
        "model, or in front of a Chat Completions provider (--upstream). Point a client at "
        "http://HOST:PORT/v1.",
    ).add_argument
    add("--host", default="127.0.0.1", help="interface to listen on (default: %(default)s)")
    add("--port", type=port_number, default=8000, help="port to listen on, 0-65535 (default: %(default)s)")
    add("--store", default="memory", metavar="memory|sqlite:PATH",
        help="where responses are kept (default: %(default)s)")  # fmt: skip
    add("--retention", type=positive_seconds, default=DEFAULT_RETENTION, metavar="SECONDS",
        help="how long stored responses stay chainable (default: 30 days)")  # fmt: skip
    add("--max-responses", type=positive_count, default=DEFAULT_MAX_RESPONSES, metavar="N",
        help="most responses the memory store keeps, evicting the oldest (default: %(default)s)")  # fmt: skip
    add("--max-depth", type=positive_count, default=DEFAULT_MAX_DEPTH, metavar="N",
        help="most stored responses one chain may hold (default: %(default)s)")  # fmt: skip
    add("--api-key", dest="api_keys", action="append", default=[], metavar="KEY",
        help=f"serve only this bearer key (repeatable; also ${API_KEYS_ENV}, comma-separated); "
        "by default any key is served. Each key sees only its own responses.")  # fmt: skip
    add("--test-hooks", action="store_true",
        help="serve the /_test hooks (expire, drop, ZDR, resolved context, request log)")  # fmt: skip
    for name, default, what in (
        ("header", 10.0, "for a request's headers before closing the connection"),
        ("body", 30.0, "for a request's body (once its headers are in) before closing the connection"),
        ("shutdown", 5.0, "on requests in flight at shutdown (SIGINT/SIGTERM) before cancelling them"),
    ):
        add(f"--{name}-timeout", type=positive_seconds, default=default, metavar="SECONDS",
            help=f"seconds to wait {what} (default: %(default)s)")  # fmt: skip
    add("--upstream", metavar="BASE_URL", help="answer with this Chat Completions provider, e.g. "
        "http://localhost:11434/v1 (API key: $ANCHORTRACK_UPSTREAM_API_KEY, optional)")  # fmt: skip
    add("--upstream-model", metavar="NAME", help="model sent to the provider (default: the request's model)")
    add("--upstream-timeout", type=positive_seconds, default=120.0, metavar="SECONDS",
        help="seconds to wait for the provider to connect or send (default: %(default)s)")  # fmt: skip
    add("--log-level", default="warning", choices=["critical", "error", "warning", "info", "debug"],
        help="uvicorn log level (default: %(default)s)")  # fmt: skip


def serve(args: argparse.Namespace) -> int:
    """Run the server until SIGINT or SIGTERM (a clean shutdown, exit code 0); return the exit code."""
    try:
        import uvicorn

        from ..server._app import create_app
        from ..server._runner import Timeouts, bind_listener, uvicorn_config
    except ImportError as exc:
        sys.stderr.write(
            f"anchortrack serve needs the server extra ({exc.name} is missing): "
            "pip install 'anchortrack[server]'\n"
        )
        return 2
    try:
        state = build_state(args)
    except (ValueError, RuntimeError, OSError, sqlite3.Error) as exc:
        return fail("serve", str(exc))
    listed = [key.strip() for key in os.environ.get(API_KEYS_ENV, "").split(",")]
    keys = [key for key in [*args.api_keys, *listed] if key] or None  # None: any key
    app = create_app(state, test_hooks=args.test_hooks, api_keys=keys)
    try:
        sock = bind_listener(args.host, args.port)
    except OSError as exc:
        state.close()
        return fail("serve", f"cannot listen on {args.host}:{args.port}: {exc}", 1)
    host = f"[{args.host}]" if ":" in args.host else args.host
    details = f"store: {args.store}, {store_bounds(args)}"
    if state.backend is not None:
        details += f", upstream: {getattr(state.backend, 'name', '?')}"
    if keys:
        details += f", {len(keys)} API keys"
    sys.stdout.write(f"anchortrack: Responses API at http://{host}:{sock.getsockname()[1]}/v1 ({details})\n")
    sys.stdout.flush()
    timeouts = Timeouts(header=args.header_timeout, body=args.body_timeout, shutdown=args.shutdown_timeout)
    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        with contextlib.suppress(KeyboardInterrupt):  # uvicorn shuts down gracefully, then re-raises it
            uvicorn.Server(uvicorn_config(app, timeouts, log_level=args.log_level)).run(sockets=[sock])
    finally:
        signal.signal(signal.SIGTERM, previous)
        sock.close()
        state.close()
    return 0


def store_bounds(args: argparse.Namespace) -> str:
    """What bounds the store: its retention, and for memory its most responses."""
    days = args.retention / 86400
    kept = f"kept {days:g} days" if days >= 1 else f"kept {args.retention:g} s"
    return f"up to {args.max_responses} responses, {kept}" if args.store == "memory" else kept


def build_state(args: argparse.Namespace) -> ServerState:
    """The server state the flags ask for: it keeps request bodies only with ``--test-hooks``."""
    from ..server import ServerState

    backend = None
    if args.upstream:
        from ..server._upstream import Upstream

        backend = Upstream(args.upstream, model=args.upstream_model, timeout=args.upstream_timeout)
    return ServerState(
        args.store,
        retention=args.retention,
        max_depth=args.max_depth,
        max_responses=args.max_responses,
        record=args.test_hooks,
        backend=backend,
    )
