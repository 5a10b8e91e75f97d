"""
Store specs are checked where they are written (``wrap(store=...)``, the
command line's ``--store``): the documented spellings only, a hint naming the
closest one otherwise, and nothing created that the user did not name.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import openai
import pytest

import anchortrack
from anchortrack.stores import MemoryStore, SQLiteStore, open_store
from anchortrack.stores._open import closest_spec


ROOT = Path(__file__).resolve().parents[2]

MISSPELLED = [
    ("Memory", "memory"),
    ("memory ", "memory"),
    (" memory", "memory"),
    ("MEMORY", "memory"),
    ("memroy", "memory"),
    (":memory:", "memory"),
    ("sqlite://anchors2.db", "sqlite:anchors2.db"),
    ("sqlite:///tmp/anchors.db", "sqlite:/tmp/anchors.db"),
    ("SQLite:anchors.db", "sqlite:anchors.db"),
    ("sqlite3:anchors.db", "sqlite:anchors.db"),
    ("sqlite:anchors.db ", "sqlite:anchors.db"),
    ("anchors.db", "sqlite:anchors.db"),
    ("Redis://localhost:6379/0", "redis://localhost:6379/0"),
    ("redis:localhost:6379", "redis://localhost:6379"),
    ("unix:/tmp/redis.sock", "unix:///tmp/redis.sock"),
]


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run in an empty directory, so that a store created by mistake would show."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _client() -> openai.OpenAI:
    return openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="test", max_retries=0)


@pytest.mark.parametrize(("spec", "meant"), MISSPELLED)
def test_a_misspelled_spec_fails_at_wrap_naming_the_closest_one(in_tmp: Path, spec: str, meant: str) -> None:
    """wrap() refuses it and names the spelling meant; no file or directory appears."""
    with pytest.raises(TypeError) as error:
        anchortrack.wrap(_client(), store=spec)

    assert f"store={spec!r} is not a store spec (did you mean store={meant!r}?)" in str(error.value)
    assert meant == closest_spec(spec)
    with pytest.raises(ValueError, match=f"did you mean {meant!r}"):
        open_store(spec)
    assert [] == list(in_tmp.iterdir())
    assert not Path("/anchors2.db").exists()


def test_a_missing_directory_is_an_error_not_created(tmp_path: Path) -> None:
    """sqlite:PATH creates the file, never a directory the user did not make."""
    missing = tmp_path / "nonexistent_dir"
    with pytest.raises(FileNotFoundError, match="nonexistent_dir"):
        anchortrack.wrap(_client(), store=f"sqlite:{missing / 'x.db'}")

    assert not missing.exists()
    with pytest.raises(IsADirectoryError):
        open_store(f"sqlite:{tmp_path}")


def test_the_documented_spellings_open(tmp_path: Path) -> None:
    """memory, sqlite:PATH (relative, absolute, with ~) still open."""
    assert isinstance(anchortrack.tracker(anchortrack.wrap(_client(), store="memory")).store, MemoryStore)
    for spec in (
        f"sqlite:{tmp_path / 'a.db'}",
        "sqlite:~/" + os.path.relpath(tmp_path / "b.db", Path.home()),
    ):
        store = open_store(spec)
        assert isinstance(store, SQLiteStore)
        store.close()
    assert not list(Path.home().glob("sqlite*"))


def test_nothing_close_gets_no_guess() -> None:
    """A spec far from every spelling is refused without a suggestion."""
    assert None is closest_spec("postgres://db/anchors")
    with pytest.raises(ValueError, match="unknown store 'postgres://db/anchors': expected memory") as error:
        open_store("postgres://db/anchors")
    assert "did you mean" not in str(error.value)


@pytest.mark.parametrize(
    ("spec", "meant"), [("Memory", "memory"), ("sqlite://anchors2.db", "sqlite:anchors2.db")]
)
def test_the_command_line_store_option_names_the_closest_spelling(
    in_tmp: Path, spec: str, meant: str
) -> None:
    """``anchortrack demo --store`` with a misspelled spec: one line naming the spelling meant, exit 2."""
    env = {**os.environ, "XDG_CACHE_HOME": str(in_tmp / "cache"), "OPENAI_API_KEY": ""}
    proc = subprocess.run(
        [sys.executable, "-m", "anchortrack", "demo", "--store", spec, "--turns", "1"],
        cwd=in_tmp,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert 2 == proc.returncode, proc.stderr
    assert f"did you mean {meant!r}" in proc.stderr
    assert 1 == len(proc.stderr.strip().splitlines())
    assert not (in_tmp / "anchors2.db").exists()
    assert not Path("/anchors2.db").exists()
