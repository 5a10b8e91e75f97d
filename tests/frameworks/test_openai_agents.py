"""openai-agents (``agents``) driving a wrapped ``AsyncOpenAI`` through ``OpenAIResponsesModel``."""

from __future__ import annotations

import json
from typing import Any

import agents
import openai
import pytest
from agents import Agent, RunConfig, Runner, SQLiteSession, function_tool
from agents.models.openai_responses import OpenAIResponsesModel
from agents.run_config import CallModelData, ModelInputData
from structlog.testing import capture_logs

import anchortrack

from ..helpers import canon
from .helpers import WEATHER_DONE, WEATHER_LOOP, Lab, kinds, scrub, weather


RUN_CONFIG = RunConfig(tracing_disabled=True)
FCO = "function_call_output"


@pytest.fixture(autouse=True)
def _no_tracing() -> None:
    agents.set_tracing_disabled(True)


def make_agent(client: openai.AsyncOpenAI, **options: Any) -> Agent[Any]:
    model = OpenAIResponsesModel(model="scripted", openai_client=client)
    return Agent(
        name="assistant",
        instructions="be brief",
        model=model,
        tools=[function_tool(weather, name_override="weather")],
        **options,
    )


async def talk(client: openai.AsyncOpenAI, turns: list[str], **run_options: Any) -> list[str]:
    """A multi-turn chat: each run gets the last run's ``to_input_list()`` plus the new message."""
    agent = make_agent(client)
    history: list[Any] = []
    outputs = []
    for text in turns:
        history.append({"role": "user", "content": text})
        result = await Runner.run(agent, history, run_config=RUN_CONFIG, **run_options)
        outputs.append(str(result.final_output))
        history = result.to_input_list()
    return outputs


async def test_tool_loop_sends_only_the_function_call_outputs(lab: Lab) -> None:
    """Runner's tool loop: every later request chains and carries exactly the new tool outputs."""
    reference = lab.plain()
    want = await Runner.run(make_agent(reference.aclient), WEATHER_LOOP, run_config=RUN_CONFIG)
    run = lab.tracked()

    got = await Runner.run(make_agent(run.aclient), WEATHER_LOOP, run_config=RUN_CONFIG)

    lab.assert_equivalent(run)
    exchanges = lab.assert_chained_minimal(run)
    assert [["message"], [FCO, FCO], [FCO, FCO]] == [kinds(e.sent) for e in exchanges]
    assert ["be brief"] * 3 == [e.body["instructions"] for e in exchanges]
    assert all("weather" == e.body["tools"][0]["name"] for e in exchanges)
    lab.assert_same_behaviour(reference, run)
    assert scrub(want.final_output) == scrub(got.final_output)
    assert scrub(got.final_output).startswith(WEATHER_DONE)


async def test_multi_turn_through_to_input_list(lab: Lab) -> None:
    """result.to_input_list() + a new message chains every turn, across a tool call in the middle."""
    turns = ["hello", 'and the weather?\n!call weather {"city": "Rome"}', "thanks"]
    want = await talk(lab.plain().aclient, turns)
    run = lab.tracked()

    got = await talk(run.aclient, turns)

    lab.assert_equivalent(run)
    exchanges = lab.assert_chained_minimal(run)
    assert [["message"], ["message"], [FCO], ["message"]] == [kinds(e.sent) for e in exchanges]
    lab.assert_same_behaviour(lab.runs[0], run)
    assert scrub(want) == scrub(got)
    assert "echo: thanks" in got[-1]


async def test_streamed_runs_chain(lab: Lab) -> None:
    """Runner.run_streamed (with_streaming_response.create) records anchors from the event stream."""

    async def conversation(client: openai.AsyncOpenAI) -> list[str]:
        agent = make_agent(client)
        first = Runner.run_streamed(agent, WEATHER_LOOP, run_config=RUN_CONFIG)
        async for _ in first.stream_events():
            pass
        second = Runner.run_streamed(
            agent, [*first.to_input_list(), {"role": "user", "content": "thanks"}], run_config=RUN_CONFIG
        )
        async for _ in second.stream_events():
            pass
        return [str(first.final_output), str(second.final_output)]

    want = await conversation(lab.plain().aclient)
    run = lab.tracked()

    got = await conversation(run.aclient)

    lab.assert_equivalent(run)
    exchanges = lab.assert_chained_minimal(run)
    assert [["message"], [FCO, FCO], [FCO, FCO], ["message"]] == [kinds(e.sent) for e in exchanges]
    assert all(e.body["stream"] is True for e in exchanges)
    lab.assert_same_behaviour(lab.runs[0], run)
    assert scrub(want) == scrub(got)


async def test_reasoning_items_stay_on_the_server(lab: Lab) -> None:
    """Reasoning items the runner replays (with encrypted_content) are matched and never re-sent."""
    turns = ['think first\n!reason\n!call weather {"city": "Lima"}', "thanks\n!reason"]
    want = await talk(lab.plain().aclient, turns)
    run = lab.tracked()

    got = await talk(run.aclient, turns)

    lab.assert_equivalent(run)
    exchanges = lab.assert_chained_minimal(run)
    assert [["message"], [FCO], ["message"]] == [kinds(e.sent) for e in exchanges]
    history = exchanges[-1].meant_items
    assert 2 == kinds(history).count("reasoning")
    lab.assert_same_behaviour(lab.runs[0], run)
    assert scrub(want) == scrub(got)


async def test_call_model_input_filter_redaction_is_what_the_server_sees(lab: Lab) -> None:
    """
    A call_model_input_filter that redacts earlier turns (user text and the assistant's echo of
    it): the request after the edit goes stateless, so the old text never comes back through the
    chain, and the next one chains on the redacted response.
    """

    def redact(data: CallModelData[Any]) -> ModelInputData:
        items = list(data.model_data.input)
        last_user = max(i for i, item in enumerate(items) if item.get("role") == "user")
        redacted = [
            json.loads(json.dumps(item).replace("1234", "[redacted]")) if i < last_user else item
            for i, item in enumerate(items)
        ]
        return ModelInputData(input=redacted, instructions=data.model_data.instructions)

    config = RunConfig(tracing_disabled=True, call_model_input_filter=redact)
    turns = ["my pin is 1234", "what is my pin?", "thanks"]

    async def conversation(client: openai.AsyncOpenAI) -> list[str]:
        agent = make_agent(client)
        history: list[Any] = []
        outputs = []
        for text in turns:
            history.append({"role": "user", "content": text})
            result = await Runner.run(agent, history, run_config=config)
            outputs.append(str(result.final_output))
            history = result.to_input_list()
        return outputs

    want = await conversation(lab.plain().aclient)
    run = lab.tracked()

    got = await conversation(run.aclient)

    exchanges = lab.assert_equivalent(run)
    _, second, third = exchanges
    assert [None, None, second.response_id] == [e.anchor for e in exchanges]
    assert ["message"] == kinds(third.sent)
    for later in (second, third):
        assert "1234" not in repr(lab.state.resolved_context(later.response_id))
    lab.assert_same_behaviour(lab.runs[0], run)
    assert scrub(want) == scrub(got)


async def test_auto_previous_response_id_is_passed_through_then_continued(lab: Lab) -> None:
    """
    With auto_previous_response_id the runner chains its own tool turns: those requests go out
    exactly as given, and the next run (full history, no id) chains on the runner's last response.
    """

    async def conversation(client: openai.AsyncOpenAI) -> list[str]:
        agent = make_agent(client)
        first = await Runner.run(
            agent,
            'weather?\n!call weather {"city": "Paris"}',
            run_config=RUN_CONFIG,
            auto_previous_response_id=True,
        )
        history = [*first.to_input_list(), {"role": "user", "content": "thanks"}]
        second = await Runner.run(agent, history, run_config=RUN_CONFIG)
        return [str(first.final_output), str(second.final_output)]

    want = await conversation(lab.plain().aclient)
    run = lab.tracked()

    got = await conversation(run.aclient)

    first, second, third = lab.assert_equivalent(run)
    assert first.response_id == second.meant["previous_response_id"] == second.anchor  # type: ignore[index]
    assert second.meant_items == second.sent
    assert second.response_id == third.anchor
    assert ["message"] == kinds(third.sent)
    lab.assert_same_behaviour(lab.runs[0], run)
    assert scrub(want) == scrub(got)


async def test_runner_previous_response_id_is_told_once_that_anchortrack_stands_aside(lab: Lab) -> None:
    """
    Runner.run(previous_response_id=...) chains by itself: every call is passed through, which stats
    show as passthrough; one warning says why and how to let anchortrack chain instead.
    """
    run = lab.tracked()
    agent = make_agent(run.aclient)
    first = await Runner.run(agent, "hello", run_config=RUN_CONFIG)
    with capture_logs() as logs:
        second = await Runner.run(
            agent, "again", run_config=RUN_CONFIG, previous_response_id=first.last_response_id
        )
        await Runner.run(
            agent, "and again", run_config=RUN_CONFIG, previous_response_id=second.last_response_id
        )

    hints = [e for e in logs if e["event"].startswith("anchortrack.hint_")]
    assert [("anchortrack.hint_caller_managed", "warning", first.last_response_id)] == [
        (e["event"], e["log_level"], e["previous_response_id"]) for e in hints
    ]
    assert "leave previous_response_id out" in hints[0]["hint"]
    assert 2 == anchortrack.tracker(run.aclient).stats.count("passthrough", "caller_managed")


@pytest.mark.parametrize("announced", [True, False], ids=["announced", "unknown-server"])
async def test_handoff_switches_agent_and_tools(lab: Lab, announced: bool) -> None:
    """
    A handoff: the specialist's request carries its own instructions and other tools.

    The local server announces that it applies tools per request, so the handoff keeps chaining.
    A server that does not (``properties_changed``) might carry tools over a chain and mix them,
    so there that request goes out in full; instructions alone would not stop it.
    """

    async def conversation(client: openai.AsyncOpenAI) -> str:
        specialist = make_agent(client, handoff_description="weather expert")
        specialist.name = "specialist"
        specialist.instructions = "you are the specialist"
        triage = make_agent(client, handoffs=[specialist])
        result = await Runner.run(triage, "help me\n!call transfer_to_specialist {}", run_config=RUN_CONFIG)
        return str(result.final_output)

    lab.server.state.announce_per_request = announced
    try:
        want = await conversation(lab.plain().aclient)
        run = lab.tracked()
        got = await conversation(run.aclient)
        first, second = lab.assert_equivalent(run)
    finally:
        lab.server.state.announce_per_request = True

    stats = anchortrack.tracker(run.aclient).stats
    assert (None, first.response_id if announced else None) == (first.anchor, second.anchor)
    assert [t["name"] for t in first.body["tools"]] != [t["name"] for t in second.body["tools"]]
    assert (0 if announced else 1) == stats.count(reason="properties_changed")
    assert (1 if announced else 0) == stats.count("chained")
    if not announced:
        assert canon(second.meant_items) == canon(second.sent)
    assert ("be brief", "you are the specialist") == (first.body["instructions"], second.body["instructions"])
    lab.assert_same_behaviour(lab.runs[0], run)
    assert scrub(want) == scrub(got)
    assert got.startswith("tool results:")


async def test_session_memory_chains_each_turn(lab: Lab) -> None:
    """SQLiteSession replays stored items on each run; the wrapped client chains on them."""

    async def conversation(client: openai.AsyncOpenAI) -> list[str]:
        agent = make_agent(client)
        session = SQLiteSession("chat")
        outputs = []
        for text in ["hello", 'weather?\n!call weather {"city": "Kyiv"}', "thanks"]:
            result = await Runner.run(agent, text, session=session, run_config=RUN_CONFIG)
            outputs.append(str(result.final_output))
        session.close()
        return outputs

    want = await conversation(lab.plain().aclient)
    run = lab.tracked()

    got = await conversation(run.aclient)

    lab.assert_equivalent(run)
    exchanges = lab.assert_chained_minimal(run)
    assert [["message"], ["message"], [FCO], ["message"]] == [kinds(e.sent) for e in exchanges]
    lab.assert_same_behaviour(lab.runs[0], run)
    assert scrub(want) == scrub(got)


async def test_stop_on_first_tool_then_next_turn_sends_output_and_message(lab: Lab) -> None:
    """tool_use_behavior="stop_on_first_tool": the next run's delta is the tool output plus the message."""

    async def conversation(client: openai.AsyncOpenAI) -> list[str]:
        agent = make_agent(client, tool_use_behavior="stop_on_first_tool")
        first = await Runner.run(agent, 'weather?\n!call weather {"city": "Oslo"}', run_config=RUN_CONFIG)
        history = [*first.to_input_list(), {"role": "user", "content": "thanks"}]
        second = await Runner.run(agent, history, run_config=RUN_CONFIG)
        return [str(first.final_output), str(second.final_output)]

    want = await conversation(lab.plain().aclient)
    run = lab.tracked()

    got = await conversation(run.aclient)

    lab.assert_equivalent(run)
    exchanges = lab.assert_chained_minimal(run)
    assert [["message"], [FCO, "message"]] == [kinds(e.sent) for e in exchanges]
    lab.assert_same_behaviour(lab.runs[0], run)
    assert scrub(want) == scrub(got)
    assert "sunny in Oslo" == got[0]


async def test_approval_resumed_from_run_state_chains(lab: Lab) -> None:
    """Human in the loop: a needs_approval tool, approved on the RunState, resumes chained."""

    def delete(path: str) -> str:
        """Delete a file."""
        return f"deleted {path}"

    async def conversation(client: openai.AsyncOpenAI) -> str:
        agent = make_agent(client)
        agent.tools.append(function_tool(delete, needs_approval=True))
        first = await Runner.run(agent, 'clean up\n!call delete {"path": "/tmp/x"}', run_config=RUN_CONFIG)
        state = first.to_state()
        assert 1 == len(first.interruptions)
        state.approve(first.interruptions[0])
        second = await Runner.run(agent, state, run_config=RUN_CONFIG)
        return str(second.final_output)

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
    A failed response reaches the runner as the same exception as without anchortrack; the retry
    that keeps the failed message chains on the last good response, not on the failed one.
    """

    async def conversation(client: openai.AsyncOpenAI) -> list[str]:
        agent = make_agent(client)
        first = await Runner.run(agent, "hello", run_config=RUN_CONFIG)
        history = [*first.to_input_list(), {"role": "user", "content": "oops\n!fail"}]
        with pytest.raises(agents.ModelBehaviorError) as failure:
            await Runner.run(agent, history, run_config=RUN_CONFIG)
        history.append({"role": "user", "content": "try again"})
        last = await Runner.run(agent, history, run_config=RUN_CONFIG)
        return [str(first.final_output), str(failure.value), str(last.final_output)]

    want = await conversation(lab.plain().aclient)
    run = lab.tracked()

    got = await conversation(run.aclient)

    first, failed, last = lab.assert_equivalent(run)
    assert [None, first.response_id, first.response_id] == [first.anchor, failed.anchor, last.anchor]
    assert ["message", "message"] == kinds(last.sent)
    lab.assert_same_behaviour(lab.runs[0], run)
    assert scrub(want) == scrub(got)
    assert "response.failed" in got[1]


def test_run_sync_chains(lab: Lab) -> None:
    """Runner.run_sync (a fresh event loop per call) keeps chaining across calls."""

    def conversation(client: openai.AsyncOpenAI) -> list[str]:
        agent = make_agent(client)
        history: list[Any] = []
        outputs = []
        for text in [WEATHER_LOOP, "thanks"]:
            history.append({"role": "user", "content": text})
            result = Runner.run_sync(agent, history, run_config=RUN_CONFIG)
            outputs.append(str(result.final_output))
            history = result.to_input_list()
        return outputs

    want = conversation(lab.plain().aclient)
    run = lab.tracked()

    got = conversation(run.aclient)

    lab.assert_equivalent(run)
    exchanges = lab.assert_chained_minimal(run)
    assert [["message"], [FCO, FCO], [FCO, FCO], ["message"]] == [kinds(e.sent) for e in exchanges]
    lab.assert_same_behaviour(lab.runs[0], run)
    assert scrub(want) == scrub(got)
