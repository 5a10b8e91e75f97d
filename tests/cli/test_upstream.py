"""`anchortrack serve --upstream …` and `anchortrack demo --upstream …` against the fake provider."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from anchortrack._cli import main
from anchortrack._cli.serve import register

from ..upstream.helpers import API_KEY
from ..upstream.provider import FakeProvider, Reply


ROOT = Path(__file__).parents[2]


@pytest.fixture(name="provider")
def _provider() -> Iterator[FakeProvider]:
    """A fake Chat Completions provider on a loopback port."""
    fake = FakeProvider()
    fake.start()
    yield fake
    fake.stop()


def test_serve_upstream_flags() -> None:
    """--upstream, --upstream-model and --upstream-timeout parse; none of them by default."""
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())

    defaults = parser.parse_args(["serve"])
    custom = parser.parse_args(
        ["serve", "--upstream", "http://h:1/v1", "--upstream-model", "qwen3", "--upstream-timeout", "2.5"]
    )

    assert (defaults.upstream, defaults.upstream_model, defaults.upstream_timeout) == (None, None, 120.0)
    assert (custom.upstream, custom.upstream_model, custom.upstream_timeout) == (
        "http://h:1/v1",
        "qwen3",
        2.5,
    )


@pytest.mark.parametrize("seconds", ["0", "-1", "inf", "soon"])
def test_serve_refuses_an_upstream_timeout_that_is_no_positive_number(
    seconds: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """--upstream-timeout takes seconds above 0, as every other timeout flag does (exit 2, one line)."""
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())

    with pytest.raises(SystemExit) as exited:
        parser.parse_args(["serve", "--upstream", "http://h:1/v1", "--upstream-timeout", seconds])

    assert 2 == exited.value.code
    assert f"expected a number of seconds above 0, got {seconds!r}" in capsys.readouterr().err


def test_anchortrack_serve_upstream_answers_through_the_provider(provider: FakeProvider) -> None:
    """The CLI server forwards to the provider with the key from the environment and the model override."""
    env = {**os.environ, "ANCHORTRACK_UPSTREAM_API_KEY": API_KEY}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    command = [sys.executable, "-m", "anchortrack", "serve", "--port", "0"]
    command += ["--upstream", provider.base_url, "--upstream-model", "local-model"]
    process = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    provider.script(Reply(content="first"), Reply(content="second"))
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        base_url = line.split(" at ")[1].split(" ")[0]
        with openai.OpenAI(base_url=base_url, api_key="k", max_retries=0) as client:
            first = client.responses.create(model="gpt-5", input="hi")
            second = client.responses.create(model="gpt-5", input="more", previous_response_id=first.id)
    finally:
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=30)

    assert process.returncode == 0
    assert f"upstream: {provider.base_url}" in line
    assert API_KEY not in line + stderr
    assert (first.output_text, second.output_text, second.model) == ("first", "second", "local-model")
    assert [body["model"] for body in provider.bodies] == ["local-model", "local-model"]
    assert provider.authorizations == [f"Bearer {API_KEY}"] * 2
    assert provider.messages[1] == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "first"},
        {"role": "user", "content": "more"},
    ]


def test_demo_runs_against_the_provider(
    provider: FakeProvider,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`anchortrack demo --upstream URL --model M`: the agent's turns go through the provider, chained."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANCHORTRACK_MODE", "ANCHORTRACK_UPSTREAM_API_KEY"):
        monkeypatch.delenv(name, raising=False)

    code = main(
        ["demo", "--upstream", provider.base_url, "--model", "m1", "--store", "memory", "--turns", "3"]
    )
    out = capsys.readouterr().out
    flat = " ".join(out.split())  # the demo wraps its paragraphs to the terminal's width

    assert code == 0, out
    assert f"in front of {provider.base_url} · model m1" in flat
    assert "the server's context was exactly the agent's history on 3 of 3 calls" in flat
    assert len(provider.bodies) == 3
    assert [m["role"] for m in provider.messages[-1]].count("user") == 3
    assert all("!call" not in str(messages) for messages in provider.messages)


def test_demo_upstream_needs_a_model(capsys: pytest.CaptureFixture[str]) -> None:
    """Without --model the demo cannot know the provider's model name."""
    assert main(["demo", "--upstream", "http://127.0.0.1:9/v1", "--store", "memory"]) == 2
    assert "--upstream needs --model" in capsys.readouterr().err
