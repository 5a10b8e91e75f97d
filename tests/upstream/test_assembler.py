"""The stream assembler alone (pure): provider chunk quirks and redaction across deltas."""

from __future__ import annotations

from typing import Any

import pytest

from anchortrack.server import ServerState
from anchortrack.server._reconstruct import Origin, StreamAssembler, reconstruct
from anchortrack.server._translate import ChatPlan, build_chat_request

from .helpers import normalized


def _plan(tools: list[dict[str, Any]] | None = None) -> ChatPlan:
    body: dict[str, Any] = {"model": "m", "input": "x", "stream": True}
    if tools:
        body["tools"] = tools
    turn = ServerState().resolve(body)
    return build_chat_request(turn.request, turn.context, model="m")


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


ORIGIN = Origin("http://p/v1", "m", "resp_1")


def _run(assembler: StreamAssembler, chunks: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], Any]:
    events = [event for chunk in chunks for event in assembler.feed(chunk)]
    closing, reply = assembler.finish()
    return events + closing, reply


def test_whole_calls_without_index_or_id_get_stable_call_ids() -> None:
    """Whole calls without index or id (Ollama-style): the same call ids live and final."""
    tools = [{"type": "function", "name": "f"}, {"type": "function", "name": "g"}]
    plan = _plan(tools)
    calls = [
        {"function": {"name": "f", "arguments": {"a": 1}}},
        {"function": {"name": "g", "arguments": "{}"}},
    ]

    third = {"function": {"name": "f", "arguments": "{}"}}
    chunks = [_chunk({"tool_calls": calls}), _chunk({"tool_calls": [third]}), _chunk({}, "tool_calls")]

    events, reply = _run(StreamAssembler(plan, ORIGIN), chunks)

    added = [event["item"] for event in events if event["type"] == "response.output_item.added"]
    assert [(item["name"], item["call_id"]) for item in added] == [
        (c["name"], c["call_id"]) for c in reply.output
    ]
    assert all(item["call_id"].startswith("call_") for item in added)
    assert [c["arguments"] for c in reply.output] == ['{"a":1}', "{}", "{}"]
    assert len({c["call_id"] for c in reply.output}) == 3


def test_stream_reply_equals_reconstruction_of_the_same_completion() -> None:
    """finish() gives what reconstruct() gives for the completion the chunks add up to."""
    plan = _plan()
    chunks = [
        _chunk({"reasoning_content": "hm"}),
        _chunk({"content": "hel"}),
        _chunk({"content": "lo"}, "stop"),
    ]
    assembler = StreamAssembler(plan, ORIGIN)

    _, reply = _run(assembler, chunks)

    assert normalized(reply.output) == normalized(reconstruct(assembler.completion(), plan, ORIGIN).output)
    assert [item["type"] for item in reply.output] == ["reasoning", "message"]


@pytest.mark.parametrize(
    ("secret", "size"), [("sk-abcdefgh", 3), ("sk-abcdefgh", 1), ("Q", 3), ("Q", 1), ("QZ", 2)]
)
def test_a_secret_split_across_deltas_never_leaves_unredacted(secret: str, size: int) -> None:
    """Deltas hold back a possible secret prefix; joined they equal the redacted final text (a one-character
    secret, which holds nothing back, included)."""
    text = f"key={secret}; again {secret[:5]}|{secret} end {secret[:3]}"
    chunks = [_chunk({"content": text[i : i + size]}) for i in range(0, len(text), size)] + [
        _chunk({}, "stop")
    ]

    events, reply = _run(StreamAssembler(_plan(), ORIGIN, secret=secret), chunks)

    deltas = [event["delta"] for event in events if event["type"] == "response.output_text.delta"]
    final = reply.output[0]["content"][0]["text"]
    assert "".join(deltas) == final == text.replace(secret, "[redacted]")
    assert all(secret not in delta for delta in deltas)
    assert secret not in str(events)
