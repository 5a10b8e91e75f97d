"""``anchortrack explain FILE``: the same explanations as text and JSON, and its exit codes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

import anchortrack
from anchortrack._cli import main
from anchortrack.stores import SQLiteStore

from ..helpers import conversation, user


NAMESPACE = "explain-tests"


@pytest.fixture(name="db")
def _db(tmp_path: Path) -> Path:
    return tmp_path / "anchors.db"


@pytest.fixture(name="sqlite_client")
def _sqlite_client(raw_client: openai.OpenAI, db: Path) -> Iterator[openai.OpenAI]:
    """A wrapped client recording into the SQLite file *db*."""
    store = SQLiteStore(db)
    yield anchortrack.wrap(raw_client, store=store, namespace=NAMESPACE)
    store.close()


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(["explain", *args])
    return code, capsys.readouterr().out


class TestExplainCommand:
    def _file(self, tmp_path: Path, data: object) -> str:
        path = tmp_path / "history.json"
        path.write_text(json.dumps(data), encoding="utf-8")
        return str(path)

    @pytest.fixture(autouse=True)
    def _client_key(self, monkeypatch: pytest.MonkeyPatch, raw_client: openai.OpenAI) -> None:
        """The scope holds the API key's digest: explain reads the key from the environment, like the SDK."""
        monkeypatch.setenv("OPENAI_API_KEY", raw_client.api_key)

    def _scope_args(self, client: openai.OpenAI, db: Path) -> list[str]:
        return ["--store", f"sqlite:{db}", "--base-url", str(client.base_url), "--namespace", NAMESPACE]

    def test_chained_text(
        self, capsys: pytest.CaptureFixture[str], sqlite_client: openai.OpenAI, db: Path, tmp_path: Path
    ) -> None:
        """The table marks the anchor, the delta row with '+', and ends with the summary."""
        history, (_, _, last) = conversation(sqlite_client)
        path = self._file(tmp_path, {"model": "m", "input": [*history, user("more")]})

        code, out = _run(capsys, path, *self._scope_args(sqlite_client, db))

        lines = out.splitlines()
        assert 0 == code
        assert (
            f"store sqlite:{db} · scope {str(sqlite_client.base_url).rstrip('/')} (namespace {NAMESPACE})"
            == lines[0]
        )
        assert lines[1].startswith("scope ")
        assert lines[1].endswith(
            ": base URL from --base-url, no organization, no project, "
            "namespace explain-tests from --namespace, API key digest from $OPENAI_API_KEY "
            "(change with --base-url, --organization, --project, --namespace, --no-api-key-scope)"
        )
        assert "     #  type                   role       fingerprint   held by" == lines[2]
        assert lines[3].startswith("     0  message                system     ")
        assert f"  ── anchor {last} (its view is items 0-6) ──" == lines[10]
        assert lines[11].startswith("+    7  message                user       ")
        assert lines[11].endswith("  -")
        assert lines[-1].startswith(f"chained: sends 1 of 8 items after {last}")

    def test_chained_json(
        self, capsys: pytest.CaptureFixture[str], sqlite_client: openai.OpenAI, db: Path, tmp_path: Path
    ) -> None:
        """--json gives the decision, the anchor and one object per item."""
        history, (first, _, last) = conversation(sqlite_client)
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
        history, _ = conversation(sqlite_client)
        path = self._file(tmp_path, [history[0], user("WEATHER?"), *history[2:], user("more")])

        code, out = _run(capsys, path, *self._scope_args(sqlite_client, db))
        jcode, jout = _run(capsys, path, *self._scope_args(sqlite_client, db), "--json")

        assert (0, 0) == (code, jcode)
        assert "── anchor" not in out
        assert 8 == sum(1 for line in out.splitlines() if line.startswith("+ "))
        assert out.splitlines()[-2:] == [
            "stateless (prefix_diverged): no recorded response's view is a prefix of the history: an earlier "
            "item was edited, removed or inserted (or the anchors are in another store or scope)",
            "note: the store holds anchors in this scope, but none is a prefix of this history",
        ]
        data = json.loads(jout)
        assert ("stateless", "prefix_diverged", None, None) == (
            data["decision"],
            data["reason"],
            data["anchor"],
            data["diverged_at"],
        )
        assert all(row["in_delta"] and row["held_by"] is None for row in data["items"])

    @pytest.mark.parametrize(
        ("content", "message"),
        [
            ([], "the history is empty (an empty JSON list): there is nothing to explain"),
            ({"model": "m", "input": []}, "the request body's 'input' is empty: there is nothing to explain"),
            (
                {"model": "m"},
                "a JSON object without 'input'; expected a request body with 'input' or a JSON list",
            ),
            (
                {"id": "resp_1", "output": []},
                "a JSON object without 'input' (it looks like a response: it has 'output')",
            ),
        ],
    )
    def test_nothing_to_explain_exits_2(
        self, capsys: pytest.CaptureFixture[str], db: Path, tmp_path: Path, content: object, message: str
    ) -> None:
        """A file without items is an error that says what was expected, not an empty table."""
        db.touch()
        path = self._file(tmp_path, content)

        code = main(["explain", path, "--store", f"sqlite:{db}"])

        out, err = capsys.readouterr()
        assert 2 == code
        assert "" == out
        assert message in err

    def test_an_empty_store_is_not_an_edited_history(
        self, capsys: pytest.CaptureFixture[str], sqlite_client: openai.OpenAI, tmp_path: Path
    ) -> None:
        """With nothing recorded (a fresh memory store), explain says so instead of blaming the history."""
        history, _ = conversation(sqlite_client)
        path = self._file(tmp_path, [*history, user("more")])

        code, out = _run(capsys, path, "--store", "memory", "--base-url", str(sqlite_client.base_url))
        _, jout = _run(capsys, path, "--store", "memory", "--json")

        assert 0 == code
        assert out.splitlines()[-1].startswith(
            "note: the store holds no anchors at all: a memory store starts empty in every process"
        )
        assert "this does not mean the history was edited" in out
        assert {"this_scope": False, "any_scope": False} == json.loads(jout)["store_holds"]

    def test_anchors_in_another_scope_are_pointed_out(
        self, capsys: pytest.CaptureFixture[str], sqlite_client: openai.OpenAI, db: Path, tmp_path: Path
    ) -> None:
        """Anchors recorded under a namespace the command was not given: it says to check the scope."""
        history, _ = conversation(sqlite_client)
        path = self._file(tmp_path, [*history, user("more")])

        code, out = _run(capsys, path, "--store", f"sqlite:{db}", "--base-url", str(sqlite_client.base_url))

        assert 0 == code
        assert out.splitlines()[-1] == (
            "note: the store holds anchors, but none in this scope: the recording client probably used "
            "another base URL, organization, project, namespace or API key (see the scope line above)"
        )

    def test_a_secret_key_keys_the_scope_it_looks_in(
        self,
        capsys: pytest.CaptureFixture[str],
        raw_client: openai.OpenAI,
        db: Path,
        tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """With a secret key, store keys are keyed digests: an edited history is not "another scope"."""
        monkeypatch.setenv("ANCHORTRACK_SECRET_KEY", "explain-tests-secret")
        store = SQLiteStore(db)
        client = anchortrack.wrap(raw_client, store=store, namespace=NAMESPACE)
        history, _ = conversation(client)
        store.close()
        path = self._file(tmp_path, [history[0], user("WEATHER?"), *history[2:], user("more")])

        code, out = _run(capsys, path, *self._scope_args(client, db))
        _, jout = _run(capsys, path, *self._scope_args(client, db), "--json")

        assert 0 == code
        assert out.splitlines()[-1] == (
            "note: the store holds anchors in this scope, but none is a prefix of this history"
        )
        assert {"this_scope": True, "any_scope": True} == json.loads(jout)["store_holds"]

    def test_the_scope_is_derived_like_a_client(
        self,
        capsys: pytest.CaptureFixture[str],
        sqlite_client: openai.OpenAI,
        db: Path,
        tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """OPENAI_BASE_URL, OPENAI_ORG_ID and OPENAI_PROJECT_ID are read as the openai client reads them."""
        history, (_, _, last) = conversation(sqlite_client)
        path = self._file(tmp_path, [*history, user("more")])
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "no-demo"))
        monkeypatch.setenv("OPENAI_BASE_URL", str(sqlite_client.base_url))
        monkeypatch.setenv("OPENAI_PROJECT_ID", "proj_x")

        _, out = _run(capsys, path, "--store", f"sqlite:{db}", "--namespace", NAMESPACE, "--json")
        monkeypatch.delenv("OPENAI_PROJECT_ID")
        _, chained = _run(capsys, path, "--store", f"sqlite:{db}", "--namespace", NAMESPACE, "--json")

        data = json.loads(out)
        assert (str(sqlite_client.base_url), "proj_x") == (
            data["scope"]["base_url"],
            data["scope"]["project"],
        )
        assert {
            "base_url": "$OPENAI_BASE_URL",
            "organization": "default",
            "project": "$OPENAI_PROJECT_ID",
            "namespace": "--namespace",
            "api_key": "$OPENAI_API_KEY",
        } == data["scope_source"]
        assert "prefix_diverged" == data["reason"]  # the anchors were recorded without a project
        assert (last, "chained") == (
            json.loads(chained)["anchor"]["response_id"],
            json.loads(chained)["reason"],
        )

    def test_anchors_in_another_scope_are_not_used(
        self, capsys: pytest.CaptureFixture[str], sqlite_client: openai.OpenAI, db: Path, tmp_path: Path
    ) -> None:
        """Without the namespace the anchors were recorded under, nothing chains."""
        history, _ = conversation(sqlite_client)
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
        path = self._file(tmp_path, [user("hi")])

        code = main(["explain", path, "--store", f"sqlite:{tmp_path / 'nope.db'}"])

        assert 2 == code
        assert "no anchor store at" in capsys.readouterr().err
        assert not (tmp_path / "nope.db").exists()
