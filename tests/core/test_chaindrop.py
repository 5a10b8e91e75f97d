"""What shows that a server dropped a chain, over response objects as the SDK parses them."""

from __future__ import annotations

from typing import Any

import pytest
from openai.types.responses import Response, ResponseUsage

from anchortrack._chaindrop import ChainWatch, evidence, known_to_chain


def response(**fields: Any) -> Response:
    """A completed response of an unknown server with *fields*."""
    base = {
        "id": "resp_2",
        "object": "response",
        "created_at": 0,
        "model": "m",
        "output": [],
        "parallel_tool_calls": False,
        "tool_choice": "auto",
        "tools": [],
        "status": "completed",
        "previous_response_id": "resp_1",
        "usage": usage(30),
    }
    return Response.model_construct(**{**base, **fields})


def usage(input_tokens: int) -> ResponseUsage:
    return ResponseUsage.model_construct(input_tokens=input_tokens, output_tokens=1)


@pytest.mark.parametrize(
    ("url", "known"),
    [
        ("https://api.openai.com/v1", True),
        ("https://my-resource.openai.azure.com/openai/v1/", True),
        ("https://x.cognitiveservices.azure.com/openai/v1", True),
        ("https://x.services.ai.azure.com/openai/v1", True),
        ("http://127.0.0.1:4000/v1", False),
        ("https://api.openai.com.example.net/v1", False),
        ("https://openai.azure.com.evil/v1", False),
    ],
)
def test_known_hosts(url: str, known: bool) -> None:
    assert known is known_to_chain(url)


def test_a_response_naming_no_previous_response_id_dropped_the_chain() -> None:
    seen = evidence(response(previous_response_id=None), anchor_tokens=None)
    assert seen == "the response names no previous_response_id"


def test_a_context_no_larger_than_the_anchors_dropped_the_chain() -> None:
    """LiteLLM's Chat Completions bridge echoes an id but answers from the new items alone."""
    assert evidence(response(usage=usage(12)), anchor_tokens=12) is not None
    assert evidence(response(usage=usage(13)), anchor_tokens=12) is None


@pytest.mark.parametrize(
    "fields",
    [
        {"usage": usage(5), "truncation": "auto"},  # the server may have cut the context
        {"usage": None},  # no usage: no evidence
        {"usage": usage(5), "anchortrack": {"properties": "per_request"}},  # anchortrack serve
    ],
)
def test_no_evidence(fields: dict[str, Any]) -> None:
    assert evidence(response(**fields), anchor_tokens=12) is None


def test_the_watch_compares_with_the_anchors_tokens_and_trusts_known_hosts() -> None:
    watch = ChainWatch(kept=2)
    assert watch.begin("scope", "http://gateway.local/v1/") is False
    assert watch.check("scope", None, response(id="resp_1", usage=usage(12))) is None
    assert watch.check("scope", "resp_1", response(usage=usage(12))) is not None
    assert watch.flagged("resp_2") is not None
    assert watch.flagged("resp_2") is None  # once
    assert watch.check("scope", "resp_unknown", response(usage=usage(1))) is None  # anchor tokens unknown
    assert watch.stop("scope", "seen") is True
    assert watch.stop("scope", "seen") is False
    assert watch.begin("scope", "http://gateway.local/v1") is True
    assert "http://gateway.local/v1" == watch.base_url("scope")

    watch.begin("openai", "https://api.openai.com/v1")
    assert watch.check("openai", "resp_1", response(previous_response_id=None)) is None
