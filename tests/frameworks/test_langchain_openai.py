"""langchain-openai's ``ChatOpenAI(use_responses_api=True)`` over wrapped ``OpenAI`` / ``AsyncOpenAI``."""

from __future__ import annotations

import functools
import operator
from collections.abc import Iterable
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

from .helpers import WEATHER_DONE, WEATHER_LOOP, Lab, Run, kinds, scrub, weather


FCO = "function_call_output"
WEATHER = tool("weather")(weather)


def make_llm(run: Run, **options: Any) -> Any:
    """ChatOpenAI on the run's clients (langchain calls ``root_client.responses...``), tools bound."""
    llm = ChatOpenAI(
        model="scripted",
        use_responses_api=True,
        api_key="test",  # type: ignore[arg-type]
        base_url=str(run.client.base_url),
        root_client=run.client,
        client=run.client.chat.completions,
        root_async_client=run.aclient,
        async_client=run.aclient.chat.completions,
        **options,
    )
    assert llm.root_client is run.client
    return llm.bind_tools([WEATHER])


def merged(chunks: Iterable[Any]) -> AIMessage:
    return functools.reduce(operator.add, chunks)  # type: ignore[no-any-return]


def chat(llm: Any, messages: list[BaseMessage], *, stream: bool = False) -> AIMessage:
    """One user turn: call the model, run the tools it asks for, until it answers in text."""
    while True:
        reply = merged(llm.stream(messages)) if stream else llm.invoke(messages)
        messages.append(reply)
        if not reply.tool_calls:
            return reply
        messages.extend(WEATHER.invoke(call) for call in reply.tool_calls)


async def achat(llm: Any, messages: list[BaseMessage], *, stream: bool = False) -> AIMessage:
    """`chat`, on the async client."""
    while True:
        if stream:
            chunks = [chunk async for chunk in llm.astream(messages)]
            reply = merged(chunks)
        else:
            reply = await llm.ainvoke(messages)
        messages.append(reply)
        if not reply.tool_calls:
            return reply
        messages.extend(WEATHER.invoke(call) for call in reply.tool_calls)


def talk(run: Run, turns: list[str], *, stream: bool = False, **options: Any) -> list[str]:
    """A multi-turn chat over one growing message list."""
    llm = make_llm(run, **options)
    messages: list[BaseMessage] = []
    outputs = []
    for text in turns:
        messages.append(HumanMessage(text))
        outputs.append(chat(llm, messages, stream=stream).text)
    return outputs


def test_tool_loop_sends_only_the_function_call_outputs(lab: Lab) -> None:
    """
    invoke() (responses.with_raw_response.create) in a bind_tools loop whose tools langchain
    runs: every later request chains and carries exactly the new tool outputs.
    """
    want = talk(lab.plain(), [WEATHER_LOOP])
    run = lab.tracked()

    got = talk(run, [WEATHER_LOOP])

    lab.assert_equivalent(run)
    exchanges = lab.assert_chained_minimal(run)
    assert [["message"], [FCO, FCO], [FCO, FCO]] == [kinds(e.sent) for e in exchanges]
    lab.assert_same_behaviour(lab.runs[0], run)
    assert scrub(want) == scrub(got)
    assert scrub(got[0]).startswith(WEATHER_DONE)


def test_multi_turn_sends_the_new_human_message(lab: Lab) -> None:
    """Each turn chains and sends only the new HumanMessage, in langchain's explicit message shape."""
    turns = ["hello", 'and the weather?\n!call weather {"city": "Rome"}', "thanks"]
    want = talk(lab.plain(), turns)
    run = lab.tracked()

    got = talk(run, turns)

    lab.assert_equivalent(run)
    exchanges = lab.assert_chained_minimal(run)
    assert [["message"], ["message"], [FCO], ["message"]] == [kinds(e.sent) for e in exchanges]
    assert [{"content": "thanks", "role": "user", "type": "message"}] == exchanges[-1].sent
    lab.assert_same_behaviour(lab.runs[0], run)
    assert scrub(want) == scrub(got)


def test_sync_stream_chains(lab: Lab) -> None:
    """stream() (responses.create(stream=True) as a context manager) records anchors from events."""
    turns = [WEATHER_LOOP, "thanks"]
    want = talk(lab.plain(), turns, stream=True)
    run = lab.tracked()

    got = talk(run, turns, stream=True)

    lab.assert_equivalent(run)
    exchanges = lab.assert_chained_minimal(run)
    assert [["message"], [FCO, FCO], [FCO, FCO], ["message"]] == [kinds(e.sent) for e in exchanges]
    assert all(e.body["stream"] is True for e in exchanges)
    lab.assert_same_behaviour(lab.runs[0], run)
    assert scrub(want) == scrub(got)


async def test_async_stream_and_raw_response_headers_chain(lab: Lab) -> None:
    """
    include_response_headers=True: astream() goes through the client-level
    ``with_raw_response.responses.create`` and ainvoke() through ``responses.with_raw_response``.
    """

    async def conversation(run: Run) -> list[str]:
        llm = make_llm(run, include_response_headers=True)
        messages: list[BaseMessage] = [HumanMessage(WEATHER_LOOP)]
        first = await achat(llm, messages, stream=True)
        messages.append(HumanMessage("thanks"))
        second = await achat(llm, messages)
        assert "headers" in second.response_metadata
        return [first.text, second.text]

    want = await conversation(lab.plain())
    run = lab.tracked()

    got = await conversation(run)

    lab.assert_equivalent(run)
    exchanges = lab.assert_chained_minimal(run)
    assert [["message"], [FCO, FCO], [FCO, FCO], ["message"]] == [kinds(e.sent) for e in exchanges]
    assert [True, True, True, False] == [e.body["stream"] for e in exchanges]
    lab.assert_same_behaviour(lab.runs[0], run)
    assert scrub(want) == scrub(got)


def test_output_version_v1_reserialised_arguments_still_chain(lab: Lab) -> None:
    """output_version="v1" replays function calls with re-serialised arguments: still chained."""
    turns = [WEATHER_LOOP, "thanks"]
    want = talk(lab.plain(), turns, output_version="v1")
    run = lab.tracked()

    got = talk(run, turns, output_version="v1")

    lab.assert_equivalent(run)
    exchanges = lab.assert_chained_minimal(run)
    replayed = [i["arguments"] for i in exchanges[-1].meant_items if i.get("type") == "function_call"]
    assert ['{"city":"Paris"}', '{"city":"Oslo"}'] * 2 == replayed
    lab.assert_same_behaviour(lab.runs[0], run)
    assert scrub(want) == scrub(got)


def test_changed_system_message_is_never_chained_over(lab: Lab) -> None:
    """
    A SystemMessage is an input item: when the app swaps it the next request goes out in full
    (langchain's own use_previous_response_id would drop the change), then chaining resumes.
    """

    def conversation(run: Run) -> list[str]:
        llm = make_llm(run)
        messages: list[BaseMessage] = [SystemMessage("you are terse"), HumanMessage("hello")]
        outputs = [chat(llm, messages).text]
        messages[0] = SystemMessage("you are verbose")
        for text in ["again", "thanks"]:
            messages.append(HumanMessage(text))
            outputs.append(chat(llm, messages).text)
        return outputs

    want = conversation(lab.plain())
    run = lab.tracked()

    got = conversation(run)

    exchanges = lab.assert_equivalent(run)
    _, second, third = exchanges
    assert [None, None, second.response_id] == [e.anchor for e in exchanges]
    assert "you are verbose" == lab.state.resolved_context(third.response_id)[0]["content"]
    lab.assert_same_behaviour(lab.runs[0], run)
    assert scrub(want) == scrub(got)


def test_own_use_previous_response_id_passes_through(lab: Lab) -> None:
    """use_previous_response_id=True: langchain chains by itself; its requests go out as given."""
    turns = [WEATHER_LOOP, "thanks"]
    want = talk(lab.plain(), turns, use_previous_response_id=True)
    run = lab.tracked()

    got = talk(run, turns, use_previous_response_id=True)

    exchanges = lab.assert_equivalent(run)
    assert [None] + [e.response_id for e in exchanges[:-1]] == [e.anchor for e in exchanges]
    for exchange in exchanges:
        assert exchange.meant["previous_response_id"] == exchange.anchor  # type: ignore[index]
        assert exchange.meant_items == exchange.sent
    lab.assert_same_behaviour(lab.runs[0], run)
    assert scrub(want) == scrub(got)


def test_reasoning_blocks_replayed_as_items_chain(lab: Lab) -> None:
    """Reasoning blocks (summary, encrypted_content) that langchain replays are matched: chained."""
    turns = ['think first\n!reason\n!call weather {"city": "Lima"}', "thanks\n!reason"]
    want = talk(lab.plain(), turns, stream=True)
    run = lab.tracked()

    got = talk(run, turns, stream=True)

    lab.assert_equivalent(run)
    exchanges = lab.assert_chained_minimal(run)
    assert [["message"], [FCO], ["message"]] == [kinds(e.sent) for e in exchanges]
    assert 2 == kinds(exchanges[-1].meant_items).count("reasoning")
    lab.assert_same_behaviour(lab.runs[0], run)
    assert scrub(want) == scrub(got)


async def test_failed_response_raises_the_same_and_is_never_an_anchor(lab: Lab) -> None:
    """
    A failed response raises the same error from ainvoke() as without anchortrack; the retry that
    keeps the failed message chains on the last good response, not on the failed one.
    """

    async def conversation(run: Run) -> list[str]:
        llm = make_llm(run)
        messages: list[BaseMessage] = [HumanMessage("hello")]
        outputs = [(await achat(llm, messages)).text]
        messages.append(HumanMessage("oops\n!fail"))
        with pytest.raises(ValueError, match="server_error") as failure:
            await llm.ainvoke(messages)
        messages.append(HumanMessage("try again"))
        return [*outputs, str(failure.value), (await achat(llm, messages)).text]

    want = await conversation(lab.plain())
    run = lab.tracked()

    got = await conversation(run)

    first, failed, last = lab.assert_equivalent(run)
    assert [None, first.response_id, first.response_id] == [first.anchor, failed.anchor, last.anchor]
    assert ["message", "message"] == kinds(last.sent)
    lab.assert_same_behaviour(lab.runs[0], run)
    assert scrub(want) == scrub(got)
