"""Upstream failures: OpenAI-shaped 502/504 or the provider's status, the key redacted, nothing saved."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from anchortrack.server import ResponsesServer, Upstream
from anchortrack.server._upstream import RETRIES

from .helpers import API_KEY
from .provider import FakeProvider, Reply, closed_port


def _message(error: openai.APIError) -> str:
    """The ``message`` of the error body (the SDK prefixes its own ``message``)."""
    assert isinstance(error.body, dict)
    return str(error.body["message"])


def _create(client: openai.OpenAI, stream: bool) -> Any:
    if stream:
        return list(client.responses.create(model="m1", input="hi", stream=True))
    return client.responses.create(model="m1", input="hi")


@pytest.fixture(name="quick_bridge")
def _quick_bridge(provider: FakeProvider) -> Iterator[ResponsesServer]:
    """A bridge to the fake provider that waits only 0.3 s for it."""
    with ResponsesServer(upstream=Upstream(provider.base_url, api_key=API_KEY, timeout=0.3)) as srv:
        yield srv


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_unreachable_upstream_is_a_502_naming_it(stream: bool) -> None:
    """Nothing listening: 502 upstream_unreachable at once, nothing saved."""
    url = f"http://127.0.0.1:{closed_port()}/v1"
    with (
        ResponsesServer(upstream=url) as srv,
        openai.OpenAI(base_url=srv.base_url, api_key="k", max_retries=0) as c,
    ):
        with pytest.raises(openai.APIStatusError) as caught:
            _create(c, stream)
        count = srv.state.store.count()

    assert (caught.value.status_code, caught.value.code) == (502, "upstream_unreachable")
    assert url in _message(caught.value)
    assert count == 0


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_slow_upstream_is_a_504_after_the_timeout(
    provider: FakeProvider, quick_bridge: ResponsesServer, stream: bool
) -> None:
    """A provider that does not answer within the timeout: 504 upstream_timeout, never a hang."""
    provider.script(Reply(delay=30))
    with (
        openai.OpenAI(base_url=quick_bridge.base_url, api_key="k", max_retries=0) as client,
        pytest.raises(openai.APIStatusError) as caught,
    ):
        _create(client, stream)

    assert (caught.value.status_code, caught.value.code) == (504, "upstream_timeout")
    assert "within 0.3 seconds" in _message(caught.value)
    assert quick_bridge.state.store.count() == 0


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize(
    ("reply", "status", "code", "words"),
    [
        (
            Reply(
                status=404,
                body=b'{"error": {"message": "model \'m1\' not found", "code": "model_not_found"}}',
            ),
            404,
            "model_not_found",
            "HTTP 404: model 'm1' not found",
        ),
        (
            Reply(status=400, body=b'{"error": "context too long"}'),
            400,
            "upstream_error",
            "HTTP 400: context too long",
        ),
        (Reply(status=429, body=b'{"detail": "slow down"}'), 429, "upstream_error", "HTTP 429: slow down"),
        (Reply(status=503, body=b"overloaded"), 502, "upstream_error", "HTTP 503: overloaded"),
    ],
    ids=["404", "400-ollama-shape", "429-fastapi-shape", "503"],
)
def test_provider_errors_carry_its_status_and_message(
    provider: FakeProvider,
    bridge: ResponsesServer,
    bridge_client: openai.OpenAI,
    reply: Reply,
    status: int,
    code: str,
    words: str,
    stream: bool,
) -> None:
    """A provider 4xx keeps its status, a 5xx becomes 502; the provider's message, naming the upstream.
    A 429 or 5xx is tried again (as the openai SDK does) before it is the caller's error."""
    before = bridge.state.store.count()
    tries = 1 + RETRIES if reply.status in (429, 503) else 1
    provider.script(*[reply] * tries)

    with pytest.raises(openai.APIStatusError) as caught:
        _create(bridge_client, stream)

    assert (caught.value.status_code, caught.value.code) == (status, code)
    assert f"The upstream provider {provider.base_url} answered {words}" == _message(caught.value)
    assert bridge.state.store.count() == before
    assert tries == len(provider.bodies)


def test_the_api_key_is_redacted_everywhere(
    provider: FakeProvider,
    bridge: ResponsesServer,
    bridge_client: openai.OpenAI,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A provider echoing the key: errors, responses, stored responses, headers and logs show [redacted]."""
    provider.echo_authorization = True
    provider.script(
        Reply(status=401, body=b'{"error": {"message": "Incorrect API key provided: AUTH"}}'),
        Reply(content="I saw AUTH"),
        Reply(content="I saw AUTH"),
    )
    caplog.set_level(logging.DEBUG)

    with pytest.raises(openai.AuthenticationError) as caught:
        bridge_client.responses.create(model="m1", input="hi")
    raw = bridge_client.responses.with_raw_response.create(model="m1", input="hi")
    streamed = list(bridge_client.responses.create(model="m1", input="hi", stream=True))
    response = raw.parse()
    stored = bridge_client.responses.retrieve(response.id)
    stored_stream = bridge_client.responses.retrieve(streamed[-1].response.id)

    assert provider.authorizations == [f"Bearer {API_KEY}"] * 3
    assert _message(caught.value).endswith("Incorrect API key provided: Bearer [redacted]")
    assert (
        response.output_text == stored.output_text == stored_stream.output_text == "I saw Bearer [redacted]"
    )
    everything = [
        caught.value.message,
        str(caught.value.body),
        str(caught.value.response.headers),
        str(raw.headers),
        stored.to_json(),
        stored_stream.to_json(),
        *(event.to_json() for event in streamed),
        caplog.text,
        *(str(record.__dict__) for record in caplog.records),
        repr(bridge.state.backend),
    ]
    assert not [text for text in everything if API_KEY in text]
    assert any("upstream_refused" in record.getMessage() for record in caplog.records)


@pytest.mark.parametrize(
    ("reply", "words"),
    [
        (Reply(garbage=b"<html>502 Bad Gateway</html>"), "the body is not JSON"),
        (Reply(garbage=b'{"object": "chat.completion"}'), "it has no choices"),
        (
            Reply(garbage=b'{"choices": [{"message": {"content": 7}}]}'),
            "the message content is int, not text",
        ),
    ],
    ids=["html", "no-choices", "bad-content"],
)
def test_garbage_is_a_502_naming_the_upstream(
    provider: FakeProvider, bridge: ResponsesServer, bridge_client: openai.OpenAI, reply: Reply, words: str
) -> None:
    """A 200 that is not a Chat Completion: 502 upstream_bad_response, nothing saved."""
    before = bridge.state.store.count()
    provider.script(reply)

    with pytest.raises(openai.APIStatusError) as caught:
        bridge_client.responses.create(model="m1", input="hi")

    assert (caught.value.status_code, caught.value.code) == (502, "upstream_bad_response")
    assert _message(caught.value) == (
        f"The upstream provider {provider.base_url} sent a reply that is not a Chat Completion: {words}."
    )
    assert bridge.state.store.count() == before


@pytest.mark.parametrize(
    ("reply", "code", "words"),
    [
        (Reply(garbage=b"{not json"), "upstream_bad_response", "a stream chunk is not JSON"),
        (Reply(truncate=True), "upstream_bad_response", "the stream ended before the reply was complete"),
        (Reply(error_chunk={"message": "GPU fell over", "code": "oom"}), "oom", "mid-stream: GPU fell over"),
    ],
    ids=["garbage-chunk", "truncated", "error-chunk"],
)
def test_a_stream_that_breaks_ends_with_an_error_event(
    provider: FakeProvider, bridge: ResponsesServer, reply: Reply, code: str, words: str
) -> None:
    """Mid-stream failures: the events so far, then an error event naming the upstream; nothing kept."""
    before = bridge.state.store.count()
    provider.script(reply)

    with openai.OpenAI(base_url=bridge.base_url, api_key="k", max_retries=0) as client:
        events = list(client.responses.create(model="m1", input="hi", stream=True))

    types = [event.type for event in events]
    assert types[:2] == ["response.created", "response.in_progress"]
    assert types[-1] == "error"
    assert not {"response.completed", "response.failed", "response.incomplete"} & set(types)
    assert events[-1].code == code
    assert words in events[-1].message
    assert provider.base_url in events[-1].message
    assert [event.sequence_number for event in events] == list(range(len(events)))
    assert bridge.state.store.count() == before


def test_websocket_mode_is_refused_in_front_of_a_provider(
    bridge_client: openai.OpenAI, provider: FakeProvider
) -> None:
    """A socket create gets an error frame, never the scripted answer; the provider sees nothing."""
    with bridge_client.responses.connect() as conn:
        conn.response.create(model="m", input="hello")
        event = conn.recv()
    assert "error" == event.type
    assert "unsupported_websocket_upstream" == event.error.code
    assert [] == provider.bodies
