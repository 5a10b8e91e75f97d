"""What ``anchortrack.stores`` exports, and that it loads redis only on demand."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import anchortrack.stores
from anchortrack.stores import (
    DEFAULT_TTL,
    Anchor,
    AnchorStore,
    MemoryStore,
    RedisStore,
    SchemaVersionError,
    SQLiteStore,
    _base,
)


ROOT = Path(__file__).resolve().parents[2]


def run(code: str) -> subprocess.CompletedProcess[str]:
    """Run *code* in a fresh interpreter with the repository importable."""
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        timeout=60,
        check=False,
    )


def test_public_names() -> None:
    """The documented names are exported, and are the contract's own."""
    assert {
        "DEFAULT_TTL",
        "Anchor",
        "AnchorStore",
        "MemoryStore",
        "RedisStore",
        "SQLiteStore",
        "SchemaVersionError",
    } == set(anchortrack.stores.__all__)
    assert (_base.Anchor, _base.AnchorStore, _base.DEFAULT_TTL) == (Anchor, AnchorStore, DEFAULT_TTL)
    assert issubclass(SchemaVersionError, Exception)
    for cls in (MemoryStore, SQLiteStore, RedisStore):
        assert cls.__doc__


def test_sync_and_async_twins_match() -> None:
    """Every store has both halves of the protocol, the async ones as coroutines."""
    import inspect

    for cls in (MemoryStore, SQLiteStore, RedisStore):
        for name in ("find", "get", "put", "evict", "close"):
            assert callable(getattr(cls, name))
            assert inspect.iscoroutinefunction(getattr(cls, "a" + name)), (cls, name)


def test_importing_stores_does_not_import_redis() -> None:
    """redis is imported only when RedisStore is first used."""
    done = run(
        "import sys, anchortrack.stores as s\n"
        "assert 'redis' not in sys.modules, 'redis imported early'\n"
        "s.RedisStore\n"
        "assert 'redis' in sys.modules\n"
    )

    assert 0 == done.returncode, done.stderr


def test_missing_redis_gives_a_clear_import_error() -> None:
    """Without the extra, importing RedisStore says how to install it."""
    done = run(
        "import sys\n"
        "sys.modules['redis'] = None\n"
        "from anchortrack.stores import MemoryStore\n"
        "try:\n"
        "    from anchortrack.stores import RedisStore\n"
        "except ImportError as error:\n"
        "    print(error)\n"
    )

    assert 0 == done.returncode, done.stderr
    assert "pip install 'anchortrack[redis]'" in done.stdout


def test_unknown_attribute() -> None:
    """Other missing names still raise AttributeError."""
    import pytest

    with pytest.raises(AttributeError, match="NoSuchStore"):
        anchortrack.stores.NoSuchStore  # noqa: B018
