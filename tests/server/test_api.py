"""The Responses API over real loopback HTTP, driven by the real openai client."""

from __future__ import annotations

import re
import threading
import time
from typing import Any

import openai
import pytest
from openai.types.responses import Response

from anchortrack.server import ResponsesServer

from ..helpers import user_message
from .helpers import as_items, digest, make_client, plain, raw_request


def chat(
    client: openai.OpenAI, history: list[Any], text: str, previous: str | None, **params: Any
) -> Response:
    """Send *text* chained on *previous*; extend *history* with what the server now holds."""
    kwargs: dict[str, Any] = {"previous_response_id": previous} if previous else {}
    response = client.responses.create(model="scripted", input=text, **kwargs, **params)
    history.append(user_message(text))
    return response


class TestChaining:
    def test_many_turns_resolve_to_the_whole_conversation(
        self, any_server: ResponsesServer, any_client: openai.OpenAI
    ) -> None:
        """Twelve chained turns: each context is every earlier input and output, then the new input."""
        history: list[Any] = []
        previous = None
        for turn in range(12):
            response = chat(any_client, history, f"turn {turn}", previous)

            assert history == any_server.state.resolved_context(response.id)
            assert f"echo: turn {turn} [ctx:{digest(history)}] [items:{len(history)}]" == response.output_text
            assert previous == response.previous_response_id
            history += as_items(response.output)
            previous = response.id

    def test_instructions_are_not_carried_over(
        self, plain_client: openai.OpenAI, fake_server: ResponsesServer
    ) -> None:
        """Instructions affect only their own response: echoed, tagged, never in the context."""
        first = plain_client.responses.create(model="scripted", input="a", instructions="Speak French.")
        second = plain_client.responses.create(model="scripted", input="b", previous_response_id=first.id)
        third = plain_client.responses.create(
            model="scripted", input="c", previous_response_id=second.id, instructions="Be terse."
        )

        assert first.instructions == "Speak French."
        assert "[instr:" in first.output_text
        assert second.instructions is None
        assert "[instr:" not in second.output_text
        assert third.instructions == "Be terse."
        context = fake_server.state.resolved_context(third.id)
        assert len(context) == 5
        assert all(item.get("role") in ("user", "assistant") for item in context)

    def test_stateless_and_chained_requests_get_the_same_reply(self, plain_client: openai.OpenAI) -> None:
        """The reply depends only on the resolved context, however it was sent."""
        first = plain_client.responses.create(model="scripted", input="hello")
        chained = plain_client.responses.create(
            model="scripted", input="again", previous_response_id=first.id
        )

        full = [user_message("hello"), *as_items(first.output), user_message("again")]
        stateless = plain_client.responses.create(model="scripted", input=full)

        assert chained.output_text == stateless.output_text

    def test_a_different_conversation_gives_a_different_digest(self, plain_client: openai.OpenAI) -> None:
        """Editing an earlier item changes the reply to the same last message."""
        one = plain_client.responses.create(model="scripted", input=[user_message("x"), user_message("same")])
        two = plain_client.responses.create(model="scripted", input=[user_message("y"), user_message("same")])

        assert one.output_text != two.output_text

    def test_store_false_is_not_chainable_nor_retrievable(
        self, any_client: openai.OpenAI, any_server: ResponsesServer
    ) -> None:
        """store=false responses are never saved: chaining is not found, retrieving is 404."""
        unstored = any_client.responses.create(model="scripted", input="secret", store=False)

        assert unstored.store is False
        with pytest.raises(openai.BadRequestError) as caught:
            any_client.responses.create(model="scripted", input="next", previous_response_id=unstored.id)
        assert caught.value.code == "previous_response_not_found"
        with pytest.raises(openai.NotFoundError) as missing:
            any_client.responses.retrieve(unstored.id)
        assert f"Response with id '{unstored.id}' not found." == missing.value.body["message"]
        assert [user_message("secret")] == any_server.state.resolved_context(unstored.id)

    def test_store_false_child_of_a_stored_parent_sees_the_chain(self, plain_client: openai.OpenAI) -> None:
        """A store=false request may still chain from a stored parent."""
        first = plain_client.responses.create(model="scripted", input="one")
        child = plain_client.responses.create(
            model="scripted", input="two", previous_response_id=first.id, store=False
        )

        assert "[items:3]" in child.output_text

    def test_failed_responses_are_stored_but_not_chainable(
        self, any_client: openai.OpenAI, any_server: ResponsesServer
    ) -> None:
        """`!fail` answers HTTP 200 with status failed; chaining from it is not found."""
        failed = any_client.responses.create(model="scripted", input="boom\n!fail")

        assert failed.status == "failed"
        assert failed.error is not None
        assert failed.error.code == "server_error"
        assert any_client.responses.retrieve(failed.id).status == "failed"
        with pytest.raises(openai.BadRequestError) as caught:
            any_client.responses.create(model="scripted", input="next", previous_response_id=failed.id)
        assert f"Previous response with id '{failed.id}' not found." == caught.value.body["message"]

    def test_incomplete_responses_are_chainable(
        self, any_client: openai.OpenAI, any_server: ResponsesServer
    ) -> None:
        """`!incomplete` ends incomplete with a truncated message; the chain continues from it."""
        cut = any_client.responses.create(model="scripted", input="long story\n!incomplete")
        assert cut.status == "incomplete"
        assert cut.incomplete_details is not None
        assert cut.incomplete_details.reason == "max_output_tokens"

        following = any_client.responses.create(model="scripted", input="go on", previous_response_id=cut.id)

        assert following.status == "completed"
        assert [user_message("long story\n!incomplete"), *as_items(cut.output), user_message("go on")] == (
            any_server.state.resolved_context(following.id)
        )

    @pytest.mark.parametrize("forget", ["expire", "drop"])
    def test_expired_or_dropped_parents_are_not_found(
        self, any_client: openai.OpenAI, any_server: ResponsesServer, forget: str
    ) -> None:
        """After expire() or drop(), chaining gives OpenAI's exact not-found error."""
        first = any_client.responses.create(model="scripted", input="one")
        second = any_client.responses.create(model="scripted", input="two", previous_response_id=first.id)
        getattr(any_server.state, forget)(first.id)

        with pytest.raises(openai.BadRequestError) as caught:
            any_client.responses.create(model="scripted", input="three", previous_response_id=first.id)
        with pytest.raises(openai.BadRequestError) as grandchild:
            any_client.responses.create(model="scripted", input="three", previous_response_id=second.id)

        error = caught.value
        assert (
            error.status_code,
            error.type,
            error.code,
            error.param,
        ) == (400, "invalid_request_error", "previous_response_not_found", "previous_response_id")
        assert f"Previous response with id '{first.id}' not found." == error.body["message"]
        assert grandchild.value.code == "previous_response_not_found"
        with pytest.raises(KeyError):
            getattr(any_server.state, forget)(first.id)

    def test_tool_loop_with_parallel_calls_and_rounds(self, any_client: openai.OpenAI) -> None:
        """`!call` lines give parallel calls each round; answered rounds end in tool results."""
        response = any_client.responses.create(
            model="scripted", input='go\n!call a {"n": 1}\n!call b {}\n!rounds 2'
        )
        for round_number in (1, 2):
            calls = [item for item in response.output if item.type == "function_call"]
            assert [call.name for call in calls] == ["a", "b"]
            outputs = [
                {
                    "type": "function_call_output",
                    "call_id": call.call_id,
                    "output": f"{call.name}{round_number}",
                }
                for call in calls
            ]
            response = any_client.responses.create(
                model="scripted", input=outputs, previous_response_id=response.id
            )

        assert response.output_text.startswith("tool results: a1 | b1 | a2 | b2 [ctx:")


class TestResponseObject:
    def test_every_required_field_is_present_and_valid(self, fake_server: ResponsesServer) -> None:
        """The raw JSON validates as the SDK's Response and echoes the request."""
        body = {
            "model": "scripted-1",
            "input": "hi",
            "instructions": "x",
            "metadata": {"k": "v"},
            "tools": [{"type": "function", "name": "f", "parameters": {}}],
            "temperature": 0.5,
        }
        status, raw, headers = raw_request(
            fake_server, "POST", "/v1/responses", __import__("json").dumps(body).encode()
        )

        assert status == 200
        response = Response.model_validate(raw)
        assert re.fullmatch(r"resp_[0-9a-f]{48}", response.id)
        assert (
            response.object,
            response.status,
            response.model,
            response.instructions,
        ) == ("response", "completed", "scripted-1", "x")
        assert (
            response.metadata,
            response.temperature,
            response.store,
            response.previous_response_id,
        ) == ({"k": "v"}, 0.5, True, None)
        assert response.tools[0].type == "function"
        assert response.usage is not None
        assert response.usage.total_tokens == response.usage.input_tokens + response.usage.output_tokens > 0
        assert headers["x-request-id"].startswith("req_")

    def test_ids_are_unique(self, plain_client: openai.OpenAI) -> None:
        """Response and item ids never repeat."""
        responses = [plain_client.responses.create(model="scripted", input="same") for _ in range(20)]

        assert len({response.id for response in responses}) == 20
        assert len({response.output[0].id for response in responses}) == 20

    def test_requests_are_recorded_in_order_as_copies(
        self, plain_client: openai.OpenAI, fake_server: ResponsesServer
    ) -> None:
        """Every POST body is logged, rejected ones included; the log cannot be altered from outside."""
        plain_client.responses.create(model="scripted", input="one")
        with pytest.raises(openai.BadRequestError):
            plain_client.responses.create(model="scripted", input="two", previous_response_id="resp_gone")

        logged = fake_server.state.requests
        logged[0]["input"] = "changed"

        assert [body["input"] for body in fake_server.state.requests] == ["one", "two"]
        assert fake_server.state.requests[1]["previous_response_id"] == "resp_gone"
        fake_server.state.reset_requests()
        assert fake_server.state.requests == []

    def test_resolved_context_keeps_items_exactly_as_received(
        self, plain_client: openai.OpenAI, fake_server: ResponsesServer
    ) -> None:
        """Items are stored as sent, shorthand and unknown fields included; own output excluded."""
        items = [
            {"role": "developer", "content": "rules"},
            {"role": "user", "content": "shorthand"},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "long form"}]},
        ]
        response = plain_client.responses.create(model="scripted", input=items)

        assert items == fake_server.state.resolved_context(response.id)
        with pytest.raises(KeyError):
            fake_server.state.resolved_context("resp_never")


class TestRetrieveDeleteList:
    def test_retrieve_returns_the_created_response(self, any_client: openai.OpenAI) -> None:
        """GET gives back exactly what POST returned."""
        created = any_client.responses.create(model="scripted", input="hi\n!reason")

        assert created.to_dict() == any_client.responses.retrieve(created.id).to_dict()

    def test_delete_removes_one_response(self, any_client: openai.OpenAI) -> None:
        """DELETE makes the response 404 and unchainable; a second DELETE is 404."""
        created = any_client.responses.create(model="scripted", input="hi")

        any_client.responses.delete(created.id)

        with pytest.raises(openai.NotFoundError):
            any_client.responses.retrieve(created.id)
        with pytest.raises(openai.NotFoundError):
            any_client.responses.delete(created.id)
        with pytest.raises(openai.BadRequestError) as caught:
            any_client.responses.create(model="scripted", input="x", previous_response_id=created.id)
        assert caught.value.code == "previous_response_not_found"

    def test_delete_body(self, fake_server: ResponsesServer, plain_client: openai.OpenAI) -> None:
        """DELETE answers OpenAI's deletion object."""
        created = plain_client.responses.create(model="scripted", input="hi")

        status, body, _ = raw_request(fake_server, "DELETE", f"/v1/responses/{created.id}")

        assert (200, {"id": created.id, "object": "response.deleted", "deleted": True}) == (status, body)

    def test_input_items_list_the_whole_context(self, any_client: openai.OpenAI) -> None:
        """input_items lists chain items and own input, newest first by default, with ids."""
        first = any_client.responses.create(model="scripted", input="one")
        second = any_client.responses.create(model="scripted", input="two", previous_response_id=first.id)

        page = any_client.responses.input_items.list(second.id)
        ascending = any_client.responses.input_items.list(second.id, order="asc")

        assert len(page.data) == 3
        assert [item.id for item in page.data] == [item.id for item in reversed(ascending.data)]
        assert first.output[0].id == ascending.data[1].id
        assert all(item.id for item in ascending.data)
        assert [ascending.data[0].content[0].text, ascending.data[2].content[0].text] == ["one", "two"]

    def test_input_items_paginate(self, any_client: openai.OpenAI) -> None:
        """limit and after walk the list page by page; the SDK's auto-pagination sees every item."""
        items = [user_message(f"m{n}") for n in range(7)]
        created = any_client.responses.create(model="scripted", input=items)

        first = any_client.responses.input_items.list(created.id, order="asc", limit=3)
        every = list(any_client.responses.input_items.list(created.id, order="asc", limit=3))

        assert (len(first.data), first.has_more) == (3, True)
        assert first.data[0].id == first.first_id
        assert [f"m{n}" for n in range(7)] == [item.content[0].text for item in every]

    def test_retrieve_stream_replays_events(self, plain_client: openai.OpenAI) -> None:
        """GET ?stream=true replays the finished response's events after starting_after."""
        created = plain_client.responses.create(model="scripted", input="hi")

        events = list(plain_client.responses.retrieve(created.id, stream=True, starting_after=1))

        assert events[0].sequence_number == 2
        assert events[-1].type == "response.completed"
        assert created.id == events[-1].response.id

    def test_cancel_is_refused(self, plain_client: openai.OpenAI) -> None:
        """There are no background responses to cancel."""
        created = plain_client.responses.create(model="scripted", input="hi")

        with pytest.raises(openai.BadRequestError, match="background"):
            plain_client.responses.cancel(created.id)


class TestStreaming:
    def test_stream_helper_gives_the_final_response(
        self, any_client: openai.OpenAI, any_server: ResponsesServer
    ) -> None:
        """responses.stream() yields text deltas with snapshots and a final response that chains."""
        with any_client.responses.stream(model="scripted", input="stream this please") as stream:
            snapshots = [event.snapshot for event in stream if event.type == "response.output_text.delta"]
            final = stream.get_final_response()

        assert final.output_text == snapshots[-1]
        assert final.output_text.startswith("echo: stream this please [ctx:")
        assert plain(final.to_dict()) == any_client.responses.retrieve(final.id).to_dict()
        following = any_client.responses.create(model="scripted", input="next", previous_response_id=final.id)
        assert "[items:3]" in following.output_text

    def test_stream_helper_function_call_arguments(self, plain_client: openai.OpenAI) -> None:
        """Argument deltas accumulate to the full JSON in the SDK's snapshots."""
        with plain_client.responses.stream(
            model="scripted", input='x\n!call lookup {"query": "weather in Paris"}'
        ) as stream:
            snapshots = [
                event.snapshot for event in stream if event.type == "response.function_call_arguments.delta"
            ]
            final = stream.get_final_response()

        (call,) = final.output
        assert call.type == "function_call"
        assert '{"query": "weather in Paris"}' == call.arguments == snapshots[-1]
        assert len(snapshots) > 1

    def test_raw_stream_events(self, plain_client: openai.OpenAI) -> None:
        """stream=True yields the full sequence with consecutive sequence numbers."""
        stream = plain_client.responses.create(model="scripted", input="think\n!reason", stream=True)
        events = list(stream)

        assert list(range(len(events))) == [event.sequence_number for event in events]
        kinds = [event.type for event in events]
        for kind in (
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.reasoning_summary_text.delta",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
        ):
            assert kind in kinds
        assert kinds[-1] == "response.completed"

    @pytest.mark.parametrize(
        ("command", "terminal"), [("!fail", "response.failed"), ("!incomplete", "response.incomplete")]
    )
    def test_stream_terminal_events(self, plain_client: openai.OpenAI, command: str, terminal: str) -> None:
        """Failed and incomplete streams end on their own terminal event; the helper has no final response."""
        events = list(plain_client.responses.create(model="scripted", input=f"x\n{command}", stream=True))

        assert terminal == events[-1].type
        assert sum(event.type == terminal for event in events) == 1
        with (
            plain_client.responses.stream(model="scripted", input=f"x\n{command}") as stream,
            pytest.raises(RuntimeError, match=r"response\.completed"),
        ):
            stream.get_final_response()

    def test_stream_is_saved_before_the_terminal_event(
        self, any_server: ResponsesServer, any_client: openai.OpenAI
    ) -> None:
        """Chaining the moment the terminal event arrives, before the stream ends, succeeds."""
        other = make_client(any_server)
        chained = []
        try:
            with any_client.responses.stream(model="scripted", input="quick") as stream:
                for event in stream:
                    if event.type == "response.completed":
                        chained.append(
                            other.responses.create(
                                model="scripted", input="next", previous_response_id=event.response.id
                            )
                        )
        finally:
            other.close()

        assert ["completed"] == [response.status for response in chained]

    def test_stream_in_progress_is_not_chainable_until_done(
        self, fake_server: ResponsesServer, plain_client: openai.OpenAI
    ) -> None:
        """Mid-stream the response is in_progress, not chainable; a client leaving still completes it."""
        stream = plain_client.responses.create(model="scripted", input="slow\n!sleep 60000", stream=True)
        created = next(iter(stream))
        response_id = created.response.id

        assert created.type == "response.created"
        assert plain_client.responses.retrieve(response_id).status == "in_progress"
        with pytest.raises(openai.BadRequestError) as caught:
            plain_client.responses.create(model="scripted", input="x", previous_response_id=response_id)
        assert caught.value.code == "previous_response_not_found"

        stream.close()
        deadline = time.monotonic() + 20
        while (
            plain_client.responses.retrieve(response_id).status == "in_progress"
            and time.monotonic() < deadline
        ):
            time.sleep(0.02)

        assert plain_client.responses.retrieve(response_id).status == "completed"
        chained = plain_client.responses.create(model="scripted", input="x", previous_response_id=response_id)
        assert "[items:3]" in chained.output_text


class TestAsync:
    async def test_async_chaining_and_streaming(
        self, plain_aclient: openai.AsyncOpenAI, fake_server: ResponsesServer
    ) -> None:
        """AsyncOpenAI: create, stream helper, stream=True, chained across all three."""
        first = await plain_aclient.responses.create(model="scripted", input="one")
        async with plain_aclient.responses.stream(
            model="scripted", input="two", previous_response_id=first.id
        ) as stream:
            async for _ in stream:
                pass
            second = await stream.get_final_response()
        raw = await plain_aclient.responses.create(
            model="scripted", input="three", previous_response_id=second.id, stream=True
        )
        events = [event async for event in raw]
        third = events[-1].response

        assert events[-1].type == "response.completed"
        expected = [
            user_message("one"),
            *as_items(first.output),
            user_message("two"),
            *as_items(second.output),
            user_message("three"),
        ]
        assert expected == fake_server.state.resolved_context(third.id)
        with pytest.raises(openai.BadRequestError):
            await plain_aclient.responses.create(
                model="scripted", input="x", previous_response_id="resp_missing"
            )

    async def test_a_sleeping_model_does_not_block_other_requests(
        self, plain_aclient: openai.AsyncOpenAI
    ) -> None:
        """While one stream waits a minute in `!sleep`, other requests are answered."""
        stream = await plain_aclient.responses.create(
            model="scripted", input="slow\n!sleep 60000", stream=True
        )
        events = stream.__aiter__()
        kinds = [(await events.__anext__()).type, (await events.__anext__()).type]

        quick = await plain_aclient.responses.create(model="scripted", input="quick")
        await stream.close()

        assert kinds == ["response.created", "response.in_progress"]
        assert quick.status == "completed"


def test_threads_share_one_sync_client(fake_server: ResponsesServer, plain_client: openai.OpenAI) -> None:
    """Threads chaining on one client each get their own conversation back."""
    errors: list[BaseException] = []

    def conversation(name: str) -> None:
        try:
            history: list[Any] = []
            previous = None
            for turn in range(4):
                response = chat(plain_client, history, f"{name} {turn}", previous)
                assert history == fake_server.state.resolved_context(response.id)
                history += as_items(response.output)
                previous = response.id
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=conversation, args=(f"t{n}",)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
