"""What the provider receives: chat messages, tools and parameters built from the resolved context."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from anchortrack.server import ResponsesServer, ServerState, Upstream
from anchortrack.server._translate import build_messages, call_arguments

from .provider import FakeProvider, Reply, chat_problems


WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def test_chained_tool_loop_sends_the_whole_conversation_as_messages(
    provider: FakeProvider, bridge: ResponsesServer, bridge_client: openai.OpenAI
) -> None:
    """Three turns chained by previous_response_id: the provider sees every earlier turn, in order."""
    provider.script(
        Reply(
            content=None,
            reasoning="two cities, two calls",
            tool_calls=[
                ("call_p", "get_weather", '{"city":"Paris"}'),
                ("call_r", "get_weather", '{"city":"Rome"}'),
            ],
            finish_reason="tool_calls",
        ),
        Reply(content="Paris is sunny, Rome is rainy."),
        Reply(content="You're welcome!"),
    )

    first = bridge_client.responses.create(
        model="m1", instructions="Be brief.", input="Weather in Paris and Rome?", tools=[WEATHER]
    )
    outputs = [
        {"type": "function_call_output", "call_id": "call_p", "output": "sunny"},
        {
            "type": "function_call_output",
            "call_id": "call_r",
            "output": [{"type": "input_text", "text": "rain"}],
        },
    ]
    events = list(
        bridge_client.responses.create(
            model="m1", input=outputs, previous_response_id=first.id, tools=[WEATHER], stream=True
        )
    )
    second_id = events[-1].response.id
    bridge_client.responses.create(
        model="m1", instructions="Be warm.", input="Thanks!", previous_response_id=second_id
    )

    calls = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_p",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
            },
            {
                "id": "call_r",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city":"Rome"}'},
            },
        ],
    }
    turn_two = [
        {"role": "user", "content": "Weather in Paris and Rome?"},
        calls,
        {"role": "tool", "tool_call_id": "call_p", "content": "sunny"},
        {"role": "tool", "tool_call_id": "call_r", "content": "rain"},
    ]
    assert provider.messages == [
        [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Weather in Paris and Rome?"},
        ],
        turn_two,
        [
            {"role": "system", "content": "Be warm."},
            *turn_two,
            {"role": "assistant", "content": "Paris is sunny, Rome is rainy."},
            {"role": "user", "content": "Thanks!"},
        ],
    ]
    assert [body.get("stream") for body in provider.bodies] == [None, True, None]
    assert [body.get("stream_options") for body in provider.bodies] == [None, {"include_usage": True}, None]
    assert provider.bodies[0]["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Weather for a city.",
                "parameters": WEATHER["parameters"],
            },
        }
    ]
    assert "tools" not in provider.bodies[2]


def test_parameters_are_mapped_and_responses_only_fields_are_not_sent(
    provider: FakeProvider, bridge: ResponsesServer, bridge_client: openai.OpenAI
) -> None:
    """Model, sampling, token limit and tool settings arrive under their chat names; nothing else."""
    bridge_client.responses.create(
        model="llama3.2",
        input="hi",
        tools=[WEATHER],
        tool_choice={"type": "function", "name": "get_weather"},
        parallel_tool_calls=False,
        max_output_tokens=64,
        temperature=0.25,
        top_p=0.5,
        store=True,
        metadata={"k": "v"},
        user="u1",
        truncation="disabled",
        text={"format": {"type": "json_object"}},
    )

    body = provider.bodies[-1]
    assert {key: value for key, value in body.items() if key not in ("messages", "tools")} == {
        "model": "llama3.2",
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        "parallel_tool_calls": False,
        "max_tokens": 64,
        "temperature": 0.25,
        "top_p": 0.5,
        "response_format": {"type": "json_object"},
    }
    assert provider.authorizations[-1] == "Bearer sk-upstream-secret-0123456789"


def _turn(state: ServerState, body: dict[str, Any]) -> Any:
    return state.resolve(body)


def test_upstream_model_overrides_the_requests_model_and_token_field_is_configurable() -> None:
    """--upstream-model replaces the request's model; max_completion_tokens can be chosen."""
    upstream = Upstream("http://127.0.0.1:9/v1", model="qwen3:8b", max_tokens_field="max_completion_tokens")
    state = ServerState(backend=upstream)

    plan = upstream.plan(state.resolve({"model": "gpt-5", "input": "hi", "max_output_tokens": 99}))

    assert (plan.body["model"], plan.body["max_completion_tokens"]) == ("qwen3:8b", 99)
    assert "max_tokens" not in plan.body


def test_message_forms() -> None:
    """Developer → system, images as chat parts, no reasoning, every call type as a paired tool call."""
    context: list[dict[str, Any]] = [
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "rules"}]},
        {
            "type": "message",
            "role": "user",
            "content": [
                {"type": "input_text", "text": "what is this?"},
                {"type": "input_image", "image_url": "data:image/png;base64,AAAA", "detail": "low"},
            ],
        },
        {"id": "rs_1", "type": "reasoning", "summary": [{"type": "summary_text", "text": "secret"}]},
        {
            "id": "m1",
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Let me run"}],
        },
        {"type": "custom_tool_call", "call_id": "c1", "name": "run_sql", "input": "SELECT 1"},
        {"type": "shell_call", "call_id": "c2", "action": {"commands": ["ls"], "timeout_ms": None}},
        {"type": "apply_patch_call", "call_id": "c3", "operation": {"type": "delete_file", "path": "x"}},
        {
            "type": "local_shell_call",
            "call_id": "c4",
            "action": {"type": "exec", "command": ["pwd"], "env": {}},
        },
        {"type": "custom_tool_call_output", "call_id": "c1", "output": "1"},
        {"type": "shell_call_output", "call_id": "c2", "output": [{"stdout": "a\n", "stderr": ""}]},
        {"type": "apply_patch_call_output", "call_id": "c3", "status": "completed"},
        {"type": "local_shell_call_output", "id": "c4", "output": "/root"},
        {"type": "item_reference", "id": "m1"},
        {"type": "function_call", "call_id": "lost", "name": "f", "arguments": "{}"},
        {"type": "message", "role": "user", "content": "next"},
    ]

    messages = build_messages(context, [{"role": "system", "content": "sys"}])

    assert messages == [
        {"role": "system", "content": "sys"},
        {"role": "system", "content": "rules"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "what is this?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA", "detail": "low"}},
            ],
        },
        {
            "role": "assistant",
            "content": "Let me run",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "run_sql", "arguments": '{"input":"SELECT 1"}'},
                },
                {
                    "id": "c2",
                    "type": "function",
                    "function": {"name": "shell", "arguments": '{"commands":["ls"]}'},
                },
                {
                    "id": "c3",
                    "type": "function",
                    "function": {
                        "name": "apply_patch",
                        "arguments": '{"operation":{"type":"delete_file","path":"x"}}',
                    },
                },
                {
                    "id": "c4",
                    "type": "function",
                    "function": {"name": "local_shell", "arguments": '{"command":["pwd"],"env":{}}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "1"},
        {
            "role": "tool",
            "tool_call_id": "c2",
            "content": json.dumps([{"stdout": "a\n", "stderr": ""}], separators=(",", ":")),
        },
        {"role": "tool", "tool_call_id": "c3", "content": "completed"},
        {"role": "tool", "tool_call_id": "c4", "content": "/root"},
        {"role": "assistant", "content": "Let me run"},
        {"role": "user", "content": "next"},
    ]
    assert chat_problems({"model": "m", "messages": messages}) == []


@pytest.mark.parametrize(
    "reference", [{"type": "item_reference", "id": "m1"}, {"id": "m1"}], ids=["typed", "bare"]
)
def test_a_reference_is_sent_as_the_item_its_id_names(reference: dict[str, Any]) -> None:
    """Both spellings of a reference become the first item with that id, as the context checks pair it."""
    said = {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "hi"}]}
    context = [{"id": "m1", **said}, {"id": "m1", **said, "content": "other"}, reference]

    messages = build_messages(context, [])

    assert messages[-1] == {"role": "assistant", "content": "hi"}


@pytest.mark.parametrize(
    ("tools", "param", "words"),
    [
        (
            [WEATHER, {"type": "custom", "name": "get_weather"}],
            "tools[1]",
            "would both be called 'get_weather'",
        ),
        (
            [{"type": "function", "name": "shell"}, {"type": "shell"}],
            "tools[1]",
            "would both be called 'shell'",
        ),
        ([{"type": "web_search"}], "tools[0]", "'web_search' are not supported"),
    ],
    ids=["same-name", "shell-name", "hosted"],
)
def test_tools_the_provider_cannot_take_are_refused(
    provider: FakeProvider,
    bridge: ResponsesServer,
    bridge_client: openai.OpenAI,
    tools: list[dict[str, Any]],
    param: str,
    words: str,
) -> None:
    """Two tools mapping to one provider name, or a hosted tool: 400 before the provider is called."""
    with pytest.raises(openai.BadRequestError) as caught:
        bridge_client.responses.create(model="m1", input="x", tools=tools)

    assert caught.value.param == param
    assert words in caught.value.message
    assert provider.bodies == []


@pytest.mark.parametrize(
    ("choice", "sent"),
    [
        ("required", "required"),
        ("none", "none"),
        ({"type": "custom", "name": "run_sql"}, {"type": "function", "function": {"name": "run_sql"}}),
        ({"type": "apply_patch"}, {"type": "function", "function": {"name": "apply_patch"}}),
        ({"type": "allowed_tools", "mode": "required", "tools": []}, "required"),
    ],
)
def test_tool_choice_is_mapped(
    provider: FakeProvider, bridge: ResponsesServer, bridge_client: openai.OpenAI, choice: Any, sent: Any
) -> None:
    """tool_choice names the provider-side function."""
    tools = [{"type": "custom", "name": "run_sql"}, {"type": "apply_patch"}]

    bridge_client.responses.create(model="m1", input="x", tools=tools, tool_choice=choice)

    assert provider.bodies[-1]["tool_choice"] == sent


def test_a_call_type_without_a_provider_form_is_an_error_not_another_tool() -> None:
    """A call type the bridge has no form for fails loudly instead of reaching the provider as apply_patch."""
    assert "apply_patch" == call_arguments({"type": "apply_patch_call", "operation": {}})[0]
    with pytest.raises(ValueError, match="no provider form for a widget_call item"):
        call_arguments({"type": "widget_call", "call_id": "c", "name": "w", "arguments": "{}"})
