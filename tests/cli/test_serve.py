"""``anchortrack serve``: its options, its errors, and a real server process stopped by a signal."""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from anchortrack._cli import main
from anchortrack._cli.serve import register


REPO = Path(__file__).resolve().parents[2]


class TestServe:
    def test_serve_options(self) -> None:
        """`serve` parses host, port, store, retention and test hooks, with OpenAI-like defaults."""
        parser = argparse.ArgumentParser()
        register(parser.add_subparsers())

        defaults = parser.parse_args(["serve"])
        custom = parser.parse_args(
            [
                "serve",
                "--host",
                "0.0.0.0",
                "--port",
                "9",
                "--store",
                "sqlite:x.db",
                "--retention",
                "5",
                "--test-hooks",
            ]
        )

        assert (
            defaults.host,
            defaults.port,
            defaults.store,
            defaults.retention,
            defaults.test_hooks,
        ) == ("127.0.0.1", 8000, "memory", 30 * 86400.0, False)
        assert (
            custom.host,
            custom.port,
            custom.store,
            custom.retention,
            custom.test_hooks,
        ) == ("0.0.0.0", 9, "sqlite:x.db", 5.0, True)
        assert callable(custom.handler)

    def test_max_responses_bounds_the_memory_store_and_is_printed(self, tmp_path: Path) -> None:
        """--max-responses (default 100,000) reaches the memory store; the start line names the bounds."""
        from anchortrack._cli.serve import build_state, store_bounds
        from anchortrack.server._records import DEFAULT_MAX_RESPONSES, MemoryResponseStore

        parser = argparse.ArgumentParser()
        register(parser.add_subparsers())
        defaults = parser.parse_args(["serve"])
        custom = parser.parse_args(["serve", "--max-responses", "3", "--retention", "90"])
        sqlite = parser.parse_args(["serve", "--store", f"sqlite:{tmp_path / 'b.db'}"])
        state = build_state(custom)
        store = state.store
        state.close()

        assert DEFAULT_MAX_RESPONSES == defaults.max_responses == 100_000
        assert isinstance(store, MemoryResponseStore)
        assert 3 == store.max_responses
        assert "up to 100000 responses, kept 30 days" == store_bounds(defaults)
        assert "up to 3 responses, kept 90 s" == store_bounds(custom)
        assert "kept 30 days" == store_bounds(sqlite)
        with pytest.raises(SystemExit):
            parser.parse_args(["serve", "--max-responses", "0"])

    def test_cli_does_not_import_the_web_stack(self) -> None:
        """Importing the command line (and the server package) leaves starlette and uvicorn unimported."""
        code = (
            "import sys, anchortrack._cli, anchortrack.server; "
            "sys.exit(int(any(m in sys.modules for m in ('starlette', 'uvicorn'))))"
        )
        result = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=_env(), timeout=60, check=False)

        assert result.returncode == 0

    @pytest.mark.parametrize(
        ("args", "message"),
        [
            (["--port", "99999"], "argument --port: expected a port number (0-65535), got 99999"),
            (["--port", "-1"], "argument --port: expected a port number (0-65535), got -1"),
            (["--port", "http"], "argument --port: expected a port number (0-65535), got 'http'"),
            (["--max-depth", "0"], "argument --max-depth: expected a whole number of at least 1, got '0'"),
            (["--retention", "-5"], "argument --retention: expected a number of seconds above 0, got '-5'"),
        ],
    )
    def test_out_of_range_options_exit_2(
        self, capsys: pytest.CaptureFixture[str], args: list[str], message: str
    ) -> None:
        """A port outside 0-65535 (and other impossible values) is refused before anything is served."""
        with pytest.raises(SystemExit) as stop:
            main(["serve", *args])

        assert 2 == stop.value.code
        assert message in capsys.readouterr().err

    def test_the_help_defaults_are_the_servers(self) -> None:
        """serve's --help defaults repeat the server's constants (so --help need not import the server)."""
        from anchortrack._cli import serve
        from anchortrack.server._chain import DEFAULT_MAX_DEPTH
        from anchortrack.server._records import DEFAULT_RETENTION

        assert (DEFAULT_MAX_DEPTH, DEFAULT_RETENTION) == (
            serve.DEFAULT_MAX_DEPTH,
            serve.DEFAULT_RETENTION,
        )

    def test_bad_store_spelling_exits_2(self) -> None:
        """An unknown --store is reported, not a traceback."""
        result = subprocess.run(
            [sys.executable, "-c", _MAIN, "serve", "--store", "redis://x", "--port", "0"],
            cwd=REPO,
            env=_env(),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

        assert result.returncode == 2
        assert "unknown store" in result.stderr

    @pytest.mark.parametrize("stop_signal", [signal.SIGINT, signal.SIGTERM])
    def test_anchortrack_serve_runs_and_stops_on_a_signal(self, tmp_path: Path, stop_signal: int) -> None:
        """`anchortrack serve --port 0 --test-hooks` prints its URL, serves, and exits 0 on SIGINT/SIGTERM."""
        process = subprocess.Popen(
            [
                sys.executable,
                "-c",
                _MAIN,
                "serve",
                "--port",
                "0",
                "--test-hooks",
                "--store",
                f"sqlite:{tmp_path / 'c.db'}",
            ],
            cwd=REPO,
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert process.stdout is not None
            line = process.stdout.readline()
            base_url = line.split(" at ")[1].split(" ")[0]
            client = openai.OpenAI(base_url=base_url, api_key="test", max_retries=0)
            first = client.responses.create(model="scripted", input="hi")
            second = client.responses.create(model="scripted", input="again", previous_response_id=first.id)
            context = client.get(f"{base_url[:-3]}/_test/responses/{second.id}/context", cast_to=object)
            client.close()
        finally:
            process.send_signal(stop_signal)
            code = process.wait(timeout=30)

        assert base_url.startswith("http://127.0.0.1:")
        assert len(_data(context)) == 3
        assert code == 0

    def test_serve_requires_the_listed_keys(self) -> None:
        """`--api-key` and $ANCHORTRACK_SERVE_API_KEYS list the served keys; others get 401."""
        env = {**_env(), "ANCHORTRACK_SERVE_API_KEYS": " sk-env-b , sk-env-c,"}
        process = subprocess.Popen(
            [sys.executable, "-c", _MAIN, "serve", "--port", "0", "--api-key", "sk-flag-a"],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert process.stdout is not None
            base_url = process.stdout.readline().split(" at ")[1].split(" ")[0]
            clients = {
                key: openai.OpenAI(base_url=base_url, api_key=key, max_retries=0)
                for key in ("sk-flag-a", "sk-env-b", "sk-env-c", "sk-unknown-d")
            }
            first = clients["sk-flag-a"].responses.create(model="scripted", input="mine")
            with pytest.raises(openai.AuthenticationError) as refused:
                clients["sk-unknown-d"].responses.create(model="scripted", input="hi")
            with pytest.raises(openai.NotFoundError):
                clients["sk-env-b"].responses.retrieve(first.id)
            served = clients["sk-env-c"].responses.create(model="scripted", input="hi")
            for client in clients.values():
                client.close()
        finally:
            process.send_signal(signal.SIGTERM)
            code = process.wait(timeout=30)

        assert "invalid_api_key" == refused.value.code
        assert "completed" == served.status
        assert code == 0

    @pytest.mark.parametrize("test_hooks", [False, True])
    def test_request_bodies_are_kept_only_with_test_hooks(self, test_hooks: bool) -> None:
        """Without hooks, `serve`'s state keeps no request body (HTTP, WebSocket, unstored, refused)."""
        from websockets.sync.client import connect

        from anchortrack._cli.serve import build_state
        from anchortrack.server import ResponsesServer

        parser = argparse.ArgumentParser()
        register(parser.add_subparsers())
        args = parser.parse_args(["serve", "--port", "0", *(["--test-hooks"] if test_hooks else [])])
        state = build_state(args)
        secret = "patient 4111 diagnosis"
        bodies = [
            {"model": "scripted", "input": secret, "store": False},
            {"model": "scripted", "input": secret},
            {"model": "scripted", "input": secret, "bogus": 1},
            {"input": secret},
        ]
        with ResponsesServer(state=state) as srv:
            with openai.OpenAI(base_url=srv.base_url, api_key="k", max_retries=0) as client:
                for body in bodies:
                    with contextlib.suppress(openai.BadRequestError):
                        client.post("/responses", body=body, cast_to=object)
            with connect(f"ws://127.0.0.1:{srv.port}/v1/responses") as socket:
                socket.send(json.dumps({"type": "response.create", **bodies[0]}))
                socket.recv(timeout=30)
            kept = (state.requests, srv.app.state.websockets.received)

        assert (len(kept[0]), len(kept[1])) == ((4, 1) if test_hooks else (0, 0))
        assert (secret in repr(kept)) is test_hooks


class TestShutdown:
    """Requests cut off by `--shutdown-timeout` get OpenAI's error shape (a real `anchortrack serve`)."""

    def test_requests_cancelled_at_shutdown_get_a_503_or_an_error_event(self) -> None:
        """A JSON request gets 503 `server_error` in OpenAI's shape; a streamed one, after its first
        events, an `error` event; the log has one line per request and no traceback; exit code 0."""
        with _serving("--shutdown-timeout", "1") as (process, port):
            slow = json.dumps({"model": "scripted", "input": "wait\n!sleep 30000"})
            plain = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            plain.request("POST", "/v1/responses", slow, {"content-type": "application/json"})
            streamed = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            body = json.dumps({"model": "scripted", "input": "wait\n!sleep 30000", "stream": True})
            streamed.request("POST", "/v1/responses", body, {"content-type": "application/json"})
            stream = streamed.getresponse()
            first_lines = [stream.readline() for _ in range(6)]  # created and in_progress: 3 lines each
            time.sleep(0.3)  # the plain request is in flight too
            process.send_signal(signal.SIGTERM)
            answer = plain.getresponse()
            status, error = answer.status, json.loads(answer.read())
            rest = stream.read().decode()
            code = process.wait(timeout=30)
            _, stderr = process.communicate(timeout=30)
            plain.close()
            streamed.close()

        assert 0 == code
        assert 503 == status
        assert {
            "error": {
                "message": "The server is shutting down and cancelled this request; send it again.",
                "type": "server_error",
                "param": None,
                "code": "server_shutting_down",
            }
        } == error
        assert b"event: response.in_progress\n" in first_lines
        events = [json.loads(line[6:]) for line in rest.splitlines() if line.startswith("data: ")]
        assert ["error"] == [event["type"] for event in events]
        assert ("server_shutting_down", 2) == (events[0]["code"], events[0]["sequence_number"])
        assert 2 == stderr.count("anchortrack.server.request_cancelled_at_shutdown")
        assert "Traceback" not in stderr


_HEADERS = (
    b"POST /v1/responses HTTP/1.1\r\nHost: x\r\n"
    b"Content-Type: application/json\r\nContent-Length: LENGTH\r\n\r\n"
)


class TestSlowClients:
    """A client that stalls cannot hold `anchortrack serve` (a real process, raw sockets)."""

    def test_sigterm_stops_the_server_while_a_body_is_half_sent(self) -> None:
        """Headers and half a body, then SIGTERM: the process exits (0) within a bounded wait."""
        with _serving() as (process, port), socket.create_connection(("127.0.0.1", port)) as client:
            client.sendall(_HEADERS.replace(b"LENGTH", b"100") + b'{"model": "scripted", "inp')
            _assert_open(client)
            process.send_signal(signal.SIGTERM)
            code = process.wait(timeout=30)

        assert code == 0

    @pytest.mark.parametrize(
        ("option", "start"),
        [
            ("--header-timeout", b"POST /v1/responses HTTP/1.1\r\nHost: x\r\n"),
            ("--body-timeout", _HEADERS.replace(b"LENGTH", b"100")),
        ],
        ids=["headers", "body"],
    )
    def test_a_trickling_client_is_cut_off(self, option: str, start: bytes) -> None:
        """A client trickling its headers (or body) a byte at a time is disconnected after the timeout."""
        with _serving(option, "1") as (_, port), socket.create_connection(("127.0.0.1", port)) as client:
            client.sendall(start)
            client.settimeout(0.2)
            deadline = time.monotonic() + 60  # generous: the timeout is 1 s
            closed = False
            while not closed and time.monotonic() < deadline:
                try:
                    client.sendall(b"x")
                    closed = client.recv(1024) == b""
                except TimeoutError:
                    continue
                except OSError:  # reset by the server
                    closed = True

        assert closed


@contextlib.contextmanager
def _serving(*options: str) -> Iterator[tuple[subprocess.Popen[str], int]]:
    process = subprocess.Popen(
        [sys.executable, "-c", _MAIN, "serve", "--port", "0", *options],
        cwd=REPO,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        yield process, int(line.split(" at ")[1].split("/v1")[0].rsplit(":", 1)[1])
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=30)


def _assert_open(client: socket.socket) -> None:
    """The server holds the connection (it waits for the rest of the body)."""
    client.settimeout(0.5)
    with pytest.raises(TimeoutError):
        client.recv(1)


_MAIN = "import sys; from anchortrack._cli import main; sys.exit(main(sys.argv[1:]))"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


def _data(body: Any) -> list[Any]:
    assert isinstance(body, dict)
    data = body["data"]
    assert isinstance(data, list)
    return data
