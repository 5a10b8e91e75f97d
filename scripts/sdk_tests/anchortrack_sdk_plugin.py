"""
A pytest plugin for running the openai SDK's own test suite against anchortrack.

Loaded with ``-p anchortrack_sdk_plugin`` by ``scripts/sdk-tests``; it changes
no SDK test.

* ``--anchortrack-wrap``: every ``openai.OpenAI`` / ``openai.AsyncOpenAI``
  (subclasses included) the tests construct is replaced by
  ``anchortrack.wrap(client)`` — the client exactly as constructed, then
  wrapped, as a user would. Clients made by ``copy()`` / ``with_options()``
  on a wrapped client are the wrapped client's own copies.
* ``--anchortrack-outcomes=FILE``: write each test's outcome (and how many
  clients were wrapped) to FILE as JSON.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pytest


_SKIP_INIT = "_anchortrack_sdk_skip_init"
_wrapped = 0


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("anchortrack-sdk")
    group.addoption("--anchortrack-wrap", action="store_true", help="wrap every client the tests construct")
    group.addoption("--anchortrack-outcomes", default=None, help="write per-test outcomes to this JSON file")


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--anchortrack-wrap"):
        _install()
    path = config.getoption("--anchortrack-outcomes")
    if path:
        config.pluginmanager.register(_Outcomes(Path(path)), "anchortrack-sdk-outcomes")


def _install() -> None:
    """Make constructing an openai client return ``anchortrack.wrap()`` of it."""
    import openai

    import anchortrack

    def __new__(cls: type[Any], *args: Any, **kwargs: Any) -> Any:
        global _wrapped
        client = object.__new__(cls)
        if "_anchortrack_base" in cls.__dict__:
            # A tracked class: copy()/with_options() on a wrapped client.
            return client
        cls.__init__(client, *args, **kwargs)
        wrapped = anchortrack.wrap(client)
        _guard_init(type(wrapped))
        # Python calls __init__ again on what __new__ returns; it must not
        # construct the wrapped client a second time.
        wrapped.__dict__[_SKIP_INIT] = True
        _wrapped += 1
        return wrapped

    for base in (openai.OpenAI, openai.AsyncOpenAI):
        base.__new__ = staticmethod(__new__)  # type: ignore[assignment]


def _guard_init(tracked: type[Any]) -> None:
    if "_anchortrack_sdk_guarded" in tracked.__dict__:
        return

    # With the SDK's signature: the SDK's tests compare it with copy()'s.
    @functools.wraps(tracked.__init__)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if self.__dict__.pop(_SKIP_INIT, False):
            return
        super(tracked, self).__init__(*args, **kwargs)

    tracked.__init__ = __init__  # type: ignore[misc]
    tracked._anchortrack_sdk_guarded = True  # type: ignore[attr-defined]


class _Outcomes:
    """Collect one outcome per test: passed, failed, error, skipped, xfailed, xpassed."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.outcomes: dict[str, str] = {}

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        current = self.outcomes.get(report.nodeid)
        if report.when == "call":
            if hasattr(report, "wasxfail"):
                outcome = "xfailed" if report.skipped else "xpassed"
            else:
                outcome = report.outcome
        elif report.failed:
            outcome = "error"
        elif report.skipped:
            outcome = "skipped"
        else:
            return
        if current != "error":
            self.outcomes[report.nodeid] = outcome

    @pytest.hookimpl
    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.outcomes[report.nodeid] = "error"

    @pytest.hookimpl
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self.path.write_text(json.dumps({"wrapped_clients": _wrapped, "outcomes": self.outcomes}, indent=0))
