"""Tests for the canonical form: the table in `anchortrack._canonical`, item by item."""

from __future__ import annotations

import json

import pytest
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseReasoningItem,
)
from openai.types.responses.response_reasoning_item import Summary

from anchortrack._canonical import ItemError, canonical_item
from anchortrack._hashing import fingerprint


def _msg(role: str, text: str, kind: str) -> dict[str, object]:
    return {"type": "message", "role": role, "content": [{"type": kind, "text": text}]}


EQUIVALENT = [
    pytest.param("hi", _msg("user", "hi", "input_text"), id="string-input-is-user-message"),
    pytest.param({"role": "user", "content": "hi"}, _msg("user", "hi", "input_text"), id="user-shorthand"),
    pytest.param(
        {"role": "system", "content": "be brief"},
        _msg("system", "be brief", "input_text"),
        id="system-shorthand",
    ),
    pytest.param(
        {"role": "developer", "content": "x"}, _msg("developer", "x", "input_text"), id="developer-shorthand"
    ),
    pytest.param(
        {"role": "assistant", "content": "ok"},
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "ok", "annotations": [], "logprobs": []}],
        },
        id="assistant-shorthand-vs-server-output",
    ),
    pytest.param(
        {"type": "message", "role": "user", "content": "hi"},
        _msg("user", "hi", "input_text"),
        id="langchain-typed-shorthand",
    ),
    pytest.param(
        {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
        _msg("user", "hi", "input_text"),
        id="missing-type-is-message",
    ),
    pytest.param(
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": '{"city": "Paris"}'},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": '{"city":"Paris"}'},
        id="arguments-reserialized",
    ),
    pytest.param(
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": '{"a": 1, "b": 2}'},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": '{"b":2,"a":1}'},
        id="arguments-key-order",
    ),
    pytest.param(
        {
            "type": "function_call",
            "call_id": "c1",
            "name": "f",
            "arguments": "{}",
            "id": "fc_1",
            "status": "completed",
        },
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        id="id-and-status-ignored",
    ),
    pytest.param(
        {"type": "function_call_output", "call_id": "c1", "output": "42", "id": None, "status": None},
        {"type": "function_call_output", "call_id": "c1", "output": "42"},
        id="nulls-dropped",
    ),
    pytest.param(
        {"b": 1, "type": "x", "a": {"d": None, "c": 2}},
        {"a": {"c": 2}, "type": "x", "b": 1},
        id="key-order-and-nested-nulls",
    ),
    pytest.param(
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "t", "parsed": {"x": 1}, "annotations": []}],
        },
        {"role": "assistant", "content": "t"},
        id="sdk-only-parsed-field",
    ),
]

NOT_EQUIVALENT = [
    pytest.param({"role": "user", "content": "hi"}, {"role": "user", "content": "hi!"}, id="text"),
    pytest.param({"role": "user", "content": "hi"}, {"role": "system", "content": "hi"}, id="role"),
    pytest.param(
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call", "call_id": "c2", "name": "f", "arguments": "{}"},
        id="call-id",
    ),
    pytest.param(
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": '{"n": 1}'},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": '{"n": 1.0}'},
        id="int-vs-float-argument",
    ),
    pytest.param(
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call", "call_id": "c1", "name": "g", "arguments": "{}"},
        id="tool-name",
    ),
    pytest.param(
        {"type": "function_call_output", "call_id": "c1", "output": '{"a": 1}'},
        {"type": "function_call_output", "call_id": "c1", "output": '{"a":1}'},
        id="tool-output-is-read-verbatim",
    ),
    pytest.param(
        {"role": "assistant", "content": "ok", "phase": "commentary"},
        {"role": "assistant", "content": "ok", "phase": "final_answer"},
        id="phase",
    ),
    pytest.param(
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "A"},
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "B"},
        id="encrypted-content",
    ),
    pytest.param(
        {"role": "assistant", "content": [{"type": "input_text", "text": "x"}]},
        {"role": "assistant", "content": [{"type": "output_text", "text": "x"}]},
        id="explicit-part-types",
    ),
    pytest.param(
        {"type": "item_reference", "id": "msg_1"},
        {"type": "item_reference", "id": "msg_2"},
        id="item-reference-id-is-content",
    ),
]


@pytest.mark.parametrize(("a", "b"), EQUIVALENT)
def test_equivalent_items_share_a_fingerprint(a: object, b: object) -> None:
    """Items the API treats as the same have identical canonical forms."""
    assert canonical_item(a) == canonical_item(b)
    assert fingerprint(a) == fingerprint(b)


@pytest.mark.parametrize(("a", "b"), NOT_EQUIVALENT)
def test_different_items_have_different_fingerprints(a: object, b: object) -> None:
    """Items the model would see differently never share a fingerprint."""
    assert fingerprint(a) != fingerprint(b)


def test_sdk_models_equal_their_dumps() -> None:
    """An SDK output model, its model_dump() and its exclude_unset dump are one item."""
    models = [
        ResponseOutputMessage(
            id="msg_1",
            type="message",
            role="assistant",
            status="completed",
            content=[ResponseOutputText(type="output_text", text="hello", annotations=[])],
        ),
        ResponseFunctionToolCall(
            type="function_call",
            call_id="call_1",
            name="f",
            arguments='{"x": 1}',
            id="fc_1",
            status="completed",
        ),
        ResponseReasoningItem(
            id="rs_1",
            type="reasoning",
            summary=[Summary(type="summary_text", text="s")],
            encrypted_content="E",
        ),
    ]
    for model in models:
        assert fingerprint(model) == fingerprint(model.model_dump())
        assert fingerprint(model) == fingerprint(model.model_dump(mode="json", exclude_unset=True))
        assert fingerprint(model) == fingerprint(json.loads(model.model_dump_json()))


def test_canonical_form_does_not_mutate_the_item() -> None:
    """Canonicalizing leaves the caller's item exactly as it was."""
    item = {"role": "user", "content": [{"type": "input_text", "text": "x", "x": None}], "id": None}
    before = json.dumps(item, sort_keys=True)

    canonical_item(item)

    assert before == json.dumps(item, sort_keys=True)


@pytest.mark.parametrize("bad", [42, None, 3.5, object()])
def test_unsupported_items_raise_item_error(bad: object) -> None:
    """Something that is no Responses item is refused with a clear error."""
    with pytest.raises(ItemError, match="unsupported input item"):
        canonical_item(bad)
