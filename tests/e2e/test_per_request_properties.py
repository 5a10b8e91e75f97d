"""
End to end: carried-over properties as per-server knowledge. A server known, declared, or that
announces on its responses that it applies ``tools`` and the other carried properties per request
keeps a conversation chaining when they change mid-loop (a deferred tool loaded, an agent handoff);
an unknown server stays strict.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

import anchortrack
from anchortrack._properties import ANY, PER_REQUEST_ENV, announced, applies_per_request
from anchortrack.server import ResponsesServer, WireTap
from anchortrack.stores import MemoryStore, SQLiteStore

from ..helpers import assert_server_saw, function_tools, sent, user


@pytest.fixture(scope="module", name="unannounced")
def _unannounced() -> Iterator[ResponsesServer]:
    """A local server whose responses do not announce it: to anchortrack, a server it does not know."""
    with ResponsesServer(store="memory") as srv:
        srv.state.announce_per_request = False
        yield srv


def _wrapped(server: ResponsesServer, wire: WireTap, store: Any = None) -> openai.OpenAI:
    raw = openai.OpenAI(
        base_url=server.base_url, api_key="test", http_client=wire.http_client(), max_retries=0
    )
    return anchortrack.wrap(raw, store=store if store is not None else MemoryStore())


#: The tools of each turn: loaded one by one, then handed off to another agent's set.
TURNS = [("search",), ("search", "fetch"), ("search", "fetch", "summarise"), ("handoff",), ("handoff",)]


def _loop(client: openai.OpenAI, server: ResponsesServer, wire: WireTap) -> list[bool]:
    """Run the turns; return whether each request chained (the server saw the whole history every time)."""
    history: list[Any] = []
    chained = []
    for n, names in enumerate(TURNS):
        history.append(user(f"turn {n}"))
        resp = client.responses.create(model="scripted", input=history, tools=function_tools(*names))
        body = sent(wire)
        assert function_tools(*names) == body["tools"]  # the tools of this turn, whatever it chained from
        assert_server_saw(server, resp.id, history)
        chained.append("previous_response_id" in body)
        history += resp.output
    return chained


def test_anchortrack_serve_is_recognised_by_what_its_responses_say(
    client: openai.OpenAI,
    raw_client: openai.OpenAI,
    server: ResponsesServer,
    wire: WireTap,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Nothing declared: the local server announces it on each response; each turn after the first chains."""
    monkeypatch.delenv(PER_REQUEST_ENV, raising=False)

    assert [False, True, True, True, True] == _loop(client, server, wire)
    assert 0 == anchortrack.tracker(client).stats.count(reason="properties_changed")
    said = raw_client.responses.with_raw_response.create(model="scripted", input="hi").http_response.json()
    assert {"properties": "per_request"} == said["anchortrack"]
    assert announced(said)  # what the server writes is what the library reads


@pytest.mark.parametrize("stream", [False, True])
async def test_async_and_streamed_calls_read_the_announcement_too(
    aclient: openai.AsyncOpenAI,
    server: ResponsesServer,
    wire: WireTap,
    stream: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(PER_REQUEST_ENV, raising=False)
    history: list[Any] = []
    for n, names in enumerate(TURNS[:3]):
        history.append(user(f"turn {n}"))
        if stream:
            async with aclient.responses.stream(
                model="scripted", input=history, tools=function_tools(*names)
            ) as events:
                resp = await events.get_final_response()
        else:
            resp = await aclient.responses.create(
                model="scripted", input=history, tools=function_tools(*names)
            )
        assert (n > 0) == ("previous_response_id" in sent(wire)), n
        assert_server_saw(server, resp.id, history)
        history += resp.output
    assert 2 == anchortrack.tracker(aclient).stats.count("chained")


def test_another_process_chains_from_announced_anchors_without_seeing_the_server_first(
    server: ResponsesServer, wire: WireTap, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the server said is in the anchor: a fresh tracker on the same SQLite file chains at once."""
    monkeypatch.delenv(PER_REQUEST_ENV, raising=False)
    path = tmp_path / "anchors.db"
    first = _wrapped(server, wire, SQLiteStore(path))
    history: list[Any] = [user("one")]
    history += first.responses.create(model="scripted", input=history, tools=function_tools("a")).output
    history.append(user("two"))

    later = _wrapped(server, wire, SQLiteStore(path))
    resp = later.responses.create(model="scripted", input=history, tools=function_tools("b"))

    assert [user("two")] == sent(wire)["input"]
    assert_server_saw(server, resp.id, history)
    with sqlite3.connect(path) as db:
        assert {ANY} == {row[0] for row in db.execute("SELECT properties FROM anchors")}
    explained = anchortrack.explain(
        [*history, *resp.output, user("three")],
        store=SQLiteStore(path),
        scope=anchortrack.tracker(later).scope_for(later),
        params={"tools": function_tools("c")},
    )
    assert "chained" == explained.decision, explained


def test_a_declared_per_request_server_keeps_chaining_when_tools_change(
    unannounced: ResponsesServer, wire: WireTap, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that does not announce it, declared for its base URL: every turn after the first chains."""
    monkeypatch.setenv(PER_REQUEST_ENV, f"https://elsewhere.test/v1, {unannounced.base_url}")
    client = _wrapped(unannounced, wire)

    assert [False, True, True, True, True] == _loop(client, unannounced, wire)
    assert 0 == anchortrack.tracker(client).stats.count(reason="properties_changed")


def test_an_unknown_server_stays_strict_when_tools_change(
    unannounced: ResponsesServer, wire: WireTap, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not announced, not declared: each change goes out in full (properties_changed)."""
    monkeypatch.delenv(PER_REQUEST_ENV, raising=False)
    client = _wrapped(unannounced, wire)

    assert [False, False, False, False, True] == _loop(client, unannounced, wire)
    assert 3 == anchortrack.tracker(client).stats.count(reason="properties_changed")
    said = client.responses.with_raw_response.create(model="scripted", input="hi").http_response.json()
    assert "anchortrack" not in said


def test_only_the_exact_announcement_counts() -> None:
    """Anything else under the field leaves the server unknown."""
    assert announced({"anchortrack": {"properties": "per_request"}})
    for other in ({"anchortrack": {"properties": "carried"}}, {"anchortrack": "per_request"}, {}, None, "x"):
        assert not announced(other)


@pytest.mark.parametrize(
    ("base_url", "expected"),
    [
        ("https://api.openai.com/v1", True),
        ("https://API.openai.com/v1/", True),
        ("https://my-resource.openai.azure.com/openai/v1", True),
        ("https://my-resource.cognitiveservices.azure.com/openai/v1", True),
        ("https://my-project.services.ai.azure.com/openai/v1", True),
        ("https://my-endpoint.inference.ml.azure.com/v1", False),  # may host any server (vLLM, say)
        ("http://localhost:8000/v1", False),  # vLLM's agentic-api, or anything else
        ("https://api.openai.com.evil.test/v1", False),
        ("https://gateway.example/v1", False),
        ("", False),
    ],
)
def test_which_servers_are_known_to_apply_properties_per_request(base_url: str, expected: bool) -> None:
    assert expected is applies_per_request(base_url)


def test_a_declaration_covers_its_base_url_and_the_urls_under_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PER_REQUEST_ENV, "http://gw.test/v1/,http://other.test")
    assert applies_per_request("http://gw.test/v1")
    assert applies_per_request("http://gw.test/v1/tenant")
    assert applies_per_request("http://other.test/v1")
    assert not applies_per_request("http://gw.test/v10")
    assert not applies_per_request("http://gw.test")


@pytest.mark.parametrize("announce", [True, False])
def test_plan_request_and_record_response_read_the_announcement(
    server: ResponsesServer, raw_client: openai.OpenAI, announce: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The functional API against the local server: an announced anchor plans a chain whatever the tools."""
    monkeypatch.delenv(PER_REQUEST_ENV, raising=False)
    monkeypatch.setattr(server.state, "announce_per_request", announce)
    store, scope = MemoryStore(), anchortrack.Scope(server.base_url)
    history: list[Any] = [user("one")]
    params = {"tools": function_tools("a")}
    resp = raw_client.responses.create(model="scripted", input=history, **params)
    assert anchortrack.record_response(history, resp, scope=scope, store=store, params=params) is not None
    history += [*resp.output, user("two")]

    plan = anchortrack.plan_request(history, scope=scope, store=store, params={"tools": function_tools("b")})

    assert (resp.id if announce else None) == (plan.anchor.response_id if plan.anchor else None)
    assert ("chained" if announce else "properties_changed") == plan.reason.value
