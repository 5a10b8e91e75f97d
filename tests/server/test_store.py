"""The response store contract, run on the memory and the SQLite backend."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

from anchortrack.server._records import (
    SCHEMA_VERSION,
    ChainLink,
    MemoryResponseStore,
    ResponseStore,
    SQLiteResponseStore,
    StoreConflictError,
    StoredResponse,
)
from anchortrack.server._state import open_store

from ..helpers import FakeClock


def record(response_id: str = "resp_1", parent: str | None = None, **changes: Any) -> StoredResponse:
    base = StoredResponse(
        id=response_id,
        previous_response_id=parent,
        status="completed",
        input_items=[{"role": "user", "content": [{"type": "input_text", "text": "héllo"}]}],
        response={"id": response_id, "output": [{"id": "msg_1", "type": "message"}], "n": 1.5},
    )
    return StoredResponse(**{**base.__dict__, **changes})


class TestContract:
    """Every backend behaves the same."""

    def test_save_then_get_round_trips(self, response_store: ResponseStore, clock: FakeClock) -> None:
        """A saved record reads back equal, with created_at and expires_at stamped."""
        saved = response_store.save(record())

        got = response_store.get("resp_1")

        assert got == saved
        assert (clock.now, clock.now + 100) == (got.created_at, got.expires_at)
        assert record().input_items == got.input_items
        assert record().response == got.response
        assert got.output == [{"id": "msg_1", "type": "message"}]
        assert response_store.get("resp_missing") is None

    def test_link_gives_the_chain_data(self, response_store: ResponseStore, clock: FakeClock) -> None:
        """link() returns parent, status and items of a live record, fresh after an overwrite."""
        response_store.save(record(parent="resp_0", status="in_progress"))
        assert response_store.link("resp_1") == ChainLink(
            id="resp_1",
            previous_response_id="resp_0",
            status="in_progress",
            input_items=record().input_items,
            output=record().output,
        )

        response_store.save(record(parent="resp_0"), overwrite=True)
        link = response_store.link("resp_1")

        assert link is not None
        assert link.status == "completed"
        assert response_store.link("resp_missing") is None
        clock.advance(100)
        assert response_store.link("resp_1") is None

    def test_no_silent_overwrite(self, response_store: ResponseStore) -> None:
        """Saving an existing id without overwrite is a conflict and changes nothing."""
        response_store.save(record())

        with pytest.raises(StoreConflictError, match="already exists") as caught:
            response_store.save(record(status="failed"))

        assert caught.value.response_id == "resp_1"
        got = response_store.get("resp_1")
        assert got is not None
        assert got.status == "completed"

    def test_overwrite_replaces_and_keeps_created_at(
        self, response_store: ResponseStore, clock: FakeClock
    ) -> None:
        """With overwrite the record is replaced; its age still counts from the first save."""
        first = response_store.save(record(status="in_progress"))
        clock.advance(10)

        response_store.save(record(status="completed"), overwrite=True)

        got = response_store.get("resp_1")
        assert got is not None
        assert ("completed", first.created_at) == (got.status, got.created_at)

    def test_parent_mismatch_is_a_conflict(self, response_store: ResponseStore) -> None:
        """expected_previous_response_id must match the record's and the existing record's parent."""
        with pytest.raises(StoreConflictError, match="parent"):
            response_store.save(record(parent="resp_0"), expected_previous_response_id="resp_x")
        response_store.save(record(parent="resp_0"), expected_previous_response_id="resp_0")

        with pytest.raises(StoreConflictError, match="parent"):
            response_store.save(
                record(parent="resp_x"), overwrite=True, expected_previous_response_id="resp_x"
            )
        response_store.save(
            record(parent="resp_0", status="failed"), overwrite=True, expected_previous_response_id="resp_0"
        )
        got = response_store.get("resp_1")
        assert got is not None
        assert got.status == "failed"

    def test_records_are_isolated_from_callers(self, response_store: ResponseStore) -> None:
        """Mutating what was saved or read never changes the stored record."""
        original = record()
        response_store.save(original)
        original.input_items[0]["content"] = "changed"
        original.response["output"].clear()

        got = response_store.get("resp_1")
        assert got is not None
        got.input_items.clear()
        got.response["id"] = "other"

        again = response_store.get("resp_1")
        assert again == record(created_at=again.created_at, expires_at=again.expires_at)

    def test_delete(self, response_store: ResponseStore) -> None:
        """Delete removes a record and reports whether one was there."""
        response_store.save(record())

        assert response_store.link("resp_1") is not None
        assert response_store.delete("resp_1") is True
        assert response_store.get("resp_1") is None
        assert response_store.link("resp_1") is None
        assert response_store.delete("resp_1") is False

    def test_retention_expires_records(self, response_store: ResponseStore, clock: FakeClock) -> None:
        """After the retention period a record is gone; just before, it is there."""
        response_store.save(record())
        clock.advance(99.9)
        assert response_store.get("resp_1") is not None

        clock.advance(0.1)

        assert response_store.get("resp_1") is None
        assert response_store.count() == 0

    def test_expired_id_can_be_saved_again(self, response_store: ResponseStore, clock: FakeClock) -> None:
        """An expired record no longer blocks its id."""
        response_store.save(record())
        clock.advance(200)

        response_store.save(record(status="incomplete"))

        got = response_store.get("resp_1")
        assert got is not None
        assert got.status == "incomplete"

    def test_expire_hook(self, response_store: ResponseStore) -> None:
        """expire() makes a live record look expired, once."""
        response_store.save(record())

        assert response_store.expire("resp_1") is True
        assert response_store.get("resp_1") is None
        assert response_store.link("resp_1") is None
        assert response_store.expire("resp_1") is False
        assert response_store.expire("resp_missing") is False

    def test_find_item_finds_the_oldest_holder(self, response_store: ResponseStore, clock: FakeClock) -> None:
        """find_item() searches input and output items by id, oldest live record first, per owner if asked."""
        quoted = {"id": "msg_2", "type": "message", "content": [{"type": "x", "id": "msg_1"}]}
        response_store.save(record("resp_a", owner="alice"))
        clock.advance(1)
        response_store.save(record("resp_b", input_items=[{"id": "msg_1", "n": 2}], owner="alice"))
        clock.advance(1)
        response_store.save(record("resp_c", input_items=[quoted], response={"output": []}, owner="bob"))

        assert ("resp_a", {"id": "msg_1", "type": "message"}) == response_store.find_item("msg_1")
        assert ("resp_c", quoted) == response_store.find_item("msg_2", owner="bob")
        assert response_store.find_item("msg_1", owner="bob") is None  # msg_1 is no item of bob's
        assert response_store.find_item("msg_2", owner="alice") is None
        response_store.expire("resp_a")
        assert ("resp_b", {"id": "msg_1", "n": 2}) == response_store.find_item("msg_1", "alice")
        response_store.delete("resp_b")
        assert response_store.find_item("msg_1") is None

    def test_purge_and_count(self, response_store: ResponseStore, clock: FakeClock) -> None:
        """purge_expired deletes exactly the expired records."""
        response_store.save(record("resp_a"))
        clock.advance(50)
        response_store.save(record("resp_b"))
        clock.advance(60)

        assert response_store.count() == 1
        assert response_store.purge_expired() == 1
        assert response_store.purge_expired() == 0
        assert response_store.get("resp_b") is not None

    def test_concurrent_saves_from_threads(self, response_store: ResponseStore) -> None:
        """Many threads saving and reading at once lose nothing."""

        def work(worker: int) -> None:
            for n in range(25):
                response_id = f"resp_{worker}_{n}"
                response_store.save(record(response_id))
                assert response_store.get(response_id) is not None

        threads = [threading.Thread(target=work, args=(worker,)) for worker in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

        assert response_store.count() == 200

    def test_same_id_raced_by_threads_is_saved_once(self, response_store: ResponseStore) -> None:
        """The save policy holds under races: exactly one concurrent save of an id wins."""
        results: list[str] = []
        lock = threading.Lock()

        def attempt(n: int) -> None:
            try:
                response_store.save(record(status=f"s{n}"))
                outcome = "saved"
            except StoreConflictError:
                outcome = "conflict"
            with lock:
                results.append(outcome)

        threads = [threading.Thread(target=attempt, args=(n,)) for n in range(10)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

        assert results.count("saved") == 1
        assert results.count("conflict") == 9


class TestSQLite:
    """What only the SQLite backend promises."""

    def test_file_and_parents_are_created_in_wal_mode(self, tmp_path: Path) -> None:
        """The database appears on first use, in WAL mode, at the current schema version."""
        path = tmp_path / "a" / "b" / "responses.db"
        store = SQLiteResponseStore(path)
        store.close()

        connection = sqlite3.connect(path)
        try:
            assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
            assert connection.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        finally:
            connection.close()

    def test_records_survive_reopening(self, tmp_path: Path, clock: FakeClock) -> None:
        """A record saved by one store object is read by the next one on the same file."""
        path = tmp_path / "responses.db"
        writer = SQLiteResponseStore(path, clock=clock)
        saved = writer.save(record())
        writer.close()

        reader = SQLiteResponseStore(path, clock=clock)
        try:
            assert saved == reader.get("resp_1")
        finally:
            reader.close()

    def test_a_version_1_file_is_migrated_its_responses_keyless(
        self, tmp_path: Path, clock: FakeClock
    ) -> None:
        """A file written before responses had owners opens; its records belong to requests without a key."""
        path = tmp_path / "responses.db"
        connection = sqlite3.connect(path)
        connection.execute(
            "CREATE TABLE responses (id TEXT PRIMARY KEY, previous_response_id TEXT, status TEXT NOT NULL, "
            "created_at REAL NOT NULL, expires_at REAL NOT NULL, input_json TEXT NOT NULL, "
            "output_json TEXT NOT NULL, response_json TEXT NOT NULL)"
        )
        connection.execute(
            "INSERT INTO responses VALUES "
            "('resp_old', NULL, 'completed', 1.0, 1e300, '[]', '[]', '{\"id\": 1}')"
        )
        connection.execute("PRAGMA user_version = 1")
        connection.commit()
        connection.close()

        store = SQLiteResponseStore(path, clock=clock)
        try:
            old = store.get("resp_old")
            store.save(record("resp_new", owner="abc"))
            new = store.get("resp_new")
        finally:
            store.close()

        assert old is not None
        assert new is not None
        assert ("", {"id": 1}, "abc") == (old.owner, old.response, new.owner)

    def test_newer_schema_is_refused(self, tmp_path: Path) -> None:
        """A file written by a newer schema is not misread."""
        path = tmp_path / "responses.db"
        connection = sqlite3.connect(path)
        connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
        connection.close()

        with pytest.raises(RuntimeError, match="newer"):
            SQLiteResponseStore(path)

    def test_close_is_idempotent(self, tmp_path: Path) -> None:
        """Closing twice is harmless."""
        store = SQLiteResponseStore(tmp_path / "responses.db")
        store.close()
        store.close()

        with pytest.raises(sqlite3.ProgrammingError):
            store.get("resp_1")


def test_open_store_spellings(tmp_path: Path) -> None:
    """'memory' and 'sqlite:PATH' open the two backends; anything else is refused."""
    memory = open_store("memory", retention=5)
    sqlite_store = open_store(f"sqlite:{tmp_path / 'x.db'}")
    try:
        assert isinstance(memory, MemoryResponseStore)
        assert memory.retention == 5
        assert isinstance(sqlite_store, SQLiteResponseStore)
    finally:
        sqlite_store.close()
    for bad in ("redis", "sqlite:", "Memory"):
        with pytest.raises(ValueError, match="unknown store"):
            open_store(bad)
    with pytest.raises(ValueError, match="retention"):
        open_store("memory", retention=-1)
