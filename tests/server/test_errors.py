"""Every refusal, in OpenAI's error shape and status; malformed input never gives a 500."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from anchortrack.server import ResponsesServer

from .helpers import as_items, post_json, raw_request


def error_of(caught: pytest.ExceptionInfo[openai.APIStatusError]) -> tuple[int, Any, Any, Any, str]:
    """(status, type, code, param, message) of an SDK error."""
    body = caught.value.body
    assert isinstance(body, dict)
    return caught.value.status_code, body["type"], body["code"], body["param"], body["message"]


class TestChainErrors:
    def test_unknown_parent(self, any_client: openai.OpenAI) -> None:
        """An id the server never issued is previous_response_not_found."""
        with pytest.raises(openai.BadRequestError) as caught:
            any_client.responses.create(model="scripted", input="x", previous_response_id="resp_unknown")

        assert error_of(caught) == (
            400,
            "invalid_request_error",
            "previous_response_not_found",
            "previous_response_id",
            "Previous response with id 'resp_unknown' not found.",
        )

    def test_duplicate_item(self, any_client: openai.OpenAI) -> None:
        """Re-sending an item already in the chain is refused as a duplicate."""
        first = any_client.responses.create(model="scripted", input="hi")
        message = as_items(first.output)[0]

        with pytest.raises(openai.BadRequestError) as caught:
            any_client.responses.create(
                model="scripted",
                input=[message, {"role": "user", "content": "x"}],
                previous_response_id=first.id,
            )

        status, kind, code, param, text = error_of(caught)
        assert (status, kind, code, param) == (400, "invalid_request_error", None, "input")
        assert (
            f"Duplicate item found with id {message['id']}. "
            "Remove duplicate items from your input and try again." == text
        )

    def test_orphan_function_call_output(self, any_client: openai.OpenAI) -> None:
        """A tool output whose call is not in the context is refused."""
        first = any_client.responses.create(model="scripted", input="hi")
        orphan = {"type": "function_call_output", "call_id": "call_nowhere", "output": "x"}

        with pytest.raises(openai.BadRequestError) as caught:
            any_client.responses.create(model="scripted", input=[orphan], previous_response_id=first.id)

        assert error_of(caught) == (
            400,
            "invalid_request_error",
            None,
            "input",
            "No tool call found for function call output with call_id call_nowhere.",
        )

    def test_function_call_left_without_output(self, any_client: openai.OpenAI) -> None:
        """Chaining from a response with a call, without sending its output, is refused."""
        called = any_client.responses.create(model="scripted", input="go\n!call lookup {}")
        call_id = called.output[0].call_id  # type: ignore[union-attr]

        with pytest.raises(openai.BadRequestError) as caught:
            any_client.responses.create(model="scripted", input="never mind", previous_response_id=called.id)

        assert (
            400,
            "invalid_request_error",
            None,
            "input",
            f"No tool output found for function call {call_id}.",
        ) == (error_of(caught))

    def test_conversation_with_previous_response_id(self, plain_client: openai.OpenAI) -> None:
        """previous_response_id and conversation together are refused before any lookup."""
        with pytest.raises(openai.BadRequestError) as caught:
            plain_client.responses.create(
                model="scripted", input="x", previous_response_id="resp_unknown", conversation="conv_1"
            )

        status, _, code, param, _ = error_of(caught)
        assert (status, code, param) == (400, "mutually_exclusive_parameters", "conversation")

    def test_conversation_alone_is_unsupported(self, plain_client: openai.OpenAI) -> None:
        """The server has no Conversations API and says so."""
        with pytest.raises(openai.BadRequestError) as caught:
            plain_client.responses.create(model="scripted", input="x", conversation={"id": "conv_1"})

        assert error_of(caught)[2:4] == ("unsupported_parameter", "conversation")


class TestZeroDataRetention:
    def test_zdr_refuses_previous_response_id(
        self, plain_client: openai.OpenAI, fake_server: ResponsesServer
    ) -> None:
        """With zdr on, chained requests get OpenAI's ZDR error; stateless ones still work."""
        first = plain_client.responses.create(model="scripted", input="hi")
        fake_server.state.zdr = True

        with pytest.raises(openai.BadRequestError) as caught:
            plain_client.responses.create(model="scripted", input="x", previous_response_id=first.id)
        stateless = plain_client.responses.create(model="scripted", input="x")

        assert error_of(caught) == (
            400,
            "invalid_request_error",
            "unsupported_parameter",
            "previous_response_id",
            "Previous response cannot be used for this organization due to Zero Data Retention.",
        )
        assert stateless.status == "completed"
        fake_server.state.zdr = False
        assert (
            plain_client.responses.create(model="scripted", input="x", previous_response_id=first.id).status
            == "completed"
        )


MALFORMED: list[tuple[str, bytes, str | None, str | None]] = [
    # (case, raw body, expected param, expected code)
    ("invalid json", b'{"model": "m", "input": ', None, None),
    ("empty body", b"", None, None),
    ("not utf-8", b'{"model": "\xff\xfe"}', None, None),
    ("nan constant", b'{"model": "m", "temperature": NaN}', None, None),
    ("deep nesting", b"[" * 100_000 + b"]" * 100_000, None, None),
    ("nesting past the limit", b'{"model": "m", "metadata": ' + b"[" * 600 + b"]" * 600 + b"}", None, None),
    ("float overflow", b'{"model": "m", "input": "x", "temperature": 1e400}', None, None),
    ("array body", b"[]", None, "invalid_type"),
    ("string body", b'"hello"', None, "invalid_type"),
    ("null body", b"null", None, "invalid_type"),
    ("missing model", b'{"input": "x"}', "model", "missing_required_parameter"),
    ("null model", b'{"model": null, "input": "x"}', "model", "missing_required_parameter"),
    ("model is a number", b'{"model": 4, "input": "x"}', "model", "invalid_type"),
    ("input is a number", b'{"model": "m", "input": 7}', "input", "invalid_type"),
    ("input is an object", b'{"model": "m", "input": {"role": "user"}}', "input", "invalid_type"),
    ("item is a string", b'{"model": "m", "input": ["x"]}', "input[0]", "invalid_type"),
    (
        "item is null",
        b'{"model": "m", "input": [{"role": "user", "content": "a"}, null]}',
        "input[1]",
        "invalid_type",
    ),
    (
        "item without type or role",
        b'{"model": "m", "input": [{"content": "x"}]}',
        "input[0].type",
        "missing_required_parameter",
    ),
    (
        "bad role",
        b'{"model": "m", "input": [{"role": "robot", "content": "x"}]}',
        "input[0].role",
        "invalid_value",
    ),
    (
        "message without content",
        b'{"model": "m", "input": [{"role": "user"}]}',
        "input[0].content",
        "missing_required_parameter",
    ),
    (
        "content is a number",
        b'{"model": "m", "input": [{"role": "user", "content": 3}]}',
        "input[0].content",
        "invalid_type",
    ),
    (
        "content part not an object",
        b'{"model": "m", "input": [{"role": "user", "content": ["x"]}]}',
        "input[0].content[0]",
        "invalid_type",
    ),
    ("type is a number", b'{"model": "m", "input": [{"type": 5}]}', "input[0].type", "invalid_type"),
    (
        "output without call_id",
        b'{"model": "m", "input": [{"type": "function_call_output", "output": "x"}]}',
        "input[0].call_id",
        "missing_required_parameter",
    ),
    (
        "output without output",
        b'{"model": "m", "input": [{"type": "function_call_output", "call_id": "c"}]}',
        "input[0].output",
        "missing_required_parameter",
    ),
    (
        "call with numeric arguments",
        b'{"model": "m", "input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": 1}]}',
        "input[0].arguments",
        "invalid_type",
    ),
    (
        "item id is a number",
        b'{"model": "m", "input": [{"id": 1, "role": "user", "content": "x"}]}',
        "input[0].id",
        "invalid_type",
    ),
    (
        "previous id is a number",
        b'{"model": "m", "input": "x", "previous_response_id": 12}',
        "previous_response_id",
        "invalid_type",
    ),
    (
        "previous id with bad characters",
        b'{"model": "m", "input": "x", "previous_response_id": "@results.ress"}',
        "previous_response_id",
        "invalid_value",
    ),
    (
        "previous id empty",
        b'{"model": "m", "input": "x", "previous_response_id": ""}',
        "previous_response_id",
        "empty_string",
    ),
    ("unknown parameter", b'{"model": "m", "input": "x", "colour": "red"}', "colour", "unknown_parameter"),
    ("tools not an array", b'{"model": "m", "input": "x", "tools": {}}', "tools", "invalid_type"),
    ("tool not an object", b'{"model": "m", "input": "x", "tools": ["f"]}', "tools[0]", "invalid_type"),
    ("store is a string", b'{"model": "m", "input": "x", "store": "yes"}', "store", "invalid_type"),
    ("stream is a string", b'{"model": "m", "input": "x", "stream": "true"}', "stream", "invalid_type"),
    (
        "instructions is a number",
        b'{"model": "m", "input": "x", "instructions": 5}',
        "instructions",
        "invalid_type",
    ),
    (
        "instruction item malformed",
        b'{"model": "m", "input": "x", "instructions": [3]}',
        "instructions[0]",
        "invalid_type",
    ),
    ("metadata is a list", b'{"model": "m", "input": "x", "metadata": []}', "metadata", "invalid_type"),
    (
        "temperature is a string",
        b'{"model": "m", "input": "x", "temperature": "hot"}',
        "temperature",
        "invalid_type",
    ),
    (
        "max_output_tokens too small",
        b'{"model": "m", "input": "x", "max_output_tokens": 5}',
        "max_output_tokens",
        "integer_below_min_value",
    ),
    (
        "max_output_tokens is a boolean",
        b'{"model": "m", "input": "x", "max_output_tokens": true}',
        "max_output_tokens",
        "invalid_type",
    ),
    (
        "background mode",
        b'{"model": "m", "input": "x", "background": true}',
        "background",
        "unsupported_parameter",
    ),
]


@pytest.mark.parametrize(
    ("raw", "param", "code"), [case[1:] for case in MALFORMED], ids=[case[0] for case in MALFORMED]
)
def test_malformed_bodies_are_400(
    fake_server: ResponsesServer, raw: bytes, param: str | None, code: str | None
) -> None:
    """Each malformed body gets a 400 in OpenAI's shape naming the culprit, never a 500 or a hang."""
    status, body, _ = raw_request(fake_server, "POST", "/v1/responses", raw)

    assert status == 400
    assert {"message", "type", "param", "code"} == set(body["error"])
    assert body["error"]["type"] == "invalid_request_error"
    assert (param, code) == (body["error"]["param"], body["error"]["code"])
    assert body["error"]["message"]


def test_malformed_json_message_is_openais(fake_server: ResponsesServer) -> None:
    """Unparseable JSON gets OpenAI's own hint."""
    _, body, _ = raw_request(fake_server, "POST", "/v1/responses", b"{nope")

    assert body["error"]["message"].startswith("We could not parse the JSON body of your request.")


def test_rejected_bodies_are_recorded_and_the_server_keeps_serving(fake_server: ResponsesServer) -> None:
    """A refused JSON body is in the request log, and the next good request succeeds."""
    post_json(fake_server, {"input": "no model"})

    status, body = post_json(fake_server, {"model": "m", "input": "fine"})

    assert fake_server.state.requests == [{"input": "no model"}, {"model": "m", "input": "fine"}]
    assert (status, body["status"]) == (200, "completed")


def test_every_sdk_parameter_is_known(plain_client: openai.OpenAI) -> None:
    """No parameter of the installed openai SDK's create() is refused as unknown."""
    import typing

    from openai.types.responses import response_create_params

    from anchortrack.server._request import KNOWN_PARAMETERS

    sdk = set(typing.get_type_hints(response_create_params.ResponseCreateParamsStreaming))

    assert sdk <= KNOWN_PARAMETERS


@pytest.mark.parametrize(
    ("method", "path", "status", "message"),
    [
        ("GET", "/v1/responses/resp_missing", 404, "Response with id 'resp_missing' not found."),
        ("DELETE", "/v1/responses/resp_missing", 404, "Response with id 'resp_missing' not found."),
        ("GET", "/v1/responses/resp_missing/input_items", 404, "Response with id 'resp_missing' not found."),
        ("POST", "/v1/responses/resp_missing/cancel", 404, "Response with id 'resp_missing' not found."),
        ("GET", "/v1/nothing", 404, "Invalid URL (GET /v1/nothing)"),
        ("PUT", "/v1/responses", 405, "Invalid URL (PUT /v1/responses)"),
        ("POST", "/_test/zdr", 404, "Invalid URL (POST /_test/zdr)"),
    ],
)
def test_unknown_things_are_json_errors(
    fake_server: ResponsesServer, method: str, path: str, status: int, message: str
) -> None:
    """Unknown responses and routes answer in OpenAI's error shape (and no test hooks by default)."""
    got, body, _ = raw_request(fake_server, method, path, b"{}" if method in ("POST", "PUT") else None)

    assert (status, message, "invalid_request_error") == (
        got,
        body["error"]["message"],
        body["error"]["type"],
    )


@pytest.mark.parametrize(
    ("query", "param"),
    [("limit=0", "limit"), ("limit=101", "limit"), ("limit=many", "limit"), ("order=sideways", "order")],
)
def test_bad_input_items_queries(
    fake_server: ResponsesServer, plain_client: openai.OpenAI, query: str, param: str
) -> None:
    """input_items refuses a bad limit or order with a 400."""
    created = plain_client.responses.create(model="scripted", input="x")

    status, body, _ = raw_request(fake_server, "GET", f"/v1/responses/{created.id}/input_items?{query}")

    assert (400, param) == (status, body["error"]["param"])


def test_stream_request_errors_come_before_the_stream(plain_client: openai.OpenAI) -> None:
    """A refused streaming request fails at call time with the same 400, not mid-stream."""
    with pytest.raises(openai.BadRequestError) as caught:
        plain_client.responses.create(
            model="scripted", input="x", previous_response_id="resp_unknown", stream=True
        )
    with pytest.raises(openai.BadRequestError):
        plain_client.responses.stream(
            model="scripted", input="x", previous_response_id="resp_unknown"
        ).__enter__()

    assert error_of(caught)[2] == "previous_response_not_found"


def test_error_bodies_are_json_with_request_ids(fake_server: ResponsesServer) -> None:
    """Errors carry JSON content and an x-request-id header."""
    _, body, headers = raw_request(fake_server, "POST", "/v1/responses", json.dumps({"input": "x"}).encode())

    assert headers["content-type"].startswith("application/json")
    assert headers["x-request-id"].startswith("req_")
    assert body["error"]["param"] == "model"


@pytest.mark.parametrize(
    "raw",
    [
        rb'{"model": "m", "input": "\ud800"}',
        rb'{"model": "m", "input": "ok", "instructions": "be \udfff brief"}',
        rb'{"model": "m", "input": [{"role": "user", "content": [{"type": "input_text", "text": "\ud83d"}]}]}',  # noqa: E501
        rb'{"model": "m", "input": "ok", "metadata": {"\ud800": "key"}}',
        rb'{"model": "m", "input": "ok", "stream": true, "instructions": "\udc00"}',
    ],
    ids=["input", "instructions", "content part", "object key", "streamed"],
)
def test_lone_surrogates_are_a_400_before_anything_is_stored(any_server: ResponsesServer, raw: bytes) -> None:
    """A JSON-legal lone-surrogate escape is not text: a 400 in OpenAI's shape, and no response is stored."""
    before = any_server.state.store.count()

    status, body, _ = raw_request(any_server, "POST", "/v1/responses", raw)

    assert 400 == status
    assert {"message", "type", "param", "code"} == set(body["error"])
    assert "invalid_request_error" == body["error"]["type"]
    assert before == any_server.state.store.count()


def test_a_surrogate_pair_is_text(fake_server: ResponsesServer) -> None:
    """An escaped surrogate pair is one character, served like any other."""
    status, body = post_json(fake_server, {"model": "m", "input": "\U0001f600"})
    raw_status, raw_body, _ = raw_request(
        fake_server, "POST", "/v1/responses", rb'{"model": "m", "input": "\ud83d\ude00"}'
    )

    assert (200, 200) == (status, raw_status)
    assert "\U0001f600" in raw_body["output"][0]["content"][0]["text"]
    assert body["output"][0]["content"][0]["text"] == raw_body["output"][0]["content"][0]["text"]
