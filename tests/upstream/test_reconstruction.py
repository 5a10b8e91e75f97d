"""Response reconstruction, table by table, through the real openai client in every mode."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from anchortrack.server import ResponsesServer

from .helpers import MODES, call, normalized
from .provider import OMIT, FakeProvider, Reply


# finish_reason → (status, incomplete_details, words in the error message)
FINISH_ROWS: list[tuple[Any, str, Any, str | None]] = [
    ("stop", "completed", None, None),
    ("tool_calls", "completed", None, None),
    ("length", "incomplete", {"reason": "max_output_tokens"}, None),
    ("model_context_window_exceeded", "incomplete", {"reason": "max_output_tokens"}, None),
    ("content_filter", "incomplete", {"reason": "content_filter"}, None),
    ("sensitive", "incomplete", {"reason": "content_filter"}, None),
    ("network_error", "failed", None, "network error"),
    (OMIT, "failed", None, "no finish reason"),
    ("eaten_by_a_grue", "failed", None, "unexpected finish reason: 'eaten_by_a_grue'"),
]

TOOLS: list[dict[str, Any]] = [
    {"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {}}},
    {"type": "custom", "name": "run_sql", "description": "Run SQL."},
    {"type": "shell"},
    {"type": "local_shell"},
    {"type": "apply_patch"},
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("finish", "status", "details", "error"),
    FINISH_ROWS,
    ids=["missing" if row[0] is OMIT else str(row[0]) for row in FINISH_ROWS],
)
def test_finish_reason_maps_to_status(
    provider: FakeProvider,
    bridge: ResponsesServer,
    bridge_client: openai.OpenAI,
    mode: str,
    finish: Any,
    status: str,
    details: Any,
    error: str | None,
) -> None:
    """Every finish reason gives its status (HTTP 200 even when failed), in every client mode."""
    provider.script(Reply(content="partial answer", finish_reason=finish))

    response = call(mode, bridge_client, bridge.base_url, model="m1", input="hi")

    assert (response["status"], response["incomplete_details"]) == (status, details)
    if error is None:
        assert response["error"] is None
    else:
        assert response["error"]["code"] == "server_error"
        assert error in response["error"]["message"]
    assert [item["type"] for item in response["output"]] == ["message"]
    message = response["output"][0]
    assert message["content"][0]["text"] == "partial answer"
    assert message["status"] == ("completed" if status == "completed" else "incomplete")
    stored = bridge_client.responses.retrieve(response["id"]).to_dict()
    assert stored["status"] == status


def _restore_rows() -> list[tuple[str, str, str, dict[str, Any]]]:
    sql = 'SELECT "a",\n  b FROM t -- ünïcode'
    return [
        (
            "function",
            "get_weather",
            '{"city": "Paris"}',
            {"type": "function_call", "name": "get_weather", "arguments": '{"city": "Paris"}'},
        ),
        (
            "custom",
            "run_sql",
            json.dumps({"input": sql}),
            {"type": "custom_tool_call", "name": "run_sql", "input": sql},
        ),
        (
            "shell",
            "shell",
            '{"commands": ["ls -la", "pwd"], "timeout_ms": 500}',
            {
                "type": "shell_call",
                "action": {"commands": ["ls -la", "pwd"], "timeout_ms": 500, "max_output_length": None},
            },
        ),
        (
            "local_shell",
            "local_shell",
            '{"command": ["echo", "hi"], "env": {"A": "1"}}',
            {
                "type": "local_shell_call",
                "action": {
                    "type": "exec",
                    "command": ["echo", "hi"],
                    "env": {"A": "1"},
                    "timeout_ms": None,
                    "working_directory": None,
                    "user": None,
                },
            },
        ),
        (
            "apply_patch",
            "apply_patch",
            '{"operation": {"type": "update_file", "path": "a.py", "diff": "@@ -1 +1 @@"}}',
            {
                "type": "apply_patch_call",
                "operation": {"type": "update_file", "path": "a.py", "diff": "@@ -1 +1 @@"},
            },
        ),
        (
            "custom-fallback",
            "run_sql",
            "SELECT 1",
            {"type": "function_call", "name": "run_sql", "arguments": "SELECT 1"},
        ),
        (
            "shell-fallback",
            "shell",
            '{"cmd": "ls"}',
            {"type": "function_call", "name": "shell", "arguments": '{"cmd": "ls"}'},
        ),
    ]


RESTORE_ROWS = _restore_rows()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("row", "provider_name", "arguments", "expected"), RESTORE_ROWS, ids=[r[0] for r in RESTORE_ROWS]
)
def test_tool_calls_are_restored_to_their_requested_type(
    provider: FakeProvider,
    bridge: ResponsesServer,
    bridge_client: openai.OpenAI,
    mode: str,
    row: str,
    provider_name: str,
    arguments: str,
    expected: dict[str, Any],
) -> None:
    """A provider call comes back as its tool's requested type; bad arguments → function_call."""
    provider.script(
        Reply(content=None, tool_calls=[("call_a1", provider_name, arguments)], finish_reason="tool_calls")
    )

    response = call(mode, bridge_client, bridge.base_url, model="m1", input="go", tools=TOOLS)

    assert response["status"] == "completed"
    [item] = response["output"]
    assert {key: item[key] for key in expected} == expected
    assert item["call_id"] == "call_a1"
    sent = provider.bodies[-1]["tools"]
    assert [tool["function"]["name"] for tool in sent] == [
        "get_weather",
        "run_sql",
        "shell",
        "local_shell",
        "apply_patch",
    ]
    assert sent[1]["function"]["parameters"]["required"] == ["input"]


@pytest.mark.parametrize("mode", MODES)
def test_reasoning_calls_then_message_in_order(
    provider: FakeProvider, bridge: ResponsesServer, bridge_client: openai.OpenAI, mode: str
) -> None:
    """reasoning_content → a reasoning item, then tool calls, then the text (even streamed text-first)."""
    provider.script(
        Reply(
            content="Let me look that up.",
            reasoning="The user wants weather; call the tool twice.",
            tool_calls=[
                ("call_p", "get_weather", '{"city":"Paris"}'),
                ("call_r", "get_weather", '{"city":"Rome"}'),
            ],
            finish_reason="tool_calls",
            text_first=True,
        )
    )

    response = call(mode, bridge_client, bridge.base_url, model="m1", input="weather?", tools=TOOLS)

    assert [item["type"] for item in response["output"]] == [
        "reasoning",
        "function_call",
        "function_call",
        "message",
    ]
    reasoning, paris, rome, message = response["output"]
    assert reasoning["content"] == [
        {"type": "reasoning_text", "text": "The user wants weather; call the tool twice."}
    ]
    assert (paris["call_id"], paris["arguments"], rome["call_id"]) == ("call_p", '{"city":"Paris"}', "call_r")
    assert message["content"][0]["text"] == "Let me look that up."
    assert response["usage"] == {
        "input_tokens": 31,
        "input_tokens_details": {"cached_tokens": 5, "cache_write_tokens": 0},
        "output_tokens": 12,
        "output_tokens_details": {"reasoning_tokens": 4},
        "total_tokens": 43,
    }
    assert response["id"].startswith("resp_")
    assert [item["id"][:3] for item in response["output"]] == ["rs_", "fc_", "fc_", "msg"]
    assert response["model"] == "m1"


@pytest.mark.parametrize(
    "reply",
    [
        Reply(content="plain answer"),
        Reply(content="thinking done", reasoning="step one, step two"),
        Reply(
            content=None,
            tool_calls=[("c1", "get_weather", '{"a": [1, 2, {"b": "ü"}]}')],
            finish_reason="tool_calls",
        ),
        Reply(content="text before", tool_calls=[("c1", "run_sql", '{"input": "x"}')], text_first=True),
        Reply(content="cut", finish_reason="length"),
        Reply(content="no finish", finish_reason=OMIT),
    ],
    ids=["text", "reasoning", "call", "text-first", "length", "no-finish"],
)
def test_streamed_response_ends_equal_to_the_non_streamed_one(
    provider: FakeProvider, bridge: ResponsesServer, bridge_client: openai.OpenAI, reply: Reply
) -> None:
    """The same provider reply, JSON or chunks: the same final response, usage and output order included."""
    results = []
    for mode in MODES:
        provider.script(reply)
        results.append(
            normalized(call(mode, bridge_client, bridge.base_url, model="m1", input="x", tools=TOOLS))
        )

    assert all(result == results[0] for result in results[1:])
    assert results[0]["usage"]["total_tokens"] == 43


@pytest.mark.parametrize("mode", MODES)
def test_degraded_json_schema_output_contract(
    provider: FakeProvider, bridge: ResponsesServer, bridge_client: openai.OpenAI, mode: str
) -> None:
    """A provider refusing json_schema gets json_object; JSON output passes, other output fails."""
    provider.refuse_json_schema = True
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    text = {"format": {"type": "json_schema", "name": "count", "schema": schema, "strict": True}}
    provider.script(Reply(content='{"n": 3}'), Reply(content="three"))

    good = call(mode, bridge_client, bridge.base_url, model="m1", input="count", text=text)
    bad = call(mode, bridge_client, bridge.base_url, model="m1", input="count", text=text)

    formats = [body.get("response_format") for body in provider.bodies]
    assert formats == [
        {"type": "json_schema", "json_schema": {"name": "count", "schema": schema, "strict": True}},
        {"type": "json_object"},
        {"type": "json_object"},  # remembered: no second refusal
    ]
    assert (good["status"], good["output"][0]["content"][0]["text"]) == ("completed", '{"n": 3}')
    assert bad["status"] == "failed"
    message = bad["error"]["message"]
    assert "not valid JSON" in message
    assert provider.base_url in message
    assert "m1" in message
    assert bad["id"] in message
    assert bridge_client.responses.retrieve(bad["id"]).status == "failed"


def test_json_schema_sent_natively_when_accepted(
    provider: FakeProvider, bridge: ResponsesServer, bridge_client: openai.OpenAI
) -> None:
    """A provider that takes json_schema gets it, and plain text output is not validated."""
    text = {"format": {"type": "json_schema", "name": "x", "schema": {"type": "object"}}}
    provider.script(Reply(content="not json, but the provider enforced the schema itself"))

    response = bridge_client.responses.create(model="m1", input="x", text=text)

    assert provider.bodies[-1]["response_format"]["type"] == "json_schema"
    assert response.status == "completed"


def test_response_is_saved_before_its_id_reaches_the_client(
    provider: FakeProvider, bridge: ResponsesServer, bridge_client: openai.OpenAI
) -> None:
    """Non-streamed: retrievable at once; streamed: already saved when the terminal event arrives."""
    created = bridge_client.responses.create(model="m1", input="a")
    assert bridge_client.responses.retrieve(created.id).status == "completed"

    with openai.OpenAI(base_url=bridge.base_url, api_key="client-key", max_retries=0) as other:
        for event in bridge_client.responses.create(model="m1", input="b", stream=True):
            if event.type == "response.completed":
                stored = other.responses.retrieve(event.response.id).to_dict()
                assert stored == event.response.to_dict()
