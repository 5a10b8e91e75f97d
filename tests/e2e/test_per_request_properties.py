"""
End to end: carried-over properties as per-server knowledge. A server known (or declared) to apply
``tools`` and the other carried properties per request keeps a conversation chaining when they
change mid-loop (a deferred tool loaded, an agent handoff); an unknown server stays strict.
"""

from __future__ import annotations

from typing import Any

import openai
import pytest

import anchortrack
from anchortrack._properties import PER_REQUEST_ENV, applies_per_request
from anchortrack.server import ResponsesServer, WireTap

from ..helpers import assert_server_saw, function_tools, sent, user


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


def test_a_declared_per_request_server_keeps_chaining_when_tools_change(
    client: openai.OpenAI, server: ResponsesServer, wire: WireTap, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`anchortrack serve` declared for its base URL: every turn after the first chains."""
    monkeypatch.setenv(PER_REQUEST_ENV, f"https://elsewhere.test/v1, {server.base_url}")

    assert [False, True, True, True, True] == _loop(client, server, wire)
    assert 0 == anchortrack.tracker(client).stats.count(reason="properties_changed")


def test_an_unknown_server_stays_strict_when_tools_change(
    client: openai.OpenAI, server: ResponsesServer, wire: WireTap, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing declared for a local address: each change goes out in full (properties_changed)."""
    monkeypatch.delenv(PER_REQUEST_ENV, raising=False)

    assert [False, False, False, False, True] == _loop(client, server, wire)
    assert 3 == anchortrack.tracker(client).stats.count(reason="properties_changed")


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
