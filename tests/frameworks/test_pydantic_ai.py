"""pydantic-ai driving a wrapped ``AsyncOpenAI`` through ``OpenAIResponsesModel``."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import openai
import pytest
from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults
from pydantic_ai.capabilities import ProcessHistory
from pydantic_ai.exceptions import ModelServerError
from pydantic_ai.messages import ModelMessage, TextPart, UserPromptPart
from pydantic_ai.models.openai import OpenAIResponsesModel, OpenAIResponsesModelSettings
from pydantic_ai.profiles.openai import OpenAIModelProfile
from pydantic_ai.providers.openai import OpenAIProvider

import anchortrack

from .helpers import WEATHER_DONE, WEATHER_LOOP, Lab, kinds, scrub, weather


FCO = "function_call_output"
#: What a reasoning model's profile says: encrypted reasoning is replayed as reasoning items.
REASONING = OpenAIModelProfile(openai_supports_encrypted_reasoning_content=True, supports_thinking=True)


def make_agent(client: openai.AsyncOpenAI, **options: Any) -> Agent[None, str]:
    profile = options.pop("profile", None)
    model = OpenAIResponsesModel("scripted", provider=OpenAIProvider(openai_client=client), profile=profile)
    agent: Agent[None, str] = Agent(model, instructions="be brief", **options)
    agent.tool_plain(name="weather")(weather)
    return agent


async def talk(client: openai.AsyncOpenAI, turns: list[str], **options: Any) -> list[str]:
    """A multi-turn chat: each run gets the last run's ``all_messages()`` as message_history."""
    agent = make_agent(client, **options)
    history: list[ModelMessage] = []
    outputs = []
    for text in turns:
        result = await agent.run(text, message_history=history)
        outputs.append(result.output)
        history = result.all_messages()
    return outputs


async def test_tool_loop_sends_only_the_function_call_outputs(lab: Lab) -> None:
    """
    pydantic-ai's tool loop chains every request with exactly the new tool outputs, although it
    re-serialises each function call's arguments before replaying it.
    """
    reference = lab.plain()
    want = await make_agent(reference.aclient).run(WEATHER_LOOP)
    run = lab.tracked()

    got = await make_agent(run.aclient).run(WEATHER_LOOP)

    lab.assert_equivalent(run)
    exchanges = lab.assert_chained_minimal(run)
    assert [["message"], [FCO, FCO], [FCO, FCO]] == [kinds(e.sent) for e in exchanges]
    last = exchanges[-1]
    replayed = [i["arguments"] for i in last.meant_items if i.get("type") == "function_call"]
    on_server = [
        i["arguments"]
        for i in lab.state.resolved_context(last.response_id)
        if i.get("type") == "function_call"
    ]
    assert ['{"city":"Paris"}', '{"city":"Oslo"}'] * 2 == replayed
    assert ['{"city": "Paris"}', '{"city": "Oslo"}'] * 2 == on_server
    lab.assert_same_behaviour(reference, run)
    assert scrub(want.output) == scrub(got.output)
    assert scrub(got.output).startswith(WEATHER_DONE)


async def test_multi_turn_through_message_history(lab: Lab) -> None:
    """message_history=result.all_messages() chains every turn, assistant text in shorthand form."""
    turns = ["hello", 'and the weather?\n!call weather {"city": "Rome"}', "thanks"]
    want = await talk(lab.plain().aclient, turns)
    run = lab.tracked()

    got = await talk(run.aclient, turns)

    lab.assert_equivalent(run)
    exchanges = lab.assert_chained_minimal(run)
    assert [["message"], ["message"], [FCO], ["message"]] == [kinds(e.sent) for e in exchanges]
    assert {"role": "assistant", "content": got[0]} in exchanges[-1].meant_items
    lab.assert_same_behaviour(lab.runs[0], run)
    assert scrub(want) == scrub(got)


async def test_run_stream_chains(lab: Lab) -> None:
    """agent.run_stream (responses.create(stream=True)) records anchors from the event stream."""

    async def conversation(client: openai.AsyncOpenAI) -> list[str]:
        agent = make_agent(client)
        async with agent.run_stream(WEATHER_LOOP) as first:
            one = await first.get_output()
        async with agent.run_stream("thanks", message_history=first.all_messages()) as second:
            two = await second.get_output()
        return [one, two]

    want = await conversation(lab.plain().aclient)
    run = lab.tracked()

    got = await conversation(run.aclient)

    lab.assert_equivalent(run)
    exchanges = lab.assert_chained_minimal(run)
    assert [["message"], [FCO, FCO], [FCO, FCO], ["message"]] == [kinds(e.sent) for e in exchanges]
    assert all(e.body["stream"] is True for e in exchanges)
    lab.assert_same_behaviour(lab.runs[0], run)
    assert scrub(want) == scrub(got)


async def test_reasoning_replayed_as_items_chains(lab: Lab) -> None:
    """With a reasoning profile, pydantic-ai replays reasoning items (encrypted_content, ids): chained."""
    turns = ['think first\n!reason\n!call weather {"city": "Lima"}', "thanks\n!reason"]
    want = await talk(lab.plain().aclient, turns, profile=REASONING)
    run = lab.tracked()

    got = await talk(run.aclient, turns, profile=REASONING)

    lab.assert_equivalent(run)
    exchanges = lab.assert_chained_minimal(run)
    assert [["message"], [FCO], ["message"]] == [kinds(e.sent) for e in exchanges]
    assert 2 == kinds(exchanges[-1].meant_items).count("reasoning")
    lab.assert_same_behaviour(lab.runs[0], run)
    assert scrub(want) == scrub(got)


async def test_reasoning_replayed_as_text_never_chains(lab: Lab) -> None:
    """
    With the default profile pydantic-ai replays a reasoning item as an assistant ``<think>``
    message: no recorded view is a prefix any more, so every request goes out in full.
    """
    turns = ['think first\n!reason\n!call weather {"city": "Lima"}', "thanks"]
    want = await talk(lab.plain().aclient, turns)
    run = lab.tracked()

    got = await talk(run.aclient, turns)

    exchanges = lab.assert_equivalent(run)
    assert [None, None, None] == [e.anchor for e in exchanges]
    assert [e.meant_items for e in exchanges] == [e.sent for e in exchanges]
    assert "reasoning" not in kinds(exchanges[-1].meant_items)
    assert exchanges[-1].meant_items[1]["content"].startswith("<think>")
    lab.assert_same_behaviour(lab.runs[0], run)
    assert scrub(want) == scrub(got)


async def test_history_processor_redaction_is_what_the_server_sees(lab: Lab) -> None:
    """
    A history processor (the ProcessHistory capability) that redacts earlier turns: the request
    after the edit goes stateless (the old text never comes back through the chain), the next one
    chains on the redacted view.
    """

    def redact(messages: list[ModelMessage]) -> list[ModelMessage]:
        out: list[ModelMessage] = []
        for index, message in enumerate(messages):
            if index < len(messages) - 1:
                parts = [
                    dataclasses.replace(part, content=part.content.replace("1234", "[redacted]"))
                    if isinstance(part, (UserPromptPart, TextPart)) and isinstance(part.content, str)
                    else part
                    for part in message.parts
                ]
                message = dataclasses.replace(message, parts=parts)  # type: ignore[arg-type]
            out.append(message)
        return out

    turns = ["my pin is 1234", "what is my pin?", "thanks"]
    want = await talk(lab.plain().aclient, turns, capabilities=[ProcessHistory(redact)])
    run = lab.tracked()

    got = await talk(run.aclient, turns, capabilities=[ProcessHistory(redact)])

    exchanges = lab.assert_equivalent(run)
    _, second, third = exchanges
    assert [None, None, second.response_id] == [e.anchor for e in exchanges]
    assert ["message"] == kinds(third.sent)
    for later in (second, third):
        assert "1234" not in json.dumps(lab.state.resolved_context(later.response_id))
    lab.assert_same_behaviour(lab.runs[0], run)
    assert scrub(want) == scrub(got)


async def test_own_previous_response_id_auto_passes_through(lab: Lab) -> None:
    """openai_previous_response_id='auto': pydantic-ai chains by itself; its requests go out as given."""
    settings = OpenAIResponsesModelSettings(openai_previous_response_id="auto")
    turns = [WEATHER_LOOP, "thanks"]
    want = await talk(lab.plain().aclient, turns, model_settings=settings)
    run = lab.tracked()

    got = await talk(run.aclient, turns, model_settings=settings)

    exchanges = lab.assert_equivalent(run)
    assert [None] + [e.response_id for e in exchanges[:-1]] == [e.anchor for e in exchanges]
    for exchange in exchanges:
        assert exchange.meant["previous_response_id"] in (None, exchange.anchor)  # type: ignore[index]
        assert exchange.meant_items == exchange.sent
    lab.assert_same_behaviour(lab.runs[0], run)
    assert scrub(want) == scrub(got)


async def test_store_false_is_never_an_anchor(lab: Lab) -> None:
    """openai_store=False: nothing is chained, every request is the full history."""
    settings = OpenAIResponsesModelSettings(openai_store=False)
    turns = [WEATHER_LOOP, "thanks"]
    want = await talk(lab.plain().aclient, turns, model_settings=settings)
    run = lab.tracked()

    got = await talk(run.aclient, turns, model_settings=settings)

    exchanges = lab.assert_equivalent(run)
    assert all(e.anchor is None and e.body["store"] is False for e in exchanges)
    assert [e.meant_items for e in exchanges] == [e.sent for e in exchanges]
    lab.assert_same_behaviour(lab.runs[0], run)
    assert scrub(want) == scrub(got)


async def test_deferred_tool_approval_resumes_chained(lab: Lab) -> None:
    """Human in the loop: a requires_approval tool, approved through DeferredToolResults, resumes chained."""

    async def conversation(client: openai.AsyncOpenAI) -> str:
        agent = make_agent(client, output_type=[str, DeferredToolRequests])

        @agent.tool_plain(requires_approval=True)
        def delete(path: str) -> str:
            return f"deleted {path}"

        first = await agent.run('clean up\n!call delete {"path": "/tmp/x"}')
        assert isinstance(first.output, DeferredToolRequests)
        approvals = DeferredToolResults(approvals={c.tool_call_id: True for c in first.output.approvals})
        second = await agent.run(message_history=first.all_messages(), deferred_tool_results=approvals)
        assert isinstance(second.output, str)
        return second.output

    want = await conversation(lab.plain().aclient)
    run = lab.tracked()

    got = await conversation(run.aclient)

    lab.assert_equivalent(run)
    exchanges = lab.assert_chained_minimal(run)
    assert [["message"], [FCO]] == [kinds(e.sent) for e in exchanges]
    lab.assert_same_behaviour(lab.runs[0], run)
    assert scrub(want) == scrub(got)
    assert scrub(got).startswith("tool results: deleted /tmp/x")


async def test_failed_response_raises_the_same_and_is_never_an_anchor(lab: Lab) -> None:
    """
    A failed response raises the same ModelServerError as without anchortrack; the next turn
    chains on the last good response.
    """

    async def conversation(client: openai.AsyncOpenAI) -> list[str]:
        agent = make_agent(client)
        first = await agent.run("hello")
        with pytest.raises(ModelServerError) as failure:
            await agent.run("oops\n!fail", message_history=first.all_messages())
        last = await agent.run("try again", message_history=first.all_messages())
        return [first.output, str(failure.value), last.output]

    want = await conversation(lab.plain().aclient)
    run = lab.tracked()

    got = await conversation(run.aclient)

    first, failed, last = lab.assert_equivalent(run)
    assert [None, first.response_id, first.response_id] == [first.anchor, failed.anchor, last.anchor]
    assert ["message"] == kinds(last.sent)
    lab.assert_same_behaviour(lab.runs[0], run)
    assert scrub(want) == scrub(got)
    assert "server_error" in got[1]


async def test_per_request_client_copies_stay_tracked(lab: Lab) -> None:
    """The max_retries setting makes pydantic-ai send through client.with_options() copies: still chained."""
    turns = [WEATHER_LOOP, "thanks"]
    settings = OpenAIResponsesModelSettings(max_retries=1)
    want = await talk(lab.plain().aclient, turns, model_settings=settings)
    run = lab.tracked()

    got = await talk(run.aclient, turns, model_settings=settings)

    lab.assert_equivalent(run)
    exchanges = lab.assert_chained_minimal(run)
    assert [["message"], [FCO, FCO], [FCO, FCO], ["message"]] == [kinds(e.sent) for e in exchanges]
    assert 3 == anchortrack.tracker(run.aclient).stats.count("chained")
    lab.assert_same_behaviour(lab.runs[0], run)
    assert scrub(want) == scrub(got)


def test_run_sync_chains(lab: Lab) -> None:
    """agent.run_sync keeps chaining across calls."""

    def conversation(client: openai.AsyncOpenAI) -> list[str]:
        agent = make_agent(client)
        first = agent.run_sync(WEATHER_LOOP)
        second = agent.run_sync("thanks", message_history=first.all_messages())
        return [first.output, second.output]

    want = conversation(lab.plain().aclient)
    run = lab.tracked()

    got = conversation(run.aclient)

    lab.assert_equivalent(run)
    exchanges = lab.assert_chained_minimal(run)
    assert [["message"], [FCO, FCO], [FCO, FCO], ["message"]] == [kinds(e.sent) for e in exchanges]
    lab.assert_same_behaviour(lab.runs[0], run)
    assert scrub(want) == scrub(got)
