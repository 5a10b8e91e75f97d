"""``anchortrack.explain`` and ``anchortrack explain``: chained, diverged and empty, as text and JSON."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

import anchortrack
from anchortrack import Reason, Scope
from anchortrack.cli import main
from anchortrack.stores import MemoryStore, SQLiteStore

from .conftest import BreakableStore, ask, scope_of, user


NAMESPACE = "explain-tests"


@pytest.fixture(name="db")
def _db(tmp_path: Path) -> Path:
    return tmp_path / "anchors.db"


@pytest.fixture(name="sqlite_client")
def _sqlite_client(raw_client: openai.OpenAI, db: Path) -> Iterator[openai.OpenAI]:
    store = SQLiteStore(db)
    yield anchortrack.wrap(raw_client, store=store, namespace=NAMESPACE)
    store.close()


def _plain(history: list[Any]) -> list[Any]:
    """The history as JSON data (SDK output models dumped)."""
    return [i if isinstance(i, dict) else i.to_dict(mode="json") for i in history]


def _conversation(client: openai.OpenAI) -> tuple[list[Any], list[str]]:
    """Two turns with a tool call: [system, user, call, output, assistant, user, assistant]."""
    history: list[Any] = [{"role": "system", "content": "be brief"}]
    history, first = ask(client, history, 'weather?\n!call get_weather {"city": "Oslo"}')
    history = [
        *history,
        {"type": "function_call_output", "call_id": first.output[0].call_id, "output": "-3C"},
    ]
    resp = client.responses.create(model="scripted", input=history)
    history = [*history, *resp.output]
    history, last = ask(client, history, "thanks")
    return _plain(history), [first.id, resp.id, last.id]


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(["explain", *args])
    return code, capsys.readouterr().out


class TestExplainFunction:
    def test_chained_history_marks_anchor_holders_and_delta(
        self, client: openai.OpenAI, store: MemoryStore
    ) -> None:
        """Each item names the shortest recorded view holding it; the delta is the new message."""
        history, (first, second, last) = _conversation(client)

        result = anchortrack.explain([*history, user("more")], store=store, scope=scope_of(client))

        assert Reason.CHAINED == result.reason
        assert last == result.plan.anchor.response_id if result.plan.anchor else None
        assert [first, first, first, second, second, last, last, None] == [r.held_by for r in result.items]
        assert [False] * 7 + [True] == [r.in_delta for r in result.items]
        assert ("message", "system") == (result.items[0].type, result.items[0].role)
        assert ("function_call", None) == (result.items[2].type, result.items[2].role)
        assert result.summary.startswith(f"chained: sends 1 of 8 items after {last} (its view is items 0-6)")

    def test_diverged_history_says_where_with_recent_views(
        self, client: openai.OpenAI, store: MemoryStore
    ) -> None:
        """An edited item 1 falls back; a live tracker locates the divergence at index 1."""
        history, _ = _conversation(client)
        edited = [history[0], user("WEATHER?"), *history[2:], user("more")]

        result = anchortrack.explain(
            edited, store=store, scope=scope_of(client), recent=anchortrack.tracker(client).recent
        )

        assert (Reason.PREFIX_DIVERGED, 1) == (result.reason, result.plan.diverged_at)
        assert [None] * len(edited) == [r.held_by for r in result.items]
        assert all(r.in_delta for r in result.items)
        assert result.summary == (
            "stateless (prefix_diverged): item 1 is the first that differs from the closest recorded view; "
            "no recorded response's view is a prefix of the history"
        )

    def test_empty_history(self, store: MemoryStore) -> None:
        """An empty history has nothing to chain."""
        result = anchortrack.explain([], store=store, scope=Scope("https://api.openai.com/v1"))

        assert (Reason.NO_HISTORY, ()) == (result.reason, result.items)
        assert "stateless (no_history): the history is empty" == result.summary

    def test_request_body_with_previous_response_id_is_caller_managed(self, store: MemoryStore) -> None:
        """A body that chains itself is a passthrough; store=false is noted."""
        body = {"model": "m", "input": "hi", "previous_response_id": "resp_1", "store": False}

        result = anchortrack.explain(body, store=store, scope=Scope("https://api.openai.com/v1"))

        assert ("passthrough", Reason.CALLER_MANAGED) == (result.decision, result.reason)
        assert result.summary == (
            "passthrough (caller_managed): the request sets previous_response_id=resp_1 itself, "
            "so it is sent as given; the response will not be recorded (store=false)"
        )

    def test_a_failing_store_is_store_unavailable(self, client: openai.OpenAI) -> None:
        """A store that raises explains as store_unavailable, naming the error class."""
        store = BreakableStore()
        store.broken = True

        result = anchortrack.explain([user("a"), user("b")], store=store, scope=scope_of(client))

        assert Reason.STORE_UNAVAILABLE == result.reason
        assert result.summary.endswith("(ConnectionError)")

    def test_history_that_is_exactly_a_view_has_nothing_to_send(
        self, client: openai.OpenAI, store: MemoryStore
    ) -> None:
        """A first turn's history plus its output, sent again, cannot chain: the delta would be empty."""
        history, first = ask(client, [], "one")

        result = anchortrack.explain(_plain(history), store=store, scope=scope_of(client))

        assert Reason.PREFIX_DIVERGED == result.reason
        assert result.closest is not None
        assert first.id == result.closest.response_id
        assert result.summary == (
            f"stateless (prefix_diverged): the history ends exactly where {first.id}'s view ends, "
            "so there is nothing new to send after it"
        )


class TestExplainCommand:
    def _file(self, tmp_path: Path, data: object) -> str:
        path = tmp_path / "history.json"
        path.write_text(json.dumps(data), encoding="utf-8")
        return str(path)

    def _scope_args(self, client: openai.OpenAI, db: Path) -> list[str]:
        return ["--store", f"sqlite:{db}", "--base-url", str(client.base_url), "--namespace", NAMESPACE]

    def test_chained_text(
        self, capsys: pytest.CaptureFixture[str], sqlite_client: openai.OpenAI, db: Path, tmp_path: Path
    ) -> None:
        """The table marks the anchor, the delta row with '+', and ends with the summary."""
        history, (_, _, last) = _conversation(sqlite_client)
        path = self._file(tmp_path, {"model": "m", "input": [*history, user("more")]})

        code, out = _run(capsys, path, *self._scope_args(sqlite_client, db))

        lines = out.splitlines()
        assert 0 == code
        assert (
            f"store sqlite:{db} · scope {str(sqlite_client.base_url).rstrip('/')} (namespace {NAMESPACE})"
            == lines[0]
        )
        assert "     #  type                   role       fingerprint   held by" == lines[1]
        assert lines[2].startswith("     0  message                system     ")
        assert f"  ── anchor {last} (its view is items 0-6) ──" == lines[9]
        assert lines[10].startswith("+    7  message                user       ")
        assert lines[10].endswith("  -")
        assert lines[-1].startswith(f"chained: sends 1 of 8 items after {last}")

    def test_chained_json(
        self, capsys: pytest.CaptureFixture[str], sqlite_client: openai.OpenAI, db: Path, tmp_path: Path
    ) -> None:
        """--json gives the decision, the anchor and one object per item."""
        history, (first, _, last) = _conversation(sqlite_client)
        path = self._file(tmp_path, [*history, user("more")])

        code, out = _run(capsys, path, *self._scope_args(sqlite_client, db), "--json")

        data = json.loads(out)
        assert 0 == code
        assert ("chained", "chained", 8, 1, 7) == (
            data["decision"],
            data["reason"],
            data["items_total"],
            data["items_sent"],
            data["items_skipped"],
        )
        assert last == data["anchor"]["response_id"]
        assert 7 == data["anchor"]["items"]
        assert NAMESPACE == data["scope"]["namespace"]
        row = data["items"][0]
        assert {"index", "type", "role", "fingerprint", "held_by", "in_delta"} == set(row)
        assert (0, "message", "system", first, False) == (
            row["index"],
            row["type"],
            row["role"],
            row["held_by"],
            row["in_delta"],
        )
        assert 12 == len(row["fingerprint"])

    def test_diverged_text_and_json(
        self, capsys: pytest.CaptureFixture[str], sqlite_client: openai.OpenAI, db: Path, tmp_path: Path
    ) -> None:
        """An edited history falls back: every row is sent, no anchor line, the reason in one line."""
        history, _ = _conversation(sqlite_client)
        path = self._file(tmp_path, [history[0], user("WEATHER?"), *history[2:], user("more")])

        code, out = _run(capsys, path, *self._scope_args(sqlite_client, db))
        jcode, jout = _run(capsys, path, *self._scope_args(sqlite_client, db), "--json")

        assert (0, 0) == (code, jcode)
        assert "── anchor" not in out
        assert 8 == sum(1 for line in out.splitlines() if line.startswith("+ "))
        assert out.splitlines()[-1] == (
            "stateless (prefix_diverged): no recorded response's view is a prefix of the history: an earlier "
            "item was edited, removed or inserted (or the anchors are in another store or scope)"
        )
        data = json.loads(jout)
        assert ("stateless", "prefix_diverged", None, None) == (
            data["decision"],
            data["reason"],
            data["anchor"],
            data["diverged_at"],
        )
        assert all(row["in_delta"] and row["held_by"] is None for row in data["items"])

    def test_empty_text_and_json(
        self, capsys: pytest.CaptureFixture[str], sqlite_client: openai.OpenAI, db: Path, tmp_path: Path
    ) -> None:
        """An empty history is explained, not refused."""
        _conversation(sqlite_client)
        path = self._file(tmp_path, [])

        code, out = _run(capsys, path, *self._scope_args(sqlite_client, db))
        jcode, jout = _run(capsys, path, *self._scope_args(sqlite_client, db), "--json")

        assert (0, 0) == (code, jcode)
        assert ["  (no items)", "  + = sent in input", "stateless (no_history): the history is empty"] == (
            out.splitlines()[-3:]
        )
        data = json.loads(jout)
        assert ("no_history", 0, []) == (data["reason"], data["items_total"], data["items"])

    def test_anchors_in_another_scope_are_not_used(
        self, capsys: pytest.CaptureFixture[str], sqlite_client: openai.OpenAI, db: Path, tmp_path: Path
    ) -> None:
        """Without the namespace the anchors were recorded under, nothing chains."""
        history, _ = _conversation(sqlite_client)
        path = self._file(tmp_path, [*history, user("more")])

        _, out = _run(
            capsys, path, "--store", f"sqlite:{db}", "--base-url", str(sqlite_client.base_url), "--json"
        )

        assert "prefix_diverged" == json.loads(out)["reason"]

    @pytest.mark.parametrize(
        ("content", "message"),
        [("{not json", "cannot read"), ("42", "takes a history (list) or a request body (dict)")],
    )
    def test_unusable_input_exits_2(
        self, capsys: pytest.CaptureFixture[str], db: Path, tmp_path: Path, content: str, message: str
    ) -> None:
        """Input that is not a history or a body is an error with exit code 2."""
        db.touch()
        path = tmp_path / "bad.json"
        path.write_text(content, encoding="utf-8")

        code = main(["explain", str(path), "--store", f"sqlite:{db}"])

        assert 2 == code
        assert message in capsys.readouterr().err

    def test_missing_sqlite_store_exits_2(self, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
        """A store file that does not exist is reported, not created."""
        path = self._file(tmp_path, [])

        code = main(["explain", path, "--store", f"sqlite:{tmp_path / 'nope.db'}"])

        assert 2 == code
        assert "no anchor store at" in capsys.readouterr().err
        assert not (tmp_path / "nope.db").exists()
