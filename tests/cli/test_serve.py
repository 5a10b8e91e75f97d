"""``anchortrack serve``: its options, its errors, and a real server process stopped by a signal."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
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
        from anchortrack import server
        from anchortrack._cli import serve

        assert (server.DEFAULT_MAX_DEPTH, server.DEFAULT_RETENTION) == (
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
