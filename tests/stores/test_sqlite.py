"""
`SQLiteStore` beyond the contract: restarts, several processes, schema
migrations, sweeping, no content at rest, and failing fast.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from anchortrack.stores import SchemaVersionError, SQLiteStore
from anchortrack.stores import sqlite as schema

from ..helpers import FakeClock
from .helpers import SCOPE, make_anchor, view


ROOT = Path(__file__).resolve().parents[2]


def run_python(code: str, *args: str, timeout: float = 60) -> str:
    """Run *code* in a fresh interpreter; return its stdout."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )
    assert 0 == done.returncode, done.stderr
    return done.stdout


def rows(path: Path) -> list[tuple[object, ...]]:
    """Every row of the anchors table, read with a plain connection."""
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT * FROM anchors ORDER BY response_id").fetchall()


def test_anchors_survive_a_restart(tmp_path: Path, clock: FakeClock) -> None:
    """Close the store, open a new one on the file: the anchors are there."""
    a = make_anchor("a", clock.now)
    store = SQLiteStore(tmp_path / "a.db", clock=clock)
    store.put(SCOPE, a)
    store.close()

    reopened = SQLiteStore(tmp_path / "a.db", clock=clock)

    assert {a.view: a} == reopened.find(SCOPE, [a.view])
    assert a == reopened.get(SCOPE, a.response_id)
    reopened.close()


def test_anchors_survive_a_killed_process(tmp_path: Path) -> None:
    """A process that records and dies without closing loses nothing."""
    path = tmp_path / "a.db"
    run_python(
        """
        import os, sys, time
        from anchortrack.stores import Anchor, SQLiteStore
        store = SQLiteStore(sys.argv[1])
        now = time.time()
        store.put("0123456789abcdef", Anchor(b"v" * 16, "resp_1", 2, now, now + 60))
        os._exit(0)
        """,
        str(path),
    )

    anchor = SQLiteStore(path).get(SCOPE, "resp_1")

    assert anchor is not None
    assert b"v" * 16 == anchor.view


def test_closed_store_reopens_on_use(tmp_path: Path, clock: FakeClock) -> None:
    """close() releases the connection; the next call opens a new one."""
    store = SQLiteStore(tmp_path / "a.db", clock=clock)
    a = make_anchor("a", clock.now)
    store.put(SCOPE, a)
    store.close()
    store.close()

    assert a == store.get(SCOPE, a.response_id)
    store.close()


def test_in_memory_database(clock: FakeClock) -> None:
    """':memory:' works, for one store object."""
    store = SQLiteStore(":memory:", clock=clock)
    a = make_anchor("a", clock.now)
    store.put(SCOPE, a)

    assert a == store.get(SCOPE, a.response_id)


_WORKER = """
import sys, time
from anchortrack.stores import Anchor, SQLiteStore

path, me, n, procs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
store = SQLiteStore(path, timeout=5.0)
now = time.time()
def anchor(p, i):
    view = f"{p}-{i}".encode().ljust(16, b".")
    return Anchor(view, f"resp_{p}_{i}", i, now, now + 600)
for i in range(n):
    store.put("0123456789abcdef", anchor(me, i))
    store.put("0123456789abcdef", Anchor(b"shared".ljust(16, b"."), f"resp_shared_{me}", i, now, now + 600))
    store.find("0123456789abcdef", [anchor(p, i).view for p in range(procs)])
everyone = [anchor(p, i) for p in range(procs) for i in range(n)]
deadline = time.monotonic() + 30
while time.monotonic() < deadline:
    found = store.find("0123456789abcdef", [a.view for a in everyone])
    if {a.view: (a.response_id, a.count) for a in everyone} == {
        v: (a.response_id, a.count) for v, a in found.items()
    }:
        print("all", len(found))
        break
    time.sleep(0.05)
else:
    print("missing", len(everyone) - len(found))
"""


def test_three_processes_share_one_file(tmp_path: Path) -> None:
    """Three processes write one file at once; each reads everything written."""
    path, n, procs = tmp_path / "shared.db", 150, 3
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", _WORKER, str(path), str(p), str(n), str(procs)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for p in range(procs)
    ]
    outputs = [w.communicate(timeout=60) for w in workers]

    assert [(f"all {n * procs}\n", "")] * procs == outputs
    assert n * procs + 1 == len(rows(path))
    shared = SQLiteStore(path).find(SCOPE, [b"shared".ljust(16, b".")])
    assert 1 == len(shared)


# -- schema -------------------------------------------------------------------


def test_new_file_gets_the_current_schema(tmp_path: Path, clock: FakeClock) -> None:
    """Opening a new file creates the schema and stamps its version."""
    SQLiteStore(tmp_path / "a.db", clock=clock).find(SCOPE, [view("a")])

    with sqlite3.connect(tmp_path / "a.db") as conn:
        assert len(schema.MIGRATIONS) == conn.execute("PRAGMA user_version").fetchone()[0]
        assert "wal" == conn.execute("PRAGMA journal_mode").fetchone()[0]


def test_older_schema_is_migrated_and_keeps_its_rows(
    tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file opened by code that knows one more schema version is migrated, rows kept."""
    a = make_anchor("a", clock.now, properties=view("p"), mac=view("m"))
    old = SQLiteStore(tmp_path / "a.db", clock=clock)
    old.put(SCOPE, a)
    old.close()
    current = len(schema.MIGRATIONS)
    newer = "ALTER TABLE anchors ADD COLUMN note TEXT; CREATE TABLE extra (x INTEGER)"
    monkeypatch.setattr(schema, "MIGRATIONS", (*schema.MIGRATIONS, newer))

    new = SQLiteStore(tmp_path / "a.db", clock=clock)

    assert a == new.get(SCOPE, a.response_id)
    with sqlite3.connect(tmp_path / "a.db") as conn:
        assert current + 1 == conn.execute("PRAGMA user_version").fetchone()[0]
        conn.execute("SELECT note FROM anchors").fetchall()
        conn.execute("SELECT x FROM extra").fetchall()


def test_a_file_from_before_parents_gains_them(tmp_path: Path, clock: FakeClock) -> None:
    """A version-2 file (no parents) migrates: its rows read as parentless, and new ones chain."""
    path = tmp_path / "a.db"
    conn = sqlite3.connect(path, isolation_level=None)
    schema.migrate(conn, schema.MIGRATIONS[:2])
    a = make_anchor("a", clock.now, properties=view("p"))
    conn.execute(
        "INSERT INTO anchors VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (SCOPE, a.view, a.response_id, a.count, a.created_at, a.expires_at, a.properties, a.mac),
    )
    conn.close()
    store = SQLiteStore(path, clock=clock)
    child = make_anchor("b", clock.now, parent=a.response_id)

    assert a == store.get(SCOPE, a.response_id)
    store.put(SCOPE, child)
    store.evict(SCOPE, a.response_id)

    assert {} == store.find(SCOPE, [a.view, child.view])
    assert 3 == schema.schema_version(sqlite3.connect(path))


def test_failed_migration_changes_nothing(tmp_path: Path, clock: FakeClock) -> None:
    """A migration that fails rolls back, version included."""
    SQLiteStore(tmp_path / "a.db", clock=clock).find(SCOPE, [view("a")])
    conn = sqlite3.connect(tmp_path / "a.db", isolation_level=None)
    broken = (*schema.MIGRATIONS, "CREATE TABLE extra (x); SELECT * FROM missing")

    with pytest.raises(sqlite3.OperationalError, match="missing"):
        schema.migrate(conn, broken)

    assert len(schema.MIGRATIONS) == schema.schema_version(conn)
    assert [] == conn.execute("SELECT name FROM sqlite_master WHERE name = 'extra'").fetchall()
    conn.close()


def test_version_1_rows_are_dropped_when_properties_and_macs_arrive(tmp_path: Path, clock: FakeClock) -> None:
    """Rows from before version 2 have no properties digest, so they must not be chained from."""
    conn = sqlite3.connect(tmp_path / "a.db", isolation_level=None)
    schema.migrate(conn, schema.MIGRATIONS[:1])
    a = make_anchor("a", clock.now)
    conn.execute(
        "INSERT INTO anchors VALUES (?, ?, ?, ?, ?, ?)",
        (SCOPE, a.view, a.response_id, a.count, a.created_at, a.expires_at),
    )
    conn.close()

    store = SQLiteStore(tmp_path / "a.db", clock=clock)

    assert {} == store.find(SCOPE, [a.view])
    assert None is store.get(SCOPE, a.response_id)
    with sqlite3.connect(tmp_path / "a.db") as check:
        assert len(schema.MIGRATIONS) == check.execute("PRAGMA user_version").fetchone()[0]
        columns = [c[1] for c in check.execute("PRAGMA table_info(anchors)")]
    assert ["properties", "mac"] == columns[6:8]
    store.put(SCOPE, a)
    assert a == store.get(SCOPE, a.response_id)


def test_rows_of_other_types_are_treated_as_absent(tmp_path: Path, clock: FakeClock) -> None:
    """A row another writer filled with values of the wrong types reads as no anchor, not an error."""
    store = SQLiteStore(tmp_path / "a.db", clock=clock)
    a, b = make_anchor("a", clock.now), make_anchor("b", clock.now)
    store.put(SCOPE, a)
    store.put(SCOPE, b)
    with sqlite3.connect(tmp_path / "a.db") as conn:
        wrong = "UPDATE anchors SET properties = 'text', mac = 42 WHERE response_id = ?"
        conn.execute(wrong, (a.response_id,))

    assert {b.view: b} == store.find(SCOPE, [a.view, b.view])
    assert None is store.get(SCOPE, a.response_id)


def test_newer_schema_is_refused(tmp_path: Path, clock: FakeClock) -> None:
    """A file from a newer anchortrack raises a clear SchemaVersionError."""
    with sqlite3.connect(tmp_path / "a.db") as conn:
        conn.execute("PRAGMA user_version = 99")
    store = SQLiteStore(tmp_path / "a.db", clock=clock)

    with pytest.raises(SchemaVersionError, match="version 99 is newer"):
        store.find(SCOPE, [view("a")])
    assert issubclass(SchemaVersionError, sqlite3.DatabaseError)


# -- storage ------------------------------------------------------------------


def test_expired_rows_are_deleted(tmp_path: Path, clock: FakeClock) -> None:
    """Writes sweep expired rows every sweep_every writes (and first after opening)."""
    store = SQLiteStore(tmp_path / "a.db", clock=clock, sweep_every=3)
    for i in range(5):
        store.put(SCOPE, make_anchor(i, clock.now, ttl=10))
    clock.advance(20)
    store.put(SCOPE, make_anchor("x", clock.now))  # 6th write: not yet swept
    assert 6 == len(rows(tmp_path / "a.db"))

    store.put(SCOPE, make_anchor("y", clock.now))  # 7th write sweeps

    assert 2 == len(rows(tmp_path / "a.db"))
    store.close()
    reopened = SQLiteStore(tmp_path / "a.db", clock=clock)
    clock.advance(1e6)
    reopened.put(SCOPE, make_anchor("z", clock.now))  # first write after opening sweeps
    assert 1 == len(rows(tmp_path / "a.db"))


def test_no_content_at_rest(tmp_path: Path, clock: FakeClock) -> None:
    """I5: the file holds digests, ids, counts and times, nothing else."""
    secret = "the user's secret message"
    store = SQLiteStore(tmp_path / "a.db", clock=clock)
    anchors = [make_anchor(f"{secret} {i}", clock.now, count=i) for i in range(20)]
    anchors += [make_anchor(f"{secret} child", clock.now, parent=anchors[0].response_id)]
    for anchor in anchors:
        store.put(SCOPE, anchor)

    with sqlite3.connect(tmp_path / "a.db") as conn:
        objects = conn.execute("SELECT type, name FROM sqlite_master ORDER BY name").fetchall()
        columns = [c[1] for c in conn.execute("PRAGMA table_info(anchors)")]
    assert [
        ("table", "anchors"),
        ("index", "anchors_by_expiry"),
        ("index", "anchors_by_parent"),
        ("index", "anchors_by_response"),
    ] == objects
    names = [
        "scope",
        "view",
        "response_id",
        "count",
        "created_at",
        "expires_at",
        "properties",
        "mac",
        "parent",
    ]
    assert names == columns
    expected = [
        (SCOPE, a.view, a.response_id, a.count, a.created_at, a.expires_at, a.properties, a.mac, a.parent)
        for a in anchors
    ]
    assert sorted(expected, key=repr) == sorted(rows(tmp_path / "a.db"), key=repr)
    raw = b"".join(p.read_bytes() for p in tmp_path.iterdir())
    assert secret.encode() not in raw
    assert b"secret" not in raw


# -- failing fast -------------------------------------------------------------


def test_locked_file_raises_promptly_and_recovers(tmp_path: Path, clock: FakeClock) -> None:
    """Another connection's exclusive transaction makes writes fail fast."""
    a, b = make_anchor("a", clock.now), make_anchor("b", clock.now)
    store = SQLiteStore(tmp_path / "a.db", clock=clock)
    store.put(SCOPE, a)
    locker = sqlite3.connect(tmp_path / "a.db", isolation_level=None)
    locker.execute("BEGIN EXCLUSIVE")

    started = time.monotonic()
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        store.put(SCOPE, b)
    elapsed = time.monotonic() - started

    assert 0.2 <= elapsed < 1.0
    assert {a.view: a} == store.find(SCOPE, [a.view, b.view])  # WAL: readers still read

    locker.execute("ROLLBACK")
    locker.close()
    store.put(SCOPE, b)  # reconnects and works again

    assert b == store.get(SCOPE, b.response_id)


def test_timeout_is_configurable(tmp_path: Path, clock: FakeClock) -> None:
    """The busy timeout is the constructor's *timeout*."""
    store = SQLiteStore(tmp_path / "a.db", clock=clock, timeout=0.05)
    store.put(SCOPE, make_anchor("a", clock.now))
    locker = sqlite3.connect(tmp_path / "a.db", isolation_level=None)
    locker.execute("BEGIN EXCLUSIVE")

    started = time.monotonic()
    with pytest.raises(sqlite3.OperationalError):
        store.put(SCOPE, make_anchor("b", clock.now))

    assert time.monotonic() - started < 0.2
    locker.close()


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory another (unprivileged) user can reach, unlike tmp_path."""
    path = Path(tempfile.mkdtemp(prefix="anchortrack-ro-"))
    path.chmod(0o755)
    yield path
    path.chmod(0o755)
    shutil.rmtree(path)


def try_put(path: Path) -> tuple[str, float]:
    """Put one anchor in a fresh store on *path*; return the error's text and delay."""
    store, now = SQLiteStore(path), time.time()
    started = time.monotonic()
    try:
        store.put(SCOPE, make_anchor("w", now))
    except sqlite3.OperationalError as error:
        return f"OperationalError: {error}", time.monotonic() - started
    return "no error", time.monotonic() - started


def try_put_unprivileged(path: Path) -> tuple[str, float]:
    """Run `try_put` as user nobody in a forked child (root ignores file modes)."""
    if os.geteuid() != 0:
        return try_put(path)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop root, try, report, exit without cleanup
        try:
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            text, seconds = try_put(path)
            os.write(write, f"{seconds:.6f} {text}".encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        report = pipe.read()
    os.waitpid(pid, 0)
    delay, _, text = report.partition(" ")
    return text, float(delay or "nan")


@pytest.mark.parametrize("what", ["file", "directory"])
def test_read_only_raises_promptly(shared_dir: Path, what: str) -> None:
    """A read-only file or directory makes writes raise OperationalError at once."""
    path = shared_dir / "a.db"
    store = SQLiteStore(path)
    store.put(SCOPE, make_anchor("a", time.time()))
    store.close()
    if what == "file":
        path.chmod(0o444)
        shared_dir.chmod(0o777)
    else:
        path.chmod(0o666)
        shared_dir.chmod(0o555)

    text, seconds = try_put_unprivileged(path)

    assert text.startswith("OperationalError"), text
    assert "readonly" in text or "unable to open" in text
    assert seconds < 0.5
