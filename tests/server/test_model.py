"""The scripted model: its documented convention, checked without HTTP."""

from __future__ import annotations

import hashlib
import re
from typing import Any

import pytest

from anchortrack.server import ScriptedModel
from anchortrack.server._model import context_digest, parse_script

from ..helpers import user
from .helpers import digest


def answer(model: ScriptedModel, context: list[Any]) -> list[dict[str, Any]]:
    reply = model.respond(context)
    assert reply.status == "completed"
    return reply.output


def text_of(item: dict[str, Any]) -> str:
    return str(item["content"][0]["text"])


def outputs_for(calls: list[dict[str, Any]], prefix: str = "out") -> list[dict[str, Any]]:
    return [
        {"type": "function_call_output", "call_id": call["call_id"], "output": f"{prefix}-{call['name']}"}
        for call in calls
    ]


@pytest.fixture(name="model")
def _model() -> ScriptedModel:
    return ScriptedModel()


def test_plain_text_is_echoed_with_the_context_digest(model: ScriptedModel) -> None:
    """A plain message gets `echo: <text> [ctx:<digest>] [items:<n>]`."""
    context = [{"role": "developer", "content": "rules"}, user("  hello there  ")]

    (message,) = answer(model, context)

    assert f"echo: hello there [ctx:{digest(context)}] [items:2]" == text_of(message)
    assert digest(context) == context_digest(context)


def test_reply_depends_on_the_whole_context(model: ScriptedModel) -> None:
    """Changing an early item changes the reply even when the last message is the same."""
    one = [user("a"), {"role": "assistant", "content": "x"}, user("b")]
    two = [user("a"), {"role": "assistant", "content": "y"}, user("b")]

    assert text_of(answer(model, one)[0]) != text_of(answer(model, two)[0])


def test_instructions_tag_is_appended_but_not_counted(model: ScriptedModel) -> None:
    """Non-empty instructions add `[instr:<8 hex>]`; they are not context items."""
    context = [user("hi")]
    expected = hashlib.sha256(b"be brief").hexdigest()[:8]

    reply = model.respond(context, instructions="be brief")

    assert text_of(reply.output[0]).endswith(f"[items:1] [instr:{expected}]")
    assert "[instr:" not in text_of(model.respond(context, instructions="").output[0])


def test_output_items_have_openai_shapes(model: ScriptedModel) -> None:
    """Messages carry id, role, status and output_text with annotations and logprobs."""
    (message,) = answer(model, [user("hi")])

    assert re.fullmatch(r"msg_[0-9a-f]{48}", message["id"])
    assert {"type": "message", "role": "assistant", "status": "completed"}.items() <= message.items()
    assert {"annotations": [], "logprobs": [], "type": "output_text"}.items() <= message["content"][0].items()


def test_call_lines_become_parallel_function_calls(model: ScriptedModel) -> None:
    """Each `!call` line is one function_call; the arguments are the text as written."""
    ask = user('look\n!call weather {"city": "Paris"}\n!call clock')

    calls = answer(model, [ask])

    assert [item["type"] for item in calls] == ["function_call", "function_call"]
    assert [(item["name"], item["arguments"]) for item in calls] == [
        ("weather", '{"city": "Paris"}'),
        ("clock", "{}"),
    ]
    assert all(item["status"] == "completed" and item["call_id"].startswith("call_") for item in calls)
    assert calls[0]["call_id"] != calls[1]["call_id"]


def test_answered_calls_give_tool_results(model: ScriptedModel) -> None:
    """Once every call has its output, the reply lists the outputs joined by ' | '."""
    context: list[Any] = [user("look\n!call a {}\n!call b {}")]
    context += answer(model, context)
    context += outputs_for(context[1:])

    (message,) = answer(model, context)

    assert f"tool results: out-a | out-b [ctx:{digest(context)}] [items:5]" == text_of(message)


def test_rounds_repeat_the_calls_with_fresh_call_ids(model: ScriptedModel) -> None:
    """`!rounds 3` emits the calls three times before the final message."""
    context: list[Any] = [user("loop\n!call step {}\n!rounds 3")]
    call_ids = []
    for round_number in range(1, 4):
        (call,) = answer(model, context)
        assert call["type"] == "function_call"
        call_ids.append(call["call_id"])
        context += [call, *outputs_for([call], prefix=f"r{round_number}")]

    (message,) = answer(model, context)

    assert len(set(call_ids)) == 3
    assert text_of(message).startswith("tool results: r1-step | r2-step | r3-step [ctx:")


def test_reason_prepends_a_reasoning_item_to_every_turn(model: ScriptedModel) -> None:
    """`!reason` puts one reasoning item (no status) first, on call and message turns."""
    context: list[Any] = [user("think\n!reason\n!call f {}")]
    first = answer(model, context)
    context += [*first, *outputs_for(first[1:])]
    second = answer(model, context)

    for output in (first, second):
        reasoning = output[0]
        assert reasoning["type"] == "reasoning"
        assert reasoning["id"].startswith("rs_")
        assert "status" not in reasoning
        assert reasoning["encrypted_content"]
        assert reasoning["summary"][0]["type"] == "summary_text"
    assert [item["type"] for item in first] == ["reasoning", "function_call"]
    assert [item["type"] for item in second] == ["reasoning", "message"]


def test_fail_gives_a_failed_reply_with_server_error(model: ScriptedModel) -> None:
    """`!fail` wins over everything: status failed, no output, code server_error."""
    reply = model.respond([user("x\n!fail\n!call f {}\n!incomplete")])

    assert reply.status == "failed"
    assert reply.output == []
    assert reply.error is not None
    assert reply.error["code"] == "server_error"


def test_incomplete_gives_a_truncated_incomplete_message(model: ScriptedModel) -> None:
    """`!incomplete` wins over `!call`: half the echo, message and response incomplete."""
    context = [user("tell me a long story\n!incomplete\n!call f {}")]
    full = f"echo: tell me a long story [ctx:{digest(context)}] [items:1]"

    reply = model.respond(context)

    assert reply.status == "incomplete"
    assert reply.incomplete_details == {"reason": "max_output_tokens"}
    (message,) = reply.output
    assert message["status"] == "incomplete"
    assert full[: len(full) // 2] == text_of(message)


def test_sleep_sets_the_delay(model: ScriptedModel) -> None:
    """`!sleep 250` asks the server to wait a quarter of a second."""
    assert model.respond([user("x\n!sleep 250")]).delay == 0.25
    assert model.respond([user("x")]).delay == 0.0


def test_only_the_last_user_message_counts(model: ScriptedModel) -> None:
    """Commands in earlier user messages are plain history."""
    context = [user("old\n!fail"), {"role": "assistant", "content": "ok"}, user("new")]

    (message,) = answer(model, context)

    assert text_of(message).startswith("echo: new [ctx:")


def test_content_parts_and_no_user_message(model: ScriptedModel) -> None:
    """Input-text parts are read as text; a context without a user message still answers."""
    parts = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "part"}]}]

    assert text_of(answer(model, parts)[0]).startswith("echo: part [ctx:")
    assert text_of(answer(model, [])[0]) == f"echo: [ctx:{digest([])}] [items:0]"


def test_malformed_commands_are_ignored() -> None:
    """Bad `!rounds`/`!sleep` values count as absent; unknown commands vanish from the text."""
    script = parse_script("hi\n!rounds zero\n!sleep soon\n!dance\n  !rounds 0")

    assert (script.text, script.rounds, script.sleep_ms) == ("hi", 1, 0.0)


def test_ids_come_from_the_factory() -> None:
    """An injected id factory makes the whole output deterministic."""
    counter = iter(range(100))
    model = ScriptedModel(id_factory=lambda prefix: f"{prefix}_{next(counter)}")

    (message,) = answer(model, [user("hi")])

    assert message["id"] == "msg_0"
