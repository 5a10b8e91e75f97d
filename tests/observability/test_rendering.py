"""
Warnings say why whatever the application did about logging: nothing, ``logging.basicConfig``,
the stdlib recipe of docs/events.md, or structlog rendering JSON.

Each case runs in its own interpreter, so no configuration leaks between them (or into this
process), and the output is exactly what a user would see.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest


ROOT = Path(__file__).parents[2]
SECRET = "my card is 4111 1111 1111 1111"

#: A tracked call with a mistyped ANCHORTRACK_MODE, then two whose store is down (the first
#: failure makes it suspect, the second call's probe confirms the outage).
SCRIPT = f"""
import logging, os, sys

setup = sys.argv[1]
if setup == "stdlib":
    logging.basicConfig()
elif setup == "recipe":
    logging.basicConfig()
    logging.getLogger("anchortrack").setLevel(logging.DEBUG)
elif setup == "structlog":
    import structlog
    structlog.configure(
        processors=[structlog.processors.add_log_level, structlog.processors.JSONRenderer()],
        wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
    )

from anchortrack import Tracker
from tests.helpers import SCOPE, BreakableStore, assistant, response, user

store = BreakableStore()
tracker = Tracker(store)
history = [user({SECRET!r}), assistant("noted"), user("and?")]
send = lambda body: response([assistant("ok")])
os.environ["ANCHORTRACK_MODE"] = "chain"
tracker._calls.call({{"model": "m", "input": history}}, lambda: SCOPE, send)
del os.environ["ANCHORTRACK_MODE"]
store.broken = True
tracker._calls.call({{"model": "m", "input": history}}, lambda: SCOPE, send)
tracker._calls.call({{"model": "m", "input": history}}, lambda: SCOPE, send)
"""

MODE_INVALID = (
    "anchortrack.mode_invalid variable='ANCHORTRACK_MODE' value='chain' expected='chained, shadow, off' "
    "using='off'"
)
STORE_DEGRADED = (
    "anchortrack.store_degraded store='memory' operation='find' error='ConnectionError' retry_in=1.0"
)


def _stderr(setup: str) -> str:
    env = dict(os.environ)  # the suite has removed ANCHORTRACK_MODE (tests/conftest.py)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, setup],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert 0 == proc.returncode, proc.stderr
    assert "" == proc.stdout
    assert "4111" not in proc.stderr  # never item content
    return proc.stderr


def test_no_configuration_at_all() -> None:
    """Python's last-resort handler prints the warnings with their keys (and nothing below WARNING)."""
    assert [MODE_INVALID, STORE_DEGRADED] == _stderr("none").splitlines()


def test_stdlib_basic_config() -> None:
    """logging.basicConfig(): the default format shows the keys too."""
    assert [f"WARNING:anchortrack:{MODE_INVALID}", f"WARNING:anchortrack:{STORE_DEGRADED}"] == _stderr(
        "stdlib"
    ).splitlines()


def test_the_stdlib_recipe_of_the_docs_shows_reasons() -> None:
    """The debug recipe of docs/events.md shows reason and diverged_at, not just the event name."""
    lines = _stderr("recipe").splitlines()

    assert f"WARNING:anchortrack:{MODE_INVALID}" == lines[0]
    passed = "anchortrack.request_passed_through mode='off' decision='passthrough' reason='mode_off' "
    assert lines[1].startswith(f"DEBUG:anchortrack:{passed}")
    stateless = "request_stateless mode='chained' decision='stateless' reason='store_unavailable' "
    assert [line for line in lines if line.startswith(f"DEBUG:anchortrack:anchortrack.{stateless}")]
    assert any("items_sent=3 " in line for line in lines if stateless in line)


@pytest.mark.parametrize("event", ["mode_invalid", "store_degraded"])
def test_structlog_json(event: str) -> None:
    """An application that configured structlog gets its own JSON, keys included."""
    events = {e["event"]: e for e in map(json.loads, _stderr("structlog").splitlines())}

    expected = {
        "mode_invalid": {
            "variable": "ANCHORTRACK_MODE",
            "value": "chain",
            "expected": "chained, shadow, off",
            "using": "off",
            "level": "warning",
        },
        "store_degraded": {
            "store": "memory",
            "operation": "find",
            "error": "ConnectionError",
            "retry_in": 1.0,
            "level": "warning",
        },
    }[event]
    assert {"event": f"anchortrack.{event}", **expected} == events[f"anchortrack.{event}"]


def test_an_unreachable_redis_is_accepted_and_its_warning_names_it_without_the_password() -> None:
    """
    wrap() does not connect: a Redis URL nobody listens on is accepted; the one warning of the outage
    names the store by its URL, without the password in it.
    """
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    script = f"""
import openai, anchortrack
from tests.helpers import SCOPE, assistant, response, user

client = anchortrack.wrap(
    openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="k"), store="redis://:hunter2@127.0.0.1:{port}/0"
)
tracker = anchortrack.tracker(client)
tracker.store_cooldown = 0.0
history = [user("hi"), assistant("noted"), user("and?")]
send = lambda body: response([assistant("ok")])
for _ in range(2):
    tracker._calls.call({{"model": "m", "input": history}}, lambda: SCOPE, send)
"""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    proc = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert (0, "") == (proc.returncode, proc.stdout), proc.stderr
    assert [
        f"anchortrack.store_degraded store='redis://127.0.0.1:{port}/0' operation='find' "
        "error='ConnectionError' retry_in=0.0"
    ] == proc.stderr.splitlines()


def test_a_mistyped_mode_names_the_valid_ones_in_code_and_in_the_variable_alike() -> None:
    """wrap(mode="chain") raises, ANCHORTRACK_MODE=of warns: both list the valid values, in the same words."""
    script = """
import os, openai, anchortrack
from tests.helpers import SCOPE, assistant, response, user

try:
    anchortrack.wrap(openai.OpenAI(api_key="k"), mode="chain")
except ValueError as error:
    print(error)
os.environ["ANCHORTRACK_MODE"] = "of"
tracker = anchortrack.tracker(anchortrack.wrap(openai.OpenAI(api_key="k")))
send = lambda body: response([assistant("ok")])
tracker._calls.call({"model": "m", "input": [user("hi")]}, lambda: SCOPE, send)
"""
    env = {k: v for k, v in os.environ.items() if k != "ANCHORTRACK_MODE"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    proc = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert 0 == proc.returncode, proc.stderr
    assert "unknown anchortrack mode 'chain'; expected one of: chained, shadow, off\n" == proc.stdout
    assert [
        "anchortrack.mode_invalid variable='ANCHORTRACK_MODE' value='of' expected='chained, shadow, off' "
        "using='off'"
    ] == proc.stderr.splitlines()
