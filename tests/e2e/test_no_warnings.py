"""
anchortrack never emits a warning the unwrapped client would not.

A real OpenAI response may hold a value the installed SDK types otherwise: a web search call's
``action.sources`` with ``{"type": "api", ...}`` where the SDK expects ``Literal["url"]``. The SDK
keeps it without a word; dumping it for a fingerprint or a recording must not warn either (under
``-W error`` such a warning would stop the recording and the conversation's chaining).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import openai
import pytest
from openai._models import construct_type
from openai.types.responses import Response

import anchortrack
from anchortrack import Scope
from anchortrack._hashing import Memo, fingerprint, fingerprint_items
from anchortrack.server import ResponsesServer
from anchortrack.server._model import ModelReply
from anchortrack.stores import MemoryStore


WEB_SEARCH_CALL: dict[str, Any] = {
    "id": "ws_1",
    "type": "web_search_call",
    "status": "completed",
    "action": {
        "type": "search",
        "query": "weather in Paris",
        "sources": [{"type": "api", "name": "oai-weather"}, {"type": "url", "url": "https://example.test"}],
    },
}


def _message(text: str) -> dict[str, Any]:
    return {
        "id": f"msg_{abs(hash(text)) % 10**8}",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


class WebSearchModel:
    """A model that searches the web with an API source on its first turn, then answers."""

    def respond(self, context: Sequence[Any], *, instructions: Any = None) -> ModelReply:
        if any(item.get("type") == "web_search_call" for item in context):
            return ModelReply(status="completed", output=[_message(f"answer {len(context)}")])
        return ModelReply(status="completed", output=[dict(WEB_SEARCH_CALL), _message("it is sunny")])


@pytest.fixture(name="search_server")
def _search_server() -> Iterator[ResponsesServer]:
    with ResponsesServer(model=WebSearchModel()) as server:  # type: ignore[arg-type]
        yield server


def _sdk_item() -> Any:
    """The web search call as the SDK builds it from the server's JSON."""
    response = construct_type(
        type_=Response,
        value={
            "id": "resp_1",
            "object": "response",
            "created_at": 1,
            "model": "m",
            "status": "completed",
            "output": [WEB_SEARCH_CALL],
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
        },
    )
    return response.output[0]  # type: ignore[attr-defined]


def test_fingerprinting_a_model_the_sdk_types_otherwise_does_not_warn() -> None:
    """Fingerprinted fresh, through the memo (twice) and as the caller's dict: no warning."""
    item = _sdk_item()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        memo = Memo()
        fps = [fingerprint(item), *fingerprint_items([item], memo)[0], *fingerprint_items([item], memo)[0]]
        plain = item.to_dict(mode="json", warnings=False)
        fps.append(fingerprint(plain))
    assert len(set(fps)) == 1


def test_a_wrapped_loop_over_such_a_response_chains_without_a_warning(search_server: ResponsesServer) -> None:
    """Under warnings-as-errors, the wrapped client records the response and the next call chains."""
    raw = openai.OpenAI(base_url=search_server.base_url, api_key="test", max_retries=0)
    client = anchortrack.wrap(raw, store=MemoryStore())
    history: list[Any] = [{"role": "user", "content": "weather in Paris?"}]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for text in ("and tomorrow?", "thanks"):
            resp = client.responses.create(model="m", input=history)
            history += resp.output
            history.append({"role": "user", "content": text})
        client.responses.create(model="m", input=history)
    stats = anchortrack.tracker(client).stats
    assert 2 == stats.count("chained")


def test_recording_such_a_response_does_not_warn() -> None:
    """`record_response` of a response holding the web search call: recorded, no warning."""
    item = _sdk_item()
    response = type("R", (), {"id": "resp_1", "status": "completed", "output": [item]})()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        anchor = anchortrack.record_response(
            [{"role": "user", "content": "weather?"}],
            response,
            scope=Scope("http://x/v1"),
            store=MemoryStore(),
        )
    assert anchor is not None
