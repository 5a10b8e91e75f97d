"""The /_test HTTP hooks, for tests that drive the server from another process."""

from __future__ import annotations

import json
from collections.abc import Iterator

import openai
import pytest

from anchortrack.server import ResponsesServer

from ..helpers import user_message
from .helpers import as_items, make_client, raw_request


@pytest.fixture(scope="module", name="hooked")
def _hooked() -> Iterator[ResponsesServer]:
    with ResponsesServer(test_hooks=True) as srv:
        yield srv


@pytest.fixture(name="hclient")
def _hclient(hooked: ResponsesServer) -> Iterator[openai.OpenAI]:
    client = make_client(hooked)
    yield client
    client.close()


def test_expire_hook(hooked: ResponsesServer, hclient: openai.OpenAI) -> None:
    """POST /_test/responses/{id}/expire makes chaining from it not found."""
    first = hclient.responses.create(model="scripted", input="hi")

    status, body, _ = raw_request(hooked, "POST", f"/_test/responses/{first.id}/expire", b"")

    assert (200, {"id": first.id, "expired": True}) == (status, body)
    with pytest.raises(openai.BadRequestError) as caught:
        hclient.responses.create(model="scripted", input="x", previous_response_id=first.id)
    assert caught.value.code == "previous_response_not_found"
    assert raw_request(hooked, "POST", f"/_test/responses/{first.id}/expire", b"")[0] == 404


def test_drop_hook(hooked: ResponsesServer, hclient: openai.OpenAI) -> None:
    """DELETE /_test/responses/{id} removes it from the store."""
    first = hclient.responses.create(model="scripted", input="hi")

    status, body, _ = raw_request(hooked, "DELETE", f"/_test/responses/{first.id}")

    assert (200, {"id": first.id, "dropped": True}) == (status, body)
    with pytest.raises(openai.NotFoundError):
        hclient.responses.retrieve(first.id)
    assert raw_request(hooked, "DELETE", f"/_test/responses/{first.id}")[0] == 404


def test_zdr_hook(hooked: ResponsesServer, hclient: openai.OpenAI) -> None:
    """POST /_test/zdr switches the zero-data-retention refusal on and off."""
    first = hclient.responses.create(model="scripted", input="hi")
    try:
        status, body, _ = raw_request(hooked, "POST", "/_test/zdr", json.dumps({"enabled": True}).encode())
        assert (status, body) == (200, {"enabled": True})
        assert raw_request(hooked, "GET", "/_test/zdr")[1] == {"enabled": True}
        with pytest.raises(openai.BadRequestError) as caught:
            hclient.responses.create(model="scripted", input="x", previous_response_id=first.id)
        assert (caught.value.code, caught.value.param) == ("unsupported_parameter", "previous_response_id")
    finally:
        raw_request(hooked, "POST", "/_test/zdr", json.dumps({"enabled": False}).encode())

    assert hooked.state.zdr is False
    assert raw_request(hooked, "POST", "/_test/zdr", json.dumps({"enabled": "yes"}).encode())[0] == 400


def test_stale_in_stream_hook(hooked: ResponsesServer, hclient: openai.OpenAI) -> None:
    """POST /_test/stale_in_stream: a streamed stale anchor gets a 200 and llama-stack's error event."""
    body = {"model": "scripted", "input": "x", "previous_response_id": "resp_gone", "stream": True}
    try:
        status, reply, _ = raw_request(
            hooked, "POST", "/_test/stale_in_stream", json.dumps({"enabled": True}).encode()
        )
        assert (status, reply) == (200, {"enabled": True})
        assert raw_request(hooked, "GET", "/_test/stale_in_stream")[1] == {"enabled": True}

        with pytest.raises(openai.APIError) as caught:
            list(hclient.responses.create(**body))
        assert not isinstance(caught.value, openai.APIStatusError)
        assert "404" == caught.value.code
        assert "Response 'resp_gone' not found." in caught.value.message
        with pytest.raises(openai.BadRequestError):  # not streamed: OpenAI's refusal, unchanged
            hclient.responses.create(**{**body, "stream": False})
    finally:
        raw_request(hooked, "POST", "/_test/stale_in_stream", json.dumps({"enabled": False}).encode())

    assert hooked.state.stale_in_stream is False
    with pytest.raises(openai.BadRequestError):
        list(hclient.responses.create(**body))
    assert (
        raw_request(hooked, "POST", "/_test/stale_in_stream", json.dumps({"enabled": 1}).encode())[0] == 400
    )


def test_ignore_previous_response_id_hook(hooked: ResponsesServer, hclient: openai.OpenAI) -> None:
    """POST /_test/ignore_previous_response_id: a chained request is answered from its own input alone."""
    first = hclient.responses.create(model="scripted", input="hi")
    switch = "/_test/ignore_previous_response_id"
    try:
        status, reply, _ = raw_request(hooked, "POST", switch, json.dumps({"enabled": True}).encode())
        assert (status, reply) == (200, {"enabled": True})
        assert raw_request(hooked, "GET", switch)[1] == {"enabled": True}
        ignored = hclient.responses.create(model="scripted", input="two", previous_response_id=first.id)
        gone = hclient.responses.create(model="scripted", input="two", previous_response_id="resp_gone")
    finally:
        raw_request(hooked, "POST", switch, json.dumps({"enabled": False}).encode())

    alone = hclient.responses.create(model="scripted", input="two")
    chained = hclient.responses.create(model="scripted", input="two", previous_response_id=first.id)
    assert ignored.previous_response_id is None
    assert alone.output_text == ignored.output_text == gone.output_text != chained.output_text
    assert hooked.state.ignore_previous_response_id is False
    assert raw_request(hooked, "POST", switch, json.dumps({"enabled": "on"}).encode())[0] == 400


def test_context_hook(hooked: ResponsesServer, hclient: openai.OpenAI) -> None:
    """GET /_test/responses/{id}/context returns what the model saw."""
    first = hclient.responses.create(model="scripted", input="one")
    second = hclient.responses.create(model="scripted", input="two", previous_response_id=first.id)

    status, body, _ = raw_request(hooked, "GET", f"/_test/responses/{second.id}/context")

    assert status == 200
    assert [user_message("one"), *as_items(first.output), user_message("two")] == body["data"]
    assert raw_request(hooked, "GET", "/_test/responses/resp_never/context")[0] == 404


def test_requests_hook(hooked: ResponsesServer, hclient: openai.OpenAI) -> None:
    """GET /_test/requests lists the POST bodies; DELETE forgets them."""
    raw_request(hooked, "DELETE", "/_test/requests")
    hclient.responses.create(model="scripted", input="logged")

    body = raw_request(hooked, "GET", "/_test/requests")[1]

    assert body["data"] == [{"model": "scripted", "input": "logged"}]
    assert raw_request(hooked, "DELETE", "/_test/requests")[1]["data"] == []
