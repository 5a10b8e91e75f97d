"""
The settings table (`anchortrack._settings.SETTINGS`): each row's variable, check, default and
fallback, and that `wrap()` and `Tracker()` take exactly its rows, None meaning "use the setting".
"""

from __future__ import annotations

import importlib.util
import inspect
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs
import openai
import pytest
from structlog.testing import capture_logs

import anchortrack
from anchortrack import Tracker
from anchortrack._settings import ANY_TEXT, SETTINGS, STORE_TIMEOUT, TRACKER_SETTINGS, Setting

from .helpers import DictStore


ROOT = Path(__file__).resolve().parent.parent
#: Values some setting refuses: any setting that takes text at all refuses one of them.
PROBES = ("not-a-value", "-1", "nan")


@contextmanager
def _variable(setting: Setting[Any], name: str) -> Iterator[Setting[Any]]:
    """*setting* with *name* filled in as its variable, as a newcomer would (rows are frozen)."""
    before = setting.env
    object.__setattr__(setting, "env", name)
    try:
        yield setting
    finally:
        object.__setattr__(setting, "env", before)


def _with_variable(setting: Setting[Any]) -> Setting[Any]:
    """*setting*, or a copy of it with a variable filled in when it has none yet."""
    return setting if setting.env else attrs.evolve(setting, env=f"ANCHORTRACK_TEST_{setting.name.upper()}")


@pytest.mark.parametrize("row", SETTINGS, ids=lambda s: s.name)
def test_a_bad_variable_warns_once_naming_it_then_falls_back(
    row: Setting[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """
    For every row (one without a variable gets one, as filling it in would): a value its check refuses
    logs the row's event once, naming the variable, the value and the valid values, and the fallback
    is used; a row whose every text is valid says so.
    """
    setting = _with_variable(row)
    assert setting.env is not None
    refused = []
    for probe in PROBES:
        monkeypatch.setenv(setting.env, probe)
        with capture_logs() as logs:
            first, again = setting.value(), setting.value()
        if logs:
            refused.append(probe)
            assert [
                {
                    "event": setting.event,
                    "log_level": "warning",
                    "variable": setting.env,
                    "value": probe,
                    "expected": setting.valid,
                    "using": getattr(setting.fallback, "value", setting.fallback),
                }
            ] == logs
            assert first is again is setting.fallback
        else:
            assert first == setting.check(setting.parse(probe), "", "")
    assert bool(refused) == (setting.valid != ANY_TEXT), f"{setting.name}: refuses {refused}"


@pytest.mark.parametrize("row", [s for s in SETTINGS if s.valid != ANY_TEXT], ids=lambda s: s.name)
def test_a_good_variable_is_the_value_and_code_wins_unless_the_variable_does(
    row: Setting[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The variable's value is used when code gives none; a value in code wins, except over ``env_wins``."""
    setting = _with_variable(row)
    assert setting.env is not None
    text = str(getattr(setting.default, "value", setting.default)).lower()
    monkeypatch.setenv(setting.env, text)
    other = {"mode": "shadow", "store_timeout": 9.0, "store_cooldown": 9.0}.get(
        setting.name, not setting.default
    )

    with capture_logs() as logs:
        assert setting.default == setting.value()
        in_force = setting.value(other)

    assert [] == logs
    assert in_force == (setting.default if setting.env_wins else setting.check(other, "", ""))


def test_filling_in_a_variable_is_all_a_new_one_needs(
    monkeypatch: pytest.MonkeyPatch, raw_client: openai.OpenAI
) -> None:
    """
    A variable filled in on a row that had none (the store timeout's, as a newcomer's change would):
    the tracker reads it, ``store_timeout=`` in code wins, and docs/operations.md lists it.
    """
    variable = "ANCHORTRACK_TEST_STORE_TIMEOUT"
    monkeypatch.setenv(variable, "2.5")
    with _variable(STORE_TIMEOUT, variable):
        assert 2.5 == Tracker(DictStore()).store_timeout
        assert 2.5 == anchortrack.tracker(anchortrack.wrap(raw_client)).store_timeout
        assert 3.0 == anchortrack.tracker(anchortrack.wrap(raw_client, store_timeout=3)).store_timeout
        spec = importlib.util.spec_from_file_location("docs_tables", ROOT / "scripts" / "docs_tables.py")
        assert spec is not None
        assert spec.loader is not None
        tables = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(tables)
        page = tables.render((ROOT / "docs" / "operations.md").read_text(encoding="utf-8"))
        assert f"| `{variable}` | seconds a store call may take" in page


@pytest.mark.parametrize("function", [anchortrack.wrap, Tracker])
def test_wrap_and_tracker_take_the_rows_each_none_by_default(function: Any) -> None:
    """Every keyword of wrap() and Tracker() but the store (and a clock) is a row, None by default."""
    parameters = inspect.signature(function).parameters
    settings = {name: p.default for name, p in parameters.items() if name not in ("client", "store", "clock")}

    assert set(settings) <= set(TRACKER_SETTINGS)
    assert {None} == set(settings.values())
    if function is Tracker:
        assert set(settings) == set(TRACKER_SETTINGS)


def test_every_row_says_what_it_sets_and_its_valid_values() -> None:
    """A row's text is what docs/operations.md and its warning show."""
    for setting in SETTINGS:
        assert setting.sets
        assert setting.valid
        assert setting.read
    assert len({s.name for s in SETTINGS}) == len(SETTINGS)
    assert len({s.env for s in SETTINGS if s.env}) == len([s for s in SETTINGS if s.env])
