"""What ``anchortrack.stores`` exports, `open_store`'s spellings, and that it loads redis only on demand."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

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
    open_store,
)
from tests._redis import RedisServer


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
        "open_store",
    } == set(anchortrack.stores.__all__)
    assert (_base.Anchor, _base.AnchorStore, _base.DEFAULT_TTL) == (Anchor, AnchorStore, DEFAULT_TTL)
    assert issubclass(SchemaVersionError, Exception)
    for cls in (MemoryStore, SQLiteStore, RedisStore):
        assert cls.__doc__


def test_sync_methods_and_native_async_twins() -> None:
    """Every store has the four sync methods and both closes; only Redis, with a native async client, has
    async twins (as coroutines): an async client runs the others' sync methods off its event loop."""
    import inspect

    for cls in (MemoryStore, SQLiteStore, RedisStore):
        assert all(callable(getattr(cls, name)) for name in ("find", "get", "put", "evict", "close"))
        assert inspect.iscoroutinefunction(cls.aclose)
        twins = [getattr(cls, "a" + name, None) for name in ("find", "get", "put", "evict")]
        if cls is RedisStore:
            assert all(inspect.iscoroutinefunction(twin) for twin in twins)
        else:
            assert [None] * 4 == twins, cls


def test_open_store_spellings(tmp_path: Path, redis_server: RedisServer) -> None:
    """``memory``, ``sqlite:PATH`` (the file created in an existing directory) and Redis URLs open stores."""
    path = tmp_path / "anchors.db"
    anchor = Anchor(b"v" * 16, "resp_1", 1, 0.0, 2e9)
    stores = [open_store("memory"), open_store(f"sqlite:{path}"), open_store(redis_server.url)]
    try:
        for store in stores:
            store.put("0123456789abcdef", anchor)

        assert [MemoryStore, SQLiteStore, RedisStore] == [type(store) for store in stores]
        assert [anchor] * 3 == [store.get("0123456789abcdef", "resp_1") for store in stores]
        assert path.is_file()
    finally:
        for store in stores:
            store.close()


def test_open_store_home_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``~`` in a SQLite path is the user's home directory."""
    monkeypatch.setenv("HOME", str(tmp_path))
    store = open_store("sqlite:~/anchors.db")
    store.put("0123456789abcdef", Anchor(b"v" * 16, "resp_1", 1, 0.0, 2e9))
    store.close()

    assert (tmp_path / "anchors.db").is_file()


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "unknown store ''"),
        ("sqlite:", "sqlite: needs a path"),
        ("postgres://db", "expected memory, sqlite:PATH or redis://"),
        ("Memory", "unknown store 'Memory'"),
    ],
)
def test_open_store_refuses_other_spellings(spec: str, message: str) -> None:
    """Anything else is a ValueError that names the accepted spellings."""
    with pytest.raises(ValueError, match=message):
        open_store(spec)


def test_importing_stores_does_not_import_redis() -> None:
    """redis is imported only when RedisStore is first used."""
    done = run(
        "import sys, anchortrack.stores as s\n"
        "assert 'redis' not in sys.modules, 'redis imported early'\n"
        "s.RedisStore\n"
        "assert 'redis' in sys.modules\n"
    )

    assert 0 == done.returncode, done.stderr


def test_missing_redis_fails_when_used_not_when_imported() -> None:
    """Without the extra, the README's import line works; using RedisStore says how to install it."""
    done = run(
        "import sys\n"
        "sys.modules['redis'] = None\n"
        "from anchortrack.stores import MemoryStore, SQLiteStore, RedisStore\n"
        "print(isinstance(MemoryStore(), RedisStore))\n"
        "for use in (lambda: RedisStore(), lambda: RedisStore.from_url('redis://localhost')):\n"
        "    try:\n"
        "        use()\n"
        "    except ImportError as error:\n"
        "        print(error)\n"
    )

    assert 0 == done.returncode, done.stderr
    lines = done.stdout.splitlines()
    assert "False" == lines[0]
    assert 3 == len(lines)
    assert all("pip install 'anchortrack[redis]'" in line for line in lines[1:])


def test_unknown_attribute() -> None:
    """Other missing names still raise AttributeError."""
    with pytest.raises(AttributeError, match="NoSuchStore"):
        anchortrack.stores.NoSuchStore  # noqa: B018
