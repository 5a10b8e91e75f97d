"""Tests for the canonical form: the table in `anchortrack._canonical`, item by item."""

from __future__ import annotations

import hashlib
import json
import typing
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseReasoningItem,
)
from openai.types.responses.response_reasoning_item import Summary

from anchortrack._canonical import (
    CANONICAL_VERSION,
    ITEM_TYPES,
    ItemError,
    canonical_item,
    dump_canonical,
    json_tokens,
)
from anchortrack._hashing import fingerprint


SCHEMA_FILE = Path(__file__).resolve().parent.parent / "data" / "create_response.schema.json"


def _msg(role: str, text: str, kind: str) -> dict[str, object]:
    return {"type": "message", "role": role, "content": [{"type": kind, "text": text}]}


_TOOL: dict[str, Any] = {"name": "t", "input_schema": {"type": "object", "properties": {}}}


def _schema_with(value: object) -> dict[str, Any]:
    """A JSON schema whose one property has the default *value* (``...``: no default)."""
    prop: dict[str, Any] = {"type": ["string", "null"]}
    if value is not ...:
        prop["default"] = value
    return {"type": "object", "properties": {"x": prop}}


def _free_form_pairs(value: object, other: object) -> list[Any]:
    """Every place a free-form JSON value sits, holding a schema with default *value* vs *other*."""

    def items(v: object) -> list[tuple[str, dict[str, Any]]]:
        schema = _schema_with(v)
        tool = {"type": "function", "name": "f", "parameters": schema, "strict": False}
        returning = {"type": "function", "name": "f", "parameters": {}, "output_schema": schema}
        args = {"query": "x"} if v is ... else {"query": "x", "limit": v}
        return [
            ("mcp-list-tools-input-schema", {"type": "mcp_list_tools", "id": "l", "server_label": "s",
                                              "tools": [{"name": "t", "input_schema": schema}]}),
            ("mcp-list-tools-annotations", {"type": "mcp_list_tools", "id": "l", "server_label": "s",
                                             "tools": [{"name": "t", "input_schema": {},
                                                        "annotations": schema}]}),
            ("additional-tools", {"type": "additional_tools", "tools": [tool]}),
            ("additional-tools-output-schema", {"type": "additional_tools", "tools": [returning]}),
            ("tool-search-output", {"type": "tool_search_output", "call_id": "c", "tools": [tool]}),
            ("tool-search-output-output-schema", {"type": "tool_search_output", "call_id": "c",
                                                  "tools": [{"type": "namespace", "tools": [returning]}]}),
            ("tool-search-call-arguments", {"type": "tool_search_call", "call_id": "c", "arguments": args}),
            ("configuration-update-schema", {"type": "configuration_update", "id": "cu",
                                             "text": {"format": {"type": "json_schema", "name": "n",
                                                                 "schema": schema}}}),
        ]  # fmt: skip

    return [
        pytest.param(a, b, id=f"{name}-{value!r}-vs-{other!r}")
        for (name, a), (_, b) in zip(items(value), items(other), strict=True)
    ]


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
    pytest.param(
        {"type": "reasoning", "id": "rs_1", "summary": [], "content": [], "encrypted_content": "E"},
        {"type": "reasoning", "summary": [], "encrypted_content": "E"},
        id="reasoning-empty-content-list",
    ),
    pytest.param(
        {
            "type": "mcp_list_tools",
            "id": "l",
            "server_label": "s",
            "tools": [_TOOL, {**_TOOL, "annotations": None}],
        },
        {
            "type": "mcp_list_tools",
            "id": "l",
            "server_label": "s",
            "tools": [_TOOL, {**_TOOL, "description": None}],
        },
        id="null-api-field-around-free-form-json",
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
    pytest.param({"id": "msg_1"}, {"id": "msg_2"}, id="typeless-item-reference-id-is-content"),
    # Free-form JSON (a tool's schema, a tool search's arguments) is passed through verbatim: null is data.
    *_free_form_pairs(None, ...),
    *_free_form_pairs(1, 1.0),
    *_free_form_pairs(1, True),
    *_free_form_pairs(None, "null"),
    pytest.param(
        {"role": "user", "content": "x\ud800"},
        {"role": "user", "content": "x\ufffd"},
        id="lone-surrogate-text",
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


# -- the per-type table: one row per item type of the spec and the SDK ---------------------------


def _with(item: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """A copy of *item* with *changes* (a value of None removes the key)."""
    out = {**item, **changes}
    return {k: v for k, v in out.items() if v is not None}


def _reordered(item: dict[str, Any]) -> dict[str, Any]:
    """The same item with its keys in reverse order and an explicit null."""
    return {**dict(reversed(list(item.items()))), "zz_unset": None}


_SCREENSHOT = {"type": "computer_screenshot", "image_url": "data:image/png;base64,AAAA"}
_MSG = _msg("user", "hi", "input_text")
_CALL = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": '{"a": 1, "b": [1.0, "x"]}'}


# type → (row name, base item, equivalent variants, different variants)
ROWS: list[tuple[str, dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]] = [
    (
        "message",
        _MSG,
        [_with(_MSG, id="msg_9", status="completed"), {"role": "user", "content": "hi"}],
        [_msg("user", "hi!", "input_text"), _msg("developer", "hi", "input_text")],
    ),
    (
        "item_reference",
        {"type": "item_reference", "id": "msg_1"},
        [{"id": "msg_1"}],
        [{"id": "msg_2"}, {"type": "item_reference", "id": "msg_2"}],
    ),
    (
        "function_call",
        _CALL,
        [
            _with(_CALL, id="fc_9", status="completed"),
            _with(_CALL, arguments='{ "b" : [ 1.0 , "x" ] , "a" : 1 }'),
        ],
        [
            _with(_CALL, arguments='{"a": 1.0, "b": [1.0, "x"]}'),
            _with(_CALL, arguments='{"a": 1, "b": [1.00, "x"]}'),
            _with(_CALL, call_id="c2"),
        ],
    ),
    (
        "function_call_output",
        {"type": "function_call_output", "call_id": "c1", "output": '{"a": 1}'},
        [
            {
                "type": "function_call_output",
                "call_id": "c1",
                "output": '{"a": 1}',
                "id": "fco_1",
                "status": "completed",
            }
        ],
        [
            {"type": "function_call_output", "call_id": "c1", "output": '{"a":1}'},
            {"type": "function_call_output", "call_id": "c2", "output": '{"a": 1}'},
        ],
    ),
    (
        "custom_tool_call",
        {"type": "custom_tool_call", "call_id": "c1", "name": "calc", "input": "1.10"},
        [
            {
                "type": "custom_tool_call",
                "call_id": "c1",
                "name": "calc",
                "input": "1.10",
                "id": "ctc_1",
                "status": "completed",
            }
        ],
        [
            {"type": "custom_tool_call", "call_id": "c1", "name": "calc", "input": "1.1"},
            {"type": "custom_tool_call", "call_id": "c1", "name": "calc", "input": " 1.10\n"},
        ],
    ),
    (
        "custom_tool_call_output",
        {"type": "custom_tool_call_output", "call_id": "c1", "output": "42"},
        [
            {
                "type": "custom_tool_call_output",
                "call_id": "c1",
                "output": "42",
                "id": "ctco_1",
                "status": "completed",
            }
        ],
        [{"type": "custom_tool_call_output", "call_id": "c1", "output": " 42\n"}],
    ),
    (
        "computer_call",
        {
            "type": "computer_call",
            "call_id": "c1",
            "action": {"type": "click", "x": 1, "y": 2},
            "pending_safety_checks": [],
        },
        [
            {
                "type": "computer_call",
                "call_id": "c1",
                "action": {"type": "click", "x": 1, "y": 2},
                "pending_safety_checks": [],
                "id": "cu_1",
                "status": "completed",
            }
        ],
        [
            {
                "type": "computer_call",
                "call_id": "c1",
                "action": {"type": "click", "x": 1, "y": 3},
                "pending_safety_checks": [],
            }
        ],
    ),
    (
        "computer_call_output",
        {"type": "computer_call_output", "call_id": "c1", "output": _SCREENSHOT},
        [
            {
                "type": "computer_call_output",
                "call_id": "c1",
                "output": _SCREENSHOT,
                "id": "cuo_1",
                "status": "completed",
            }
        ],
        [{"type": "computer_call_output", "call_id": "c2", "output": _SCREENSHOT}],
    ),
    (
        "shell_call",
        {"type": "shell_call", "call_id": "c1", "action": {"commands": ["ls"]}, "status": "completed"},
        [
            {
                "type": "shell_call",
                "call_id": "c1",
                "action": {"commands": ["ls"]},
                "status": "completed",
                "id": "sh_1",
            }
        ],
        [{"type": "shell_call", "call_id": "c1", "action": {"commands": ["ls"]}, "status": "incomplete"}],
    ),
    (
        "shell_call_output",
        {
            "type": "shell_call_output",
            "call_id": "c1",
            "output": [{"stdout": "a", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}],
        },
        [
            {
                "type": "shell_call_output",
                "call_id": "c1",
                "id": "sho_1",
                "output": [{"stdout": "a", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}],
            }
        ],
        [
            {
                "type": "shell_call_output",
                "call_id": "c1",
                "output": [{"stdout": "a", "stderr": "", "outcome": {"type": "exit", "exit_code": 1}}],
            }
        ],
    ),
    (
        "apply_patch_call",
        {
            "type": "apply_patch_call",
            "call_id": "c1",
            "status": "completed",
            "operation": {"type": "delete_file", "path": "a"},
        },
        [
            {
                "type": "apply_patch_call",
                "call_id": "c1",
                "status": "completed",
                "operation": {"type": "delete_file", "path": "a"},
                "id": "ap_1",
            }
        ],
        [
            {
                "type": "apply_patch_call",
                "call_id": "c1",
                "status": "in_progress",
                "operation": {"type": "delete_file", "path": "a"},
            }
        ],
    ),
    (
        "apply_patch_call_output",
        {"type": "apply_patch_call_output", "call_id": "c1", "status": "completed", "output": "done"},
        [
            {
                "type": "apply_patch_call_output",
                "call_id": "c1",
                "status": "completed",
                "output": "done",
                "id": "apo_1",
            }
        ],
        [{"type": "apply_patch_call_output", "call_id": "c1", "status": "failed", "output": "done"}],
    ),
    (
        "mcp_approval_response",
        {"type": "mcp_approval_response", "approval_request_id": "mcpr_1", "approve": True},
        [{"type": "mcp_approval_response", "approval_request_id": "mcpr_1", "approve": True, "id": "mcpa_1"}],
        [
            {"type": "mcp_approval_response", "approval_request_id": "mcpr_2", "approve": True},
            {"type": "mcp_approval_response", "approval_request_id": "mcpr_1", "approve": False},
        ],
    ),
    (
        "reasoning-encrypted",
        {"type": "reasoning", "summary": [], "encrypted_content": "E"},
        [{"type": "reasoning", "summary": [], "encrypted_content": "E", "id": "rs_2", "status": "completed"}],
        [{"type": "reasoning", "summary": [], "encrypted_content": "F"}],
    ),
    (
        "reasoning-by-id",
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "s"}]},
        [
            {
                "type": "reasoning",
                "id": "rs_1",
                "summary": [{"type": "summary_text", "text": "s"}],
                "status": "completed",
                "encrypted_content": None,
            }
        ],
        [
            {"type": "reasoning", "id": "rs_2", "summary": [{"type": "summary_text", "text": "s"}]},
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "s"}]},
            {
                "type": "reasoning",
                "id": "rs_1",
                "summary": [{"type": "summary_text", "text": "s"}],
                "encrypted_content": "",
            },
        ],
    ),
    (
        "compaction",
        {"type": "compaction", "encrypted_content": "E"},
        [{"type": "compaction", "encrypted_content": "E", "id": "cmp_1"}],
        [{"type": "compaction", "encrypted_content": "F"}],
    ),
    (
        "mcp_approval_request",
        {"type": "mcp_approval_request", "id": "mcpr_1", "server_label": "s", "name": "t", "arguments": "{}"},
        [],
        [
            {
                "type": "mcp_approval_request",
                "id": "mcpr_2",
                "server_label": "s",
                "name": "t",
                "arguments": "{}",
            },
            {"type": "mcp_approval_request", "server_label": "s", "name": "t", "arguments": "{}"},
            {
                "type": "mcp_approval_request",
                "id": "mcpr_1",
                "server_label": "s",
                "name": "t",
                "arguments": "{ }",
            },
        ],
    ),
    (
        "local_shell_call",
        {
            "type": "local_shell_call",
            "id": "lsh_1",
            "call_id": "c1",
            "action": {"type": "exec", "command": ["ls"], "env": {}},
            "status": "completed",
        },
        [],
        [
            {
                "type": "local_shell_call",
                "id": "lsh_2",
                "call_id": "c1",
                "action": {"type": "exec", "command": ["ls"], "env": {}},
                "status": "completed",
            },
            {
                "type": "local_shell_call",
                "id": "lsh_1",
                "call_id": "c1",
                "action": {"type": "exec", "command": ["ls"], "env": {}},
                "status": "incomplete",
            },
        ],
    ),
    (
        "local_shell_call_output",
        {"type": "local_shell_call_output", "id": "c1", "output": '{"stdout": "a"}'},
        [],
        [
            {"type": "local_shell_call_output", "id": "c2", "output": '{"stdout": "a"}'},
            {"type": "local_shell_call_output", "id": "c1", "output": '{"stdout":"a"}'},
        ],
    ),
    (
        "mcp_call",
        {
            "type": "mcp_call",
            "id": "mcp_1",
            "server_label": "s",
            "name": "t",
            "arguments": '{"a": 1}',
            "output": "x",
            "status": "completed",
        },
        [],
        [
            {
                "type": "mcp_call",
                "id": "mcp_2",
                "server_label": "s",
                "name": "t",
                "arguments": '{"a": 1}',
                "output": "x",
                "status": "completed",
            },
            {
                "type": "mcp_call",
                "id": "mcp_1",
                "server_label": "s",
                "name": "t",
                "arguments": '{"a":1}',
                "output": "x",
                "status": "completed",
            },
            {
                "type": "mcp_call",
                "id": "mcp_1",
                "server_label": "s",
                "name": "t",
                "arguments": '{"a": 1}',
                "output": "x",
                "status": "failed",
            },
        ],
    ),
    (
        "mcp_list_tools",
        {"type": "mcp_list_tools", "id": "mcpl_1", "server_label": "s", "tools": []},
        [],
        [{"type": "mcp_list_tools", "id": "mcpl_2", "server_label": "s", "tools": []}],
    ),
    (
        "web_search_call",
        {
            "type": "web_search_call",
            "id": "ws_1",
            "status": "completed",
            "action": {"type": "search", "query": "q"},
        },
        [],
        [
            {
                "type": "web_search_call",
                "id": "ws_2",
                "status": "completed",
                "action": {"type": "search", "query": "q"},
            },
            {
                "type": "web_search_call",
                "id": "ws_1",
                "status": "failed",
                "action": {"type": "search", "query": "q"},
            },
        ],
    ),
    (
        "file_search_call",
        {"type": "file_search_call", "id": "fs_1", "status": "completed", "queries": ["q"]},
        [],
        [{"type": "file_search_call", "id": "fs_2", "status": "completed", "queries": ["q"]}],
    ),
    (
        "code_interpreter_call",
        {
            "type": "code_interpreter_call",
            "id": "ci_1",
            "status": "completed",
            "container_id": "cntr_1",
            "code": "1",
            "outputs": [],
        },
        [],
        [
            {
                "type": "code_interpreter_call",
                "id": "ci_2",
                "status": "completed",
                "container_id": "cntr_1",
                "code": "1",
                "outputs": [],
            }
        ],
    ),
    (
        "image_generation_call",
        {"type": "image_generation_call", "id": "ig_1", "status": "completed", "result": "QUJD"},
        [],
        [{"type": "image_generation_call", "id": "ig_2", "status": "completed", "result": "QUJD"}],
    ),
    (
        "tool_search_call",
        {
            "type": "tool_search_call",
            "id": "ts_1",
            "arguments": {},
            "execution": "server",
            "status": "completed",
        },
        [],
        [
            {
                "type": "tool_search_call",
                "id": "ts_2",
                "arguments": {},
                "execution": "server",
                "status": "completed",
            }
        ],
    ),
    (
        "tool_search_output",
        {
            "type": "tool_search_output",
            "id": "tso_1",
            "tools": [],
            "execution": "server",
            "status": "completed",
        },
        [],
        [
            {
                "type": "tool_search_output",
                "id": "tso_2",
                "tools": [],
                "execution": "server",
                "status": "completed",
            }
        ],
    ),
    (
        "program",
        {"type": "program", "id": "prg_1", "call_id": "c1", "code": "x()", "fingerprint": "fp"},
        [],
        [{"type": "program", "id": "prg_2", "call_id": "c1", "code": "x()", "fingerprint": "fp"}],
    ),
    (
        "program_output",
        {"type": "program_output", "id": "prgo_1", "call_id": "c1", "result": "r", "status": "completed"},
        [],
        [
            {"type": "program_output", "id": "prgo_2", "call_id": "c1", "result": "r", "status": "completed"},
            {
                "type": "program_output",
                "id": "prgo_1",
                "call_id": "c1",
                "result": "r",
                "status": "incomplete",
            },
        ],
    ),
    (
        "additional_tools",
        {"type": "additional_tools", "role": "developer", "tools": []},
        [],
        [{"type": "additional_tools", "role": "developer", "tools": [], "id": "at_1"}],
    ),
    (
        "compaction_trigger",
        {"type": "compaction_trigger"},
        [],
        [{"type": "compaction_trigger", "id": "ct_1"}],
    ),
    (
        "configuration_update",
        {"type": "configuration_update", "id": "cfg_1", "text": {"verbosity": "low"}},
        [],
        [{"type": "configuration_update", "id": "cfg_2", "text": {"verbosity": "low"}}],
    ),
    (
        "unknown-type",
        {"type": "brand_new_item", "id": "new_1", "status": "completed", "value": 1},
        [],
        [
            {"type": "brand_new_item", "id": "new_2", "status": "completed", "value": 1},
            {"type": "brand_new_item", "status": "completed", "value": 1},
            {"type": "brand_new_item", "id": "new_1", "status": "in_progress", "value": 1},
        ],
    ),
    (
        "no-type-no-role",
        {"id": "x_1", "note": "?"},
        [],
        [{"id": "x_2", "note": "?"}, {"note": "?"}],
    ),
]


def _type_of_row(name: str) -> str:
    return name.split("-")[0]


@pytest.mark.parametrize(("name", "base", "equivalent"), [pytest.param(n, b, e, id=n) for n, b, e, _ in ROWS])
def test_table_row_equivalent_items(
    name: str, base: dict[str, Any], equivalent: list[dict[str, Any]]
) -> None:
    """Every row: its equivalent variants (and key order, explicit nulls) share a fingerprint."""
    for variant in [*equivalent, _reordered(base)]:
        assert canonical_item(variant) == canonical_item(base), variant
        assert fingerprint(variant) == fingerprint(base)


@pytest.mark.parametrize(("name", "base", "different"), [pytest.param(n, b, d, id=n) for n, b, _, d in ROWS])
def test_table_row_different_items(name: str, base: dict[str, Any], different: list[dict[str, Any]]) -> None:
    """Every row: each change the model (or the server's id resolution) sees gives another fingerprint."""
    assert different
    for item in different:
        assert canonical_item(item) != canonical_item(base), item
        assert fingerprint(item) != fingerprint(base)


def _union_types(union: Any) -> set[str]:
    members = typing.get_args(union)
    if members and typing.get_origin(union) is typing.Annotated:
        members = typing.get_args(members[0])
    out: set[str] = set()
    for member in members:
        for arg in typing.get_args(member.model_fields["type"].annotation):
            out |= {a for a in typing.get_args(arg) or (arg,) if isinstance(a, str)}
    return out


def _schema_types(name: str) -> set[str]:
    doc = json.loads(SCHEMA_FILE.read_text())
    schemas = doc["components"]["schemas"]
    schema = schemas[name]
    out: set[str] = set()
    for member in schema.get("oneOf", []) + schema.get("anyOf", []) + schema.get("allOf", []):
        if "$ref" in member:
            out |= _schema_types(member["$ref"].split("/")[-1])
    kind = schema.get("properties", {}).get("type", {})
    for option in [kind, *kind.get("anyOf", [])]:
        out |= set(option.get("enum", []))
    return out


def test_every_item_type_of_the_spec_and_the_sdk_has_a_row() -> None:
    """The table covers every input item of the spec's InputItem union and every SDK item type."""
    from openai.types.responses import ResponseInputItem, ResponseItem, ResponseOutputItem

    spec = _schema_types("InputItem")
    sdk = _union_types(ResponseInputItem) | _union_types(ResponseOutputItem) | _union_types(ResponseItem)
    rows = {_type_of_row(name) for name, *_ in ROWS}
    ruled = set(ITEM_TYPES)

    assert len(spec) >= 30
    assert spec <= rows
    assert sdk <= rows
    assert (spec | sdk) <= ruled
    assert ruled <= rows, "a rule without a row here: every rule is pinned by a test"
    assert rows - ruled == {"unknown", "no"}, "a row here for a type without its row in ITEM_TYPES"


def test_every_row_of_the_table_is_consistent() -> None:
    """What a row says about its pair holds: the answered type is a row, and an id something links to
    (an answer naming its call by id, a response naming its request's id) is never bookkeeping."""
    for name, row in ITEM_TYPES.items():
        assert row.why, name
        assert row.model_output in (True, False, "assistant"), name
        assert all(path and path[-1] != "*" for path in row.free_form), name
        if row.answers is None:
            continue
        answered, link = row.answers
        assert ITEM_TYPES[answered].answers is None, name
        if link != "call_id":
            assert "id" not in ITEM_TYPES[answered].ignored, f"{answered}: {name} names it by its id"
        if link == "id":
            assert "id" not in row.ignored, name


@pytest.mark.parametrize(("name", "base"), [pytest.param(n, b, id=n) for n, b, _, _ in ROWS])
def test_every_row_drops_exactly_its_bookkeeping(name: str, base: dict[str, Any]) -> None:
    """Changing a key the row calls bookkeeping keeps the fingerprint; changing a kept id does not."""
    row = ITEM_TYPES.get(str(base.get("type")))
    if row is None:
        return
    for key in row.ignored:
        assert fingerprint(_with(base, **{key: "changed"})) == fingerprint(base), key
    if "id" not in row.ignored and row.normalize is None:
        assert fingerprint(_with(base, id="a")) != fingerprint(_with(base, id="b"))


def test_model_output_follows_the_row() -> None:
    """A history has model output when it holds an assistant message or a type only the model makes."""
    from anchortrack._hashing import fingerprint_items

    def has_model(item: object) -> bool:
        return fingerprint_items([item])[2]

    assert has_model(_msg("assistant", "hi", "output_text"))
    assert has_model({"role": "assistant", "content": "hi"})
    assert not has_model(_MSG)
    assert has_model(_CALL)
    assert not has_model({"type": "function_call_output", "call_id": "c1", "output": "x"})
    assert not has_model({"type": "unknown", "role": "assistant"})
    for name, base, _, _ in ROWS:
        row = ITEM_TYPES.get(str(base.get("type")))
        expected = row is not None and row.model_output in (True, base.get("role"))
        assert has_model(base) == expected, name


#: The canonical bytes of every row's base item, digested, by `CANONICAL_VERSION`. A released version's
#: entry is never edited: when the digest changes (an item's canonical bytes changed, or a type gained a
#: row), bump CANONICAL_VERSION and add the new version's entry; while that version is unreleased, a
#: further change replaces its entry (docs/code.md, "A new item type").
CANONICAL_DIGESTS = {3: "c77296dd8ed45c0c61fe77f03cfc8730", 4: "c77296dd8ed45c0c61fe77f03cfc8730"}


def test_canonical_bytes_change_only_with_the_canonical_version() -> None:
    """Anchors recorded under one version must never match another's bytes: a change needs a bump."""
    lines = sorted(f"{name} {dump_canonical(canonical_item(base)).hex()}" for name, base, _, _ in ROWS)
    digest = hashlib.sha256("\n".join(lines).encode()).hexdigest()[:32]

    assert CANONICAL_DIGESTS.get(CANONICAL_VERSION) == digest, (
        f"canonical bytes changed: bump CANONICAL_VERSION and add {{{CANONICAL_VERSION + 1}: {digest!r}}} "
        f"(or, if version {CANONICAL_VERSION} is not released yet, make its entry {digest!r})"
    )


# -- JSON strings: arguments compare by token, everything else verbatim --------------------------

SAME_ARGUMENTS = [
    ('{"a": 1}', '{"a":1}'),
    ('{"a": 1, "b": 2}', '{"b":2,"a":1}'),
    (' [1, "x"]\n', '[1,"x"]'),
    ('"\\u00e9"', '"é"'),
    ('{"a": NaN}', '{"a":NaN}'),
    ('{"a": {"y": [], "x": {}}}', '{"a":{"x":{},"y":[]}}'),
    ('{"q": "\\ud800"}', '{"q":"\\ud800"}'),  # a lone surrogate escape: JSON-legal
    ('"\\ud83d\\ude00"', '"\U0001f600"'),
]
DIFFERENT_ARGUMENTS = [
    ("1.0", "1.00"),
    ("1.0", "1"),
    ("1e2", "100.0"),
    ("1e2", "1E2"),
    ("-0", "0"),
    ("-0.0", "0.0"),
    ("0.1", "0.10000000000000001"),
    ("1e400", "1e401"),
    ("123456789012345678901234567890", "123456789012345678901234567891"),
    ('{"a": 1, "a": 2}', '{"a": 2}'),
    ('{"a": 1, "a": 2}', '{"a": 2, "a": 1}'),
    ('{"a": 1, "a": 2}', '{"a":1,"a":2}'),
    ("{a: 1}", "{a:1}"),
    ('{"a": 1} x', '{"a":1} x'),
    ('"\\ud800"', '"\\ud801"'),
    ('"\\ud800"', '"\\ufffd"'),
    ('"\\ud800"', '"\\\\ud800"'),
    ('"\\ud83d"', '"\\ud83d\\ude00"'),
]


@pytest.mark.parametrize(("a", "b"), SAME_ARGUMENTS)
def test_arguments_equal_modulo_whitespace_key_order_and_escapes(a: str, b: str) -> None:
    """Frameworks re-serialise function call arguments: that is not a change."""
    assert fingerprint(_with(_CALL, arguments=a)) == fingerprint(_with(_CALL, arguments=b))


@pytest.mark.parametrize(("a", "b"), DIFFERENT_ARGUMENTS)
def test_arguments_compare_numbers_by_token_and_never_collapse_duplicate_keys(a: str, b: str) -> None:
    """Numbers by exact token, no float rounding; a repeated key or non-JSON text compares verbatim."""
    assert fingerprint(_with(_CALL, arguments=a)) != fingerprint(_with(_CALL, arguments=b))


def test_json_tokens_keeps_number_tokens() -> None:
    """The normal form of an arguments string keeps each number's spelling."""
    assert json_tokens('{ "b": [1.50, -0, 1E+2], "a": "\\u00e9" }') == '{"a":"é","b":[1.50,-0,1E+2]}'
    assert json_tokens('{"a": 1, "a": 1}') is None
    assert json_tokens("[" * 100_000) is None
    assert json_tokens("not json") is None


@pytest.mark.parametrize(
    ("kind", "field"),
    [
        ("custom_tool_call", "input"),
        ("mcp_call", "arguments"),
        ("mcp_approval_request", "arguments"),
        ("function_call_output", "output"),
        ("custom_tool_call_output", "output"),
        ("local_shell_call_output", "output"),
    ],
)
def test_other_json_strings_compare_verbatim(kind: str, field: str) -> None:
    """Free text, MCP arguments (sent back as the server wrote them) and every tool output: verbatim."""
    item = {"type": kind, "call_id": "c1", "id": "x_1", field: '{"a": 1}'}

    assert fingerprint(item) != fingerprint({**item, field: '{"a":1}'})


# -- user types count by their data ---------------------------------------------------------------


class LyingStr(str):
    """A log-masking string: equal to everything, printed as a mask."""

    def __eq__(self, other: object) -> bool:
        return True

    def __ne__(self, other: object) -> bool:
        return False

    def __hash__(self) -> int:
        return 0

    def __repr__(self) -> str:
        return "'***'"

    def __str__(self) -> str:
        return "***"


class LyingInt(int):
    def __eq__(self, other: object) -> bool:
        return True

    def __hash__(self) -> int:
        return 0

    def __repr__(self) -> str:
        return "1"

    def __int__(self) -> int:
        return 1


class LyingFloat(float):
    def __eq__(self, other: object) -> bool:
        return True

    def __hash__(self) -> int:
        return 0

    def __repr__(self) -> str:
        return "1.0"

    def __float__(self) -> float:
        return 1.0


def test_subclass_scalars_count_by_their_data() -> None:
    """A str/int/float subclass is canonicalized by its data, whatever its own methods claim."""
    plain = {"type": "x", "role_": "user", "text": "card 4111", "n": 5, "f": 2.5}
    masked = {
        LyingStr("type"): LyingStr("x"),
        "role_": LyingStr("user"),
        "text": LyingStr("card 4111"),
        "n": LyingInt(5),
        "f": LyingFloat(2.5),
    }
    other = {**plain, "text": "card 4112"}

    assert canonical_item(masked) == canonical_item(plain)
    assert fingerprint(masked) == fingerprint(plain) != fingerprint(other)
    assert all(type(k) is str for k in canonical_item(masked))
    assert fingerprint(LyingStr("hi")) == fingerprint("hi")


def test_a_lying_type_string_cannot_pick_another_rule() -> None:
    """A subclass claiming to equal "message" is still compared as the type it spells."""
    item = {"type": LyingStr("brand_new"), "id": "x_1", "role": "user", "content": "hi"}

    assert canonical_item(item)["type"] == "brand_new"
    assert canonical_item(item)["id"] == "x_1"


# -- JSON texts compared by token: the C shortcut agrees with the token-by-token pass ----------------

_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=15,
)


def _slow_tokens(text: str) -> str | None:
    """`json_tokens` without its shortcut: the token-by-token pass alone."""
    from anchortrack import _canonical

    try:
        return _canonical._emit(_canonical._TOKEN_DECODER.decode(text))
    except (ValueError, RecursionError):
        return None


@settings(max_examples=500, deadline=None)
@given(
    value=_JSON_VALUES,
    sort_keys=st.booleans(),
    ensure_ascii=st.booleans(),
    separators=st.sampled_from([None, (",", ":"), (", ", ": "), (",", ": "), (" , ", " : ")]),
    tweak=st.sampled_from(["", "number", "duplicate", "escape"]),
)
def test_json_tokens_shortcut_agrees_with_the_token_pass(
    value: Any, sort_keys: bool, ensure_ascii: bool, separators: Any, tweak: str
) -> None:
    """However a JSON text is spaced, sorted, escaped or numbered, the shortcut answers as the token pass."""
    text = json.dumps(value, sort_keys=sort_keys, ensure_ascii=ensure_ascii, separators=separators)
    if tweak == "number":
        text = text.replace("1", "1.0").replace("0.0", "0.00")
    elif tweak == "duplicate" and text.startswith("{") and text != "{}":
        text = "{" + text[1:-1] + "," + text[1:-1] + "}"
    elif tweak == "escape":
        text = text.replace("a", "\\u0061")
    assert json_tokens(text) == _slow_tokens(text)


@pytest.mark.parametrize(
    ("named", "by_id"),
    [
        (
            {
                "type": "message",
                "id": "msg_1",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "t"}],
            },
            {"type": "item_reference", "id": "msg_1"},
        ),
        (
            {
                "type": "message",
                "id": "msg_1",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "t"}],
            },
            {"id": "msg_1"},
        ),
        (
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "E"},
            {"type": "reasoning", "id": "rs_1", "summary": []},
        ),
    ],
)
def test_an_item_resolved_by_id_stays_apart_from_the_item_it_names(
    named: dict[str, Any], by_id: dict[str, Any]
) -> None:
    """
    The server resolves a reference (or id-only reasoning) to the item its id names, but equality is
    proved from the items alone: the named item's id is bookkeeping, so the two never share a
    fingerprint, and a copy of the named item under another id still equals it (the all-types fuzz's
    lost savings: a shorter anchor, once, after a history turns items into references).
    """
    assert fingerprint(named) != fingerprint(by_id)
    assert fingerprint(named) == fingerprint({**named, "id": "other_1"})
    assert fingerprint(by_id) != fingerprint({**by_id, "id": "other_1"})
