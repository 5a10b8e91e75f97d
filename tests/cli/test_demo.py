"""
``anchortrack demo`` end to end, as a subprocess; then ``anchortrack explain`` on what it left.

The demo must never leave this machine unless asked (an exported ``OPENAI_API_KEY`` included:
every socket it opens is audited), fit the terminal, respect ``NO_COLOR`` and pipes, stop on
Ctrl-C with 130, print ASCII on a non-UTF-8 stream, and tell one story in its table, its summary
and ``tracker.stats``.
"""

from __future__ import annotations

import json
import os
import pty
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from anchortrack._cli import main


ROOT = Path(__file__).parents[2]
ROW = re.compile(r"\s*(\d+)\s+\d+/\d+\s")

#: Installed in the demo's interpreter: records every socket connection and name lookup.
AUDIT = """
import json, os, sys

_log = os.environ["ANCHORTRACK_TEST_AUDIT"]

def _hook(event, args):
    if event == "socket.connect":
        address = args[1]
        host = address if isinstance(address, str) else address[0]
        port = None if isinstance(address, str) else address[1]
        with open(_log, "a") as out:
            out.write(json.dumps({"connect": [host, port]}) + "\\n")
    elif event == "socket.getaddrinfo":
        with open(_log, "a") as out:
            out.write(json.dumps({"lookup": str(args[0])}) + "\\n")

sys.addaudithook(_hook)
"""


def _env(cache: Path, **extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k
        not in (
            "OPENAI_API_KEY",
            "OPENAI_BASE_URL",
            "ANCHORTRACK_MODE",
            "NO_COLOR",
            "COLUMNS",
            "PYTHONIOENCODING",
        )
    }
    env["XDG_CACHE_HOME"] = str(cache)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.update(extra)
    return env


def _demo(cache: Path, *args: str, **env: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "anchortrack", "demo", *args],
        cwd=ROOT,
        env=_env(cache, **env),
        capture_output=True,
        timeout=120,
        check=False,
    )


def _text(proc: subprocess.CompletedProcess[bytes]) -> str:
    return proc.stdout.decode("utf-8")


def _row(lines: list[str], call: int) -> str:
    """Call *call*'s row with its continuation lines (the reason / note), joined by spaces."""
    start = next(i for i, line in enumerate(lines) if (m := ROW.match(line)) and int(m.group(1)) == call)
    block = [lines[start]]
    for line in lines[start + 1 :]:
        if not line.strip() or ROW.match(line):
            break
        block.append(line.strip())
    return " ".join(block)


@pytest.fixture(scope="module", name="listener")
def _listener() -> Iterator[socket.socket]:
    """A loopback port standing in for a real endpoint: nothing may connect to it."""
    sock = socket.create_server(("127.0.0.1", 0))
    sock.setblocking(False)
    yield sock
    sock.close()


@pytest.fixture(scope="module", name="demo_run")
def _demo_run(
    tmp_path_factory: pytest.TempPathFactory, listener: socket.socket
) -> tuple[subprocess.CompletedProcess[bytes], Path, list[dict[str, object]]]:
    """
    The default demo at 80 columns, piped, with an API key exported and OPENAI_BASE_URL set.

    Every connection and name lookup of its interpreter is recorded.
    """
    cache = tmp_path_factory.mktemp("cache")
    hooks = tmp_path_factory.mktemp("hooks")
    (hooks / "sitecustomize.py").write_text(AUDIT, encoding="utf-8")
    audit = hooks / "audit.jsonl"
    port = listener.getsockname()[1]
    proc = subprocess.run(
        [sys.executable, "-m", "anchortrack", "demo", "--store", f"sqlite:{cache / 'anchors.db'}"],
        cwd=ROOT,
        env=_env(
            cache,
            COLUMNS="80",
            OPENAI_API_KEY="sk-test-not-a-real-key",
            OPENAI_BASE_URL=f"http://127.0.0.1:{port}/v1",
            PYTHONPATH=os.pathsep.join([str(hooks), str(ROOT)]),
            ANCHORTRACK_TEST_AUDIT=str(audit),
        ),
        capture_output=True,
        timeout=120,
        check=False,
    )
    records = [json.loads(line) for line in audit.read_text(encoding="utf-8").splitlines()]
    return proc, cache, records


def test_with_an_api_key_exported_nothing_leaves_this_machine(
    demo_run: tuple[subprocess.CompletedProcess[bytes], Path, list[dict[str, object]]],
    listener: socket.socket,
) -> None:
    """OPENAI_API_KEY and OPENAI_BASE_URL are set, yet the demo only talks to its local server."""
    proc, _, records = demo_run
    connects = [r["connect"] for r in records if "connect" in r]
    lookups = {r["lookup"] for r in records if "lookup" in r}

    assert 0 == proc.returncode, proc.stderr
    assert connects  # the audit saw the demo's own loopback connections
    assert all(isinstance(c, list) and c[0] in ("127.0.0.1", "::1") for c in connects), connects
    assert lookups <= {"127.0.0.1", "localhost", "::1"}, lookups
    assert all(c[1] != listener.getsockname()[1] for c in connects if isinstance(c, list))
    with pytest.raises(BlockingIOError):
        listener.accept()  # nobody connected to the "real endpoint"
    assert re.match(
        r"anchortrack demo · local Responses server http://127\.0\.0\.1:\d+/v1 · model",
        _text(proc).splitlines()[1],
    )


def test_piped_output_fits_80_columns_without_colours(
    demo_run: tuple[subprocess.CompletedProcess[bytes], Path, list[dict[str, object]]],
) -> None:
    """At COLUMNS=80 and piped: no line wider than 80, no escape codes, no status line."""
    proc, _, _ = demo_run
    out = _text(proc)
    lines = out.splitlines()

    assert "" == proc.stderr.decode()
    assert max(len(line) for line in lines) <= 80
    assert "\x1b" not in out
    assert "\r" not in out
    assert lines[0].startswith("anchortrack demo · starting the local Responses server")
    assert "call   turn  decision      anchor           items    sent B  stateless B  saved" in lines
    assert "      ↳ reason / note" in lines


def test_demo_prints_each_call(
    demo_run: tuple[subprocess.CompletedProcess[bytes], Path, list[dict[str, object]]],
) -> None:
    """The table shows each call's decision; middleware and recovery are explained under the row."""
    lines = _text(demo_run[0]).splitlines()

    first = re.fullmatch(
        r"\s+1\s+1/6\s+stateless\s+-\s+2/2\s+([\d,]+)\s+([\d,]+)\s+0% ↳ no_history", _row(lines, 1)
    )
    assert first is not None
    assert first.group(1) == first.group(2)  # a stateless call measures the same both ways
    assert re.search(r"chained\s+resp_\w+…\s+1/8\s", _row(lines, 3))
    assert re.search(r"chained\s+resp_\w+…\s+2/15\s.* middleware appended retrieved context$", _row(lines, 6))
    assert re.search(
        r"stateless\s+-\s+19/19 .* prefix_diverged at 1; middleware redacted an e-mail in item 1$",
        _row(lines, 8),
    )
    assert re.search(
        r"resent\s+-\s+23/23 .* stale_anchor; the server lost the newest response; "
        r"resp_\w+… refused: resent in full",
        _row(lines, 10),
    )


def test_the_summary_and_the_stats_tell_one_story(
    demo_run: tuple[subprocess.CompletedProcess[bytes], Path, list[dict[str, object]]],
) -> None:
    """A resend is a resend in the table, the summary and tracker.stats; recorded counts anchors written."""
    out = " ".join(line.strip() for line in _text(demo_run[0]).splitlines())

    assert "summary: 12 calls, 13 requests on the wire: chained 9, resent 1, stateless 2" in out
    assert "tracker.stats: requests 12 (chained 9, resent 1, stateless 2);" in out
    assert "; recorded 12" in out
    sent, stateless = (
        int(n.replace(",", ""))
        for n in re.findall(r"input bytes: ([\d,]+) sent vs ([\d,]+) stateless", out)[0]
    )
    assert sent < stateless / 2
    # one definition of the share of stateless bytes: the summary and tracker.stats say the same
    assert 1 == len(set(re.findall(r"stateless \((\d+)%\)", out))), out
    assert "equivalence: the server's context was exactly the agent's history on 12 of 12 calls" in out
    assert "no_history (call 1): " in out
    assert "prefix_diverged at 1 (call 8): item 1 differs from the closest view recorded so far" in out
    assert "stale_anchor (call 10): the server no longer had the anchor" in out
    assert "why this saves less than the README's benchmark: savings grow with the conversation" in out
    # The README quotes the share this run sends (to the nearest 10%).
    share = int(re.findall(r"sent of ~[\d,]+ stateless \((\d+)%\)", out)[0])
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    quoted = int(re.findall(r"Its 6-turn run sends about (\d+)% of the stateless bytes", readme)[0])
    assert abs(share - quoted) <= 5


def test_the_hints_fit_the_run(tmp_path: Path) -> None:
    """A run as long as the benchmark is not told to try the benchmark's length."""
    proc = _demo(tmp_path, "--store", "memory", "--turns", "25")
    out = " ".join(line.strip() for line in _text(proc).splitlines())

    assert 0 == proc.returncode, proc.stderr
    assert "try --turns" not in out
    assert "saves less than the README's benchmark" not in out
    assert 1 == len(set(re.findall(r"stateless \((\d+)%\)", out))), out


def test_explain_after_demo_needs_no_flags(
    demo_run: tuple[subprocess.CompletedProcess[bytes], Path, list[dict[str, object]]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """demo.json points explain at the demo's store and scope; the next call would chain one item."""
    proc, cache, _ = demo_run
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    record = json.loads((cache / "anchortrack" / "demo.json").read_text())
    request_file = record["request_file"]
    assert f"anchortrack explain {request_file}" in " ".join(_text(proc).split())

    code = main(["explain", request_file, "--json"])

    data = json.loads(capsys.readouterr().out)
    assert 0 == code
    assert (f"sqlite:{cache / 'anchors.db'}", "anchortrack-demo") == (record["store"], record["namespace"])
    assert ("chained", 1, 28) == (data["reason"], data["items_sent"], data["items_skipped"])
    assert record["base_url"] == data["scope"]["base_url"]
    assert "demo.json" == data["scope_source"]["base_url"]


def test_120_columns_and_a_cp1252_stream(tmp_path: Path) -> None:
    """Wider terminals get the reason beside the row; a non-UTF-8 stream gets ASCII, not an error."""
    proc = _demo(tmp_path, "--store", "memory", "--turns", "5", COLUMNS="120", PYTHONIOENCODING="cp1252")
    lines = proc.stdout.decode("ascii").splitlines()  # raises if any byte is not ASCII

    assert 0 == proc.returncode, proc.stderr
    assert "Traceback" not in proc.stderr.decode()
    assert max(len(line) for line in lines) <= 120
    assert max(len(line) for line in lines) > 80
    assert lines[0].startswith("anchortrack demo - starting the local Responses server")
    assert re.search(r"^\s+1\s+1/5\s+stateless\s+-\s+2/2\s.*0%  no_history$", _row(lines, 1))
    assert re.search(r"resent\s+-\s+23/23 .* stale_anchor; the server lost", _row(lines, 10))
    assert re.search(r"chained\s+resp_\w{5}\.\.\.\s+1/8\s", _row(lines, 3))
    assert any(line.startswith("----  -----  ---") for line in lines)


def test_shadow_rows_are_honest(tmp_path: Path) -> None:
    """Shadow rows save 0% of what they sent, flag the refusal a real run would hit, never say chained."""
    proc = _demo(tmp_path, "--mode", "shadow", "--store", "memory", "--events", COLUMNS="100")
    lines = _text(proc).splitlines()
    out = " ".join(line.strip() for line in lines)

    assert 0 == proc.returncode, proc.stderr
    assert max(len(line) for line in lines) <= 100
    rows = [_row(lines, call) for call in range(1, 13)]
    assert all(re.search(r"\s0%\s", row) for row in rows)  # nothing saved on what was sent in full
    assert re.search(r"would chain\s+resp_\w+…\s+6/6\s.* chaining would send [\d,]+ B \(\d+% less\)", rows[1])
    assert re.search(
        r"would resend\s+resp_\w+…\s+23/23\s.* chaining would send [\d,]+ B \(\d+% more\); stale_anchor",
        rows[9],
    )
    assert "summary: 12 calls, 12 requests on the wire (all in full: shadow mode): " in out
    assert "would chain 9, would resend 1, stateless 2" in out
    assert re.search(r"input bytes: ([\d,]+) sent vs \1 stateless \(100%\): saved 0", out)
    assert re.search(
        r"shadow: chaining would have sent [\d,]+ \(\d\d?% of stateless\), "
        r"counting the 1 refusal it would have hit",
        out,
    )
    assert "tracker.stats: requests 12 (shadow 12: would chain 10, stateless 2)" in out
    assert not re.search(r"\bchained\b", out.split("summary:")[1].replace("not chained", ""))
    assert "nothing is left for 'anchortrack explain' to read" in out
    assert "· info    anchortrack.shadow_planned mode=shadow decision=chained reason=chained " in out
    assert not (tmp_path / "anchortrack" / "demo.json").exists()


def _pty_demo(tmp_path: Path, **env: str) -> str:
    """Run a one-turn demo on a pseudo-terminal of 100 columns; return what it showed."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "anchortrack", "demo", "--store", "memory", "--turns", "1"],
        cwd=ROOT,
        env=_env(tmp_path, COLUMNS="100", TERM="xterm", **env),
        stdin=subprocess.DEVNULL,
        stdout=follower,
        stderr=subprocess.PIPE,
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    assert 0 == proc.wait(timeout=120)
    return b"".join(chunks).decode()


def test_colours_on_a_terminal_and_never_with_no_color(tmp_path: Path) -> None:
    """A terminal gets coloured decisions and a status line; NO_COLOR=1 drops the colours only."""
    coloured = _pty_demo(tmp_path)
    plain = _pty_demo(tmp_path, NO_COLOR="1")

    assert "\x1b[36mstateless   \x1b[0m" in coloured
    assert "\x1b[32mchained     \x1b[0m" in coloured
    assert "\x1b[3" not in plain
    assert "waiting for the model" in plain  # the overwritten status line is not a colour


@pytest.mark.parametrize("when", ["at once", "after the first call"])
def test_ctrl_c_exits_130_without_a_traceback(tmp_path: Path, when: str) -> None:
    """SIGINT while starting or while the agent runs: exit code 130, a short note, no traceback."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "anchortrack", "demo", "--store", "memory", "--turns", "500"],
        cwd=ROOT,
        env=_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()  # something is on screen before the server starts
    assert line.startswith("anchortrack demo · starting the local Responses server")
    if when == "after the first call":
        while not ROW.match(line):
            line = proc.stdout.readline()
            assert line, "the demo ended before its first call"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)

    assert 130 == proc.returncode
    assert "Traceback" not in err
    assert "interrupted" in err


def test_a_mistyped_mode_variable_is_reported_with_its_value(tmp_path: Path) -> None:
    """ANCHORTRACK_MODE=chain: one warning naming the value and the mode used; the header says so too."""
    proc = _demo(tmp_path, "--store", "memory", "--turns", "1", ANCHORTRACK_MODE="chain")
    out = " ".join(_text(proc).split())

    assert 0 == proc.returncode, proc.stderr
    assert [
        "anchortrack.mode_invalid variable='ANCHORTRACK_MODE' value='chain' "
        "expected='chained, shadow, off' using='off'"
    ] == proc.stderr.decode().splitlines()
    assert "mode off (ANCHORTRACK_MODE='chain' is unknown; expected one of: chained, shadow, off)" in out
    assert "passthrough 2" in out


def test_a_real_endpoint_only_when_asked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--openai needs a key (exit 2 without one); --base-url and --openai exclude each other."""
    env = _env(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "anchortrack", "demo", "--openai"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert 2 == proc.returncode
    assert "--openai needs an API key: set OPENAI_API_KEY or pass --api-key" in proc.stderr
    with pytest.raises(SystemExit) as stop:
        main(["demo", "--openai", "--base-url", "http://127.0.0.1:9/v1"])
    assert 2 == stop.value.code
    assert "not allowed with argument" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["abc", "0", "-3"])
def test_turns_must_be_a_positive_number(capsys: pytest.CaptureFixture[str], value: str) -> None:
    """--turns abc says what it expected, in words; exit code 2."""
    with pytest.raises(SystemExit) as stop:
        main(["demo", "--turns", value])

    assert 2 == stop.value.code
    assert (
        f"argument --turns: expected a whole number of at least 1, got '{value}'" in capsys.readouterr().err
    )


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    """anchortrack --version prints the installed version."""
    import anchortrack

    with pytest.raises(SystemExit) as stop:
        main(["--version"])

    assert 0 == stop.value.code
    assert f"anchortrack {anchortrack.__version__}\n" == capsys.readouterr().out


def test_help_imports_neither_openai_nor_the_web_stack() -> None:
    """--help builds every subcommand's parser from the standard library alone (it is fast)."""
    code = (
        "import sys\n"
        "from anchortrack._cli import build_parser\n"
        "build_parser().format_help()\n"
        "heavy = ('openai', 'httpx', 'httpx2', 'structlog', 'starlette', 'uvicorn', 'anchortrack._client')\n"
        "print([m for m in heavy if m in sys.modules])\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=_env(ROOT), capture_output=True, text=True, check=False
    )

    assert 0 == proc.returncode, proc.stderr
    assert "[]\n" == proc.stdout
