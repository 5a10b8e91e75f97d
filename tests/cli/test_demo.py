"""``anchortrack demo`` end to end, as a subprocess; then ``anchortrack explain`` on what it left."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from anchortrack._cli import main


ROOT = Path(__file__).parents[2]


def _demo(cache: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANCHORTRACK_MODE")
    }
    env["XDG_CACHE_HOME"] = str(cache)
    return subprocess.run(
        [sys.executable, "-m", "anchortrack", "demo", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _row(lines: list[str], call: int) -> str:
    return next(line for line in lines if re.match(rf"\s*{call}\s+\d+/\d+\s", line))


@pytest.fixture(scope="module", name="demo_run")
def _demo_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    cache = tmp_path_factory.mktemp("cache")
    return _demo(cache, "--store", f"sqlite:{cache / 'anchors.db'}"), cache


def test_demo_exits_0_and_prints_the_table(demo_run: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    """The default demo runs against the local server and shows each call's decision."""
    proc, _ = demo_run
    lines = proc.stdout.splitlines()

    assert 0 == proc.returncode, proc.stderr
    assert "" == proc.stderr
    assert re.match(
        r"anchortrack demo · local Responses server http://127\.0\.0\.1:\d+/v1 · model scripted", lines[0]
    )
    assert (
        "call   turn  mode     decision     anchor           items    sent B  stateless B  saved  "
        "reason / note" in lines
    )
    first = re.fullmatch(
        r"\s+1\s+1/6\s+chained\s+stateless\s+-\s+2/2\s+([\d,]+)\s+([\d,]+)\s+0%\s+no_history", _row(lines, 1)
    )
    assert first is not None
    assert first.group(1) == first.group(2)  # a stateless call measures the same both ways
    assert re.search(r"chained\s+resp_\w+…\s+1/8\s", _row(lines, 3))


def test_demo_shows_middleware_and_recovery(demo_run: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    """Injection still chains; redaction falls back with its index; a forgotten anchor is resent."""
    lines = demo_run[0].stdout.splitlines()

    assert re.search(r"chained\s+resp_\w+….*middleware appended retrieved context$", _row(lines, 6))
    assert re.search(
        r"stateless\s+-\s+19/19 .* prefix_diverged at 1; middleware redacted an e-mail in item 1$",
        _row(lines, 8),
    )
    assert re.search(r"chained\s+resp_\w+…\s+1/21\s", _row(lines, 9))
    assert re.search(
        r"resent\s+-\s+23/23 .* stale_anchor; the server lost the newest response; resp_\w+… refused",
        _row(lines, 10),
    )


def test_demo_summary_totals_and_explains_fallbacks(
    demo_run: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    """The summary adds the wire bytes up, checks equivalence and explains every fallback."""
    out = demo_run[0].stdout

    assert "summary: 12 calls, 13 requests on the wire · chained 9 · resent 1 · stateless 2" in out
    sent, stateless = (
        int(n.replace(",", "")) for n in re.findall(r"bytes sent ([\d,]+) vs ([\d,]+) stateless", out)[0]
    )
    assert sent < stateless / 2
    assert "equivalence: the server's context was exactly the agent's history on 12 of 12 calls" in out
    assert "    no_history (call 1): " in out
    assert "    prefix_diverged at 1 (call 8): item 1 differs from the closest view recorded so far" in out
    assert "    stale_anchor (call 10): the server no longer had the anchor" in out
    assert "fallbacks stale_anchor 1; recorded 12" in out


def test_explain_after_demo_needs_no_flags(
    demo_run: tuple[subprocess.CompletedProcess[str], Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """demo.json points explain at the demo's store and scope; the next call would chain one item."""
    proc, cache = demo_run
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    record = json.loads((cache / "anchortrack" / "demo.json").read_text())
    request_file = record["request_file"]
    assert f"anchortrack explain {request_file}" in proc.stdout

    code = main(["explain", request_file, "--json"])

    data = json.loads(capsys.readouterr().out)
    assert 0 == code
    assert (f"sqlite:{cache / 'anchors.db'}", "anchortrack-demo") == (record["store"], record["namespace"])
    assert ("chained", 1, 28) == (data["reason"], data["items_sent"], data["items_skipped"])
    assert record["base_url"] == data["scope"]["base_url"]


def test_shadow_demo_reports_what_chaining_would_save(tmp_path: Path) -> None:
    """In shadow mode everything goes out in full and the table shows the would-be anchors."""
    proc = _demo(tmp_path, "--mode", "shadow", "--store", "memory", "--turns", "2", "--events")
    lines = proc.stdout.splitlines()

    assert 0 == proc.returncode, proc.stderr
    assert re.search(r"shadow\s+would chain\s+resp_\w+…\s+6/6\s", _row(lines, 2))
    assert re.search(r"bytes sent ([\d,]+) vs \1 stateless \(100%\): saved 0", proc.stdout)
    assert re.search(r"shadow: chaining would have sent [\d,]+ \(\d\d?% of stateless\)", proc.stdout)
    assert "nothing is left for 'anchortrack explain' to read" in proc.stdout
    assert re.search(
        r"\n        · info    anchortrack\.shadow_planned would_chain=True reason=chained ", proc.stdout
    )
    assert not (tmp_path / "anchortrack" / "demo.json").exists()
