"""``anchortrack explain FILE``: the same explanations as text and JSON, and its exit codes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

import anchortrack
from anchortrack._cli import main
from anchortrack._cli.record import DemoRecord
from anchortrack.server import ResponsesServer
from anchortrack.stores import RedisStore, SQLiteStore
from tests._redis import RedisServer

from ..helpers import conversation, dumped, output, scope_of, user


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
        assert [
            f"store sqlite:{db}",
            f"scope {scope_of(sqlite_client).key} (change with --base-url, --organization, --project,",
            "  --namespace, --api-key, --no-api-key-scope):",
            f"  base URL      {str(sqlite_client.base_url).rstrip('/')} (from --base-url)",
            "  organization  none",
            "  project       none",
            f"  namespace     {NAMESPACE} (from --namespace)",
            "  API key       digest (from $OPENAI_API_KEY)",
            "     #  type                   role       fingerprint   held by",
        ] == lines[:9]
        assert lines[9].startswith("     0  message                system     ")
        assert f"  ── anchor {last} ──" == lines[16]
        assert lines[17].startswith("+    7  message                user       ")
        assert lines[17].endswith("  -")
        assert "\n".join(lines[19:]).startswith(f"chained: sends 1 of 8 items after\n  {last}")
        assert all(len(line) <= 80 for line in lines)

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
        assert out.endswith(
            "stateless (prefix_diverged): no recorded response's view is a prefix of the\n"
            "  history: an earlier item was edited, removed or inserted (or the anchor of a\n"
            "  recorded prefix is gone)\n"
            "note: the store holds anchors in this scope, but none is a prefix of this\n"
            "  history\n"
        )
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
        assert out.endswith(
            "stateless (prefix_diverged): the store holds no anchors at all, so nothing can\n"
            "  chain: a memory store starts empty in every process, so only a client's own\n"
            "  tracker sees its anchors (pass the sqlite:PATH or redis://… store the client\n"
            "  records into)\n"
        )
        assert "edited" not in out
        assert {"this_scope": False, "any_scope": False} == json.loads(jout)["store_holds"]

    def test_anchors_in_another_scope_are_pointed_out(
        self, capsys: pytest.CaptureFixture[str], sqlite_client: openai.OpenAI, db: Path, tmp_path: Path
    ) -> None:
        """Anchors recorded under a namespace the command was not given: it says to check the scope."""
        history, _ = conversation(sqlite_client)
        path = self._file(tmp_path, [*history, user("more")])

        code, out = _run(capsys, path, "--store", f"sqlite:{db}", "--base-url", str(sqlite_client.base_url))

        assert 0 == code
        assert out.endswith(
            "stateless (prefix_diverged): the store holds anchors, but none in this scope:\n"
            "  the recording client probably used another base URL, organization, project,\n"
            "  namespace or API key (the store's scopes are listed below)\n"
            "the store holds anchors in 1 other scope:\n"
            f"  {scope_of(sqlite_client).key}: another namespace, organization, project or API key\n"
        )

    def test_a_redis_store_s_other_scopes_are_listed(
        self, capsys: pytest.CaptureFixture[str], raw_client: openai.OpenAI, tmp_path: Path
    ) -> None:
        """The same over a real redis-server: the scope the anchors are in, read from its keys."""
        redis_server = RedisServer()
        redis_server.start()
        try:
            store = RedisStore.from_url(redis_server.url)
            client = anchortrack.wrap(raw_client, store=store, scope_by_api_key=False)
            history, _ = conversation(client)
            store.close()
            path = self._file(tmp_path, [*history, user("more")])

            code, out = _run(
                capsys, path, "--store", redis_server.url, "--base-url", str(raw_client.base_url)
            )
        finally:
            redis_server.close()

        assert 0 == code
        assert out.endswith(
            "the store holds anchors in 1 other scope:\n"
            f"  {scope_of(client).key}: base URL {str(raw_client.base_url).rstrip('/')}\n"
            "    namespace none, without an API-key digest\n"
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
        assert out.endswith(
            "note: the store holds anchors in this scope, but none is a prefix of this\n  history\n"
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


TOOLS = [
    {
        "type": "function",
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
]


class TestAUsersOwnFiles:
    """
    ``python -m anchortrack explain`` on files a user wrote, as a user runs it: a subprocess in the
    directory of the files, with relative paths, after a tool loop recorded into ``sqlite:anchors.db``.

    The outputs are asserted whole, with the run's random response ids, fingerprints, port and scope
    key put back as names; every line fits 80 columns.
    """

    KEY = "sk-user"

    @pytest.fixture(autouse=True)
    def _loop(self, tmp_path: Path, server: ResponsesServer) -> Iterator[None]:
        """
        The user's tool loop, recorded into anchors.db; its history saved as a list and as a body.
        The server does not announce that it applies tools per request: to anchortrack, one it does
        not know (`test_the_request_body_or_tools_file_chains` records again, announced).
        """
        self.dir = tmp_path
        self.server = server
        server.state.announce_per_request = False
        try:
            self._record()
            yield
        finally:
            server.state.announce_per_request = True

    def _record(self) -> None:
        tmp_path, server = self.dir, self.server
        (tmp_path / "anchors.db").unlink(missing_ok=True)
        store = SQLiteStore(tmp_path / "anchors.db")
        raw = openai.OpenAI(base_url=server.base_url, api_key=self.KEY, max_retries=0)
        client = anchortrack.wrap(raw, store=store)
        history: list[Any] = [user('weather?\n!call get_weather {"city": "Oslo"}')]
        first = client.responses.create(model="scripted", input=history, tools=TOOLS)
        history += [*dumped(first.output), output(first.output[0].call_id, "-3C")]
        second = client.responses.create(model="scripted", input=history, tools=TOOLS)
        history += [*dumped(second.output), user("thanks")]
        self.ids = {first.id: "R1", second.id: "R2"}
        self.scope = scope_of(client)
        self.history = history
        self._write("history.json", history)
        self._write("body.json", {"model": "scripted", "input": history, "tools": TOOLS})
        self._write("tools.json", TOOLS)
        store.close()
        raw.close()

    def _write(self, name: str, data: object) -> None:
        (self.dir / name).write_text(json.dumps(data, indent=1), encoding="utf-8")

    def explain(self, *args: str, api_key: str | None = KEY) -> tuple[int, str, str]:
        """Run the command as a user would; return the exit code, stdout and stderr, masked."""
        env = {
            "PATH": os.environ["PATH"],
            "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
            "XDG_CACHE_HOME": str(self.dir / "cache"),
            "HOME": str(self.dir),
            **({"OPENAI_API_KEY": api_key} if api_key else {}),
        }
        args = tuple(self.server.base_url if arg == "URL" else arg for arg in args)
        done = subprocess.run(
            [sys.executable, "-m", "anchortrack", "explain", *args],
            cwd=self.dir, env=env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        for line in done.stdout.splitlines():
            assert len(line) <= 80, line
        return done.returncode, self._mask(done.stdout), self._mask(done.stderr)

    def _mask(self, text: str) -> str:
        for rid, name in self.ids.items():
            text = text.replace(rid, name).replace(rid[:14] + "…", name)
        text = text.replace(self.server.base_url.rstrip("/"), "URL").replace(self.scope.key, "KEY")
        return re.sub(r"(?<=  )[0-9a-f]{12}(?=  )", "<fp>", text)

    def scope_lines(self, source: str = "--base-url", key: str = "$OPENAI_API_KEY") -> str:
        return (
            "scope KEY (change with --base-url, --organization, --project,\n"
            "  --namespace, --api-key, --no-api-key-scope):\n"
            f"  base URL      URL (from {source})\n"
            "  organization  none\n"
            "  project       none\n"
            "  namespace     none\n"
            f"  API key       digest (from {key})\n"
        )

    CHAINED = (
        "chained: sends 1 of 5 items after\n  R2 (its view is items 0-3):\n"
        "  ~84 of ~606 input bytes (86% less)\n"
    )
    TABLE = (
        "     #  type                   role       fingerprint   held by\n"
        "{m}    0  message                user       <fp>  R1\n"
        "{m}    1  function_call          -          <fp>  R1\n"
        "{m}    2  function_call_output   -          <fp>  R2\n"
        "{m}    3  message                assistant  <fp>  R2\n"
    )

    def test_a_bare_list_says_its_anchors_were_made_with_tools(self) -> None:
        """
        A tool loop's history saved as a bare list: every row is held, yet nothing chains, because a
        list carries no tools; one line says so and how to pass them (no "none is a prefix" note).
        """
        code, out, err = self.explain("history.json", "--store", "sqlite:anchors.db", "--base-url", "URL")

        assert (0, "") == (code, err)
        assert out == (
            "store sqlite:anchors.db\n"
            + self.scope_lines()
            + self.TABLE.format(m="+")
            + "+    4  message                user       <fp>  -\n"
            "  + = sent in input\n"
            "stateless (properties_changed): the anchors that hold this history were made\n"
            "  with tools or other settings (tools, tool_choice, text, reasoning,\n"
            "  truncation), and a bare JSON list carries none: save the request body (a JSON\n"
            "  object with 'input', 'tools', …), or pass --tools FILE\n"
        )

    @pytest.mark.parametrize("how", ["body", "--tools", "announced"])
    def test_the_request_body_or_tools_file_chains(self, how: str) -> None:
        """
        The same history as a request body with its tools, or as a list with --tools FILE, chains; so does
        a bare list when the anchors come from a server that said it applies tools per request.
        """
        files = {"body": ["body.json"], "--tools": ["history.json", "--tools", "tools.json"]}.get(how)
        if files is None:
            self.server.state.announce_per_request = True
            self._record()
            files = ["history.json"]

        code, out, err = self.explain(*files, "--store", "sqlite:anchors.db", "--base-url", "URL")

        assert (0, "") == (code, err)
        assert out == (
            "store sqlite:anchors.db\n"
            + self.scope_lines()
            + self.TABLE.format(m=" ")
            + "  ── anchor R2 ──\n"
            "+    4  message                user       <fp>  -\n"
            "  + = sent in input\n" + self.CHAINED
        )

    def test_the_api_key_flag_is_the_scope_s(self) -> None:
        """--api-key stands in for $OPENAI_API_KEY; another key is another scope, and it says so."""
        _, mine, _ = self.explain("body.json", "--store", "sqlite:anchors.db", "--base-url", "URL",
                                  "--api-key", self.KEY, api_key=None)  # fmt: skip
        _, other, _ = self.explain("body.json", "--store", "sqlite:anchors.db", "--base-url", "URL",
                                   "--api-key", "sk-other")  # fmt: skip

        assert mine.startswith("store sqlite:anchors.db\n" + self.scope_lines(key="--api-key"))
        assert mine.endswith(self.CHAINED)
        assert other.endswith(
            "stateless (prefix_diverged): the store holds anchors, but none in this scope:\n"
            "  the recording client probably used another base URL, organization, project,\n"
            "  namespace or API key (the store's scopes are listed below)\n"
            "the store holds anchors in 1 other scope:\n"
            "  KEY: base URL URL\n"
            "    namespace none, with $OPENAI_API_KEY's digest\n"
        )

    def test_a_scope_without_the_api_key_is_named_with_the_flag_it_needs(self) -> None:
        """
        Anchors recorded by a client wrapped with scope_by_api_key=False, explained with the user's
        $OPENAI_API_KEY in the environment: the store's scope is listed, saying it has no API-key
        digest (so --no-api-key-scope is the missing flag); the key itself is never printed.
        """
        store = SQLiteStore(self.dir / "keyless.db")
        raw = openai.OpenAI(base_url=self.server.base_url, api_key=self.KEY, max_retries=0)
        client = anchortrack.wrap(raw, store=store, scope_by_api_key=False)
        first = client.responses.create(model="scripted", input=[user("hi")])
        self._write("keyless.json", [user("hi"), *dumped(first.output), user("more")])
        keyless = scope_of(client).key
        store.close()
        raw.close()

        code, out, err = self.explain("keyless.json", "--store", "sqlite:keyless.db", "--base-url", "URL")
        fixed = self.explain(
            "keyless.json", "--store", "sqlite:keyless.db", "--base-url", "URL", "--no-api-key-scope"
        )

        assert (0, "") == (code, err)
        assert out.endswith(
            "stateless (prefix_diverged): the store holds anchors, but none in this scope:\n"
            "  the recording client probably used another base URL, organization, project,\n"
            "  namespace or API key (the store's scopes are listed below)\n"
            "the store holds anchors in 1 other scope:\n"
            f"  {keyless}: base URL URL\n"
            "    namespace none, without an API-key digest\n"
        )
        assert self.KEY not in out
        assert (0, "") == (fixed[0], fixed[2])
        assert "\nchained: sends 1 of 3 items after\n" in fixed[1]

    def test_a_history_of_sdk_objects_saved_as_the_docs_say_is_explained(self) -> None:
        """
        json.dump refuses the output items a response returns (SDK objects); the way the README and
        docs/guide/cli.md give saves a history that explain reads, and it chains.
        """
        save = 'item if isinstance(item, dict) else item.model_dump(mode="json") for item in history'
        root = Path(__file__).resolve().parents[2]
        for page in ("README.md", "docs/guide/cli.md"):
            assert save in " ".join((root / page).read_text(encoding="utf-8").split()), page
        store = SQLiteStore(self.dir / "sdk.db")
        raw = openai.OpenAI(base_url=self.server.base_url, api_key=self.KEY, max_retries=0)
        client = anchortrack.wrap(raw, store=store)
        history: list[Any] = [user("hi")]
        first = client.responses.create(model="scripted", input=history)
        history += first.output
        history.append(user("more"))
        store.close()
        raw.close()

        with pytest.raises(TypeError, match="is not JSON serializable"):
            json.dumps(history)
        items = [item if isinstance(item, dict) else item.model_dump(mode="json") for item in history]
        (self.dir / "mine.json").write_text(json.dumps(items), encoding="utf-8")
        code, out, err = self.explain("mine.json", "--store", "sqlite:sdk.db", "--base-url", "URL")

        assert (0, "") == (code, err)
        self.ids[first.id] = "R"
        assert self._mask(out).endswith(
            "  ── anchor R ──\n"
            "+    2  message                user       <fp>  -\n"
            "  + = sent in input\n"
            "chained: sends 1 of 3 items after\n  R (its view is items 0-1):\n"
            "  ~82 of ~281 input bytes (71% less)\n"
        ), out

    def test_an_edited_history_is_named_once(self) -> None:
        """An edited first message: the summary says which item differs, the note that the scope is right."""
        self._write("edited.json", [user("WEATHER?"), *self.history[1:]])

        code, out, _ = self.explain("edited.json", "--store", "sqlite:anchors.db", "--base-url", "URL")

        assert 0 == code
        assert out.endswith(
            "+    4  message                user       <fp>  -\n"
            "  + = sent in input\n"
            "stateless (prefix_diverged): no recorded response's view is a prefix of the\n"
            "  history: an earlier item was edited, removed or inserted (or the anchor of a\n"
            "  recorded prefix is gone)\n"
            "note: the store holds anchors in this scope, but none is a prefix of this\n"
            "  history\n"
        )

    def test_an_empty_store_does_not_blame_the_history(self) -> None:
        """A store nothing was recorded into: one conclusion, and no word of an edited history."""
        empty = SQLiteStore(self.dir / "empty.db")
        empty.get(self.scope.key, "resp_1")  # the file and its schema, no anchor
        empty.close()

        code, out, _ = self.explain("body.json", "--store", "sqlite:empty.db", "--base-url", "URL")

        assert 0 == code
        assert "edited" not in out
        assert out.endswith(
            "  + = sent in input\n"
            "stateless (prefix_diverged): the store holds no anchors at all, so nothing can\n"
            "  chain: no client has recorded a response into it yet (is it the store the\n"
            "  client used?)\n"
        )

    def test_without_store_only_the_demo_s_own_file_uses_the_demo_s_store(self) -> None:
        """Not the user's file: it asks for --store. The demo's request file: the demo's store, said so."""
        no_record = self.explain("history.json")
        record = DemoRecord("sqlite:anchors.db", self.scope, "scripted", str(self.dir / "body.json"))
        record.save(self.dir / "cache" / "anchortrack" / "demo.json")
        other = self.explain("history.json")
        demo = self.explain("body.json")

        assert (2, "", "anchortrack explain: which store holds the anchors? pass --store SPEC, as the "
                "client was wrapped with\n") == no_record  # fmt: skip
        assert (2, "") == other[:2]
        assert other[2] == (
            "anchortrack explain: which store holds the anchors? pass --store SPEC, as the client was "
            "wrapped with (the last demo's store is used only for its own request file, "
            f"{self.dir}/body.json)\n"
        )
        assert demo[1].startswith(
            "store sqlite:anchors.db (the last demo's: FILE is its request file)\n"
            + self.scope_lines(source="demo.json", key="demo.json")
        )
        assert demo[1].endswith(self.CHAINED)

    def test_an_unreachable_redis_is_one_line_and_exit_2(self) -> None:
        """A store that cannot be reached: its error in one line, exit code 2, no traceback."""
        code, out, err = self.explain("body.json", "--store", "redis://127.0.0.1:1")

        assert (2, "") == (code, out)
        line, rest = err.split("\n", 1)
        assert "" == rest
        # redis-py's message names the address and the system's reason (errno 111 on Linux)
        assert re.fullmatch(
            r"anchortrack explain: the store redis://127\.0\.0\.1:1 failed: ConnectionError: "
            r"Error \d+ connecting to 127\.0\.0\.1:1\. Connection refused\.",
            line,
        ), line
