"""
Stale anchors refused *inside* a stream, as llama-stack does, against a real server.

llama-stack answers a streamed request whose ``previous_response_id`` it does
not have with HTTP 200, and a first event
``{"error": {"message": "Response '…' not found. …", "code": "404"}}``, which
the openai client raises as a bare ``openai.APIError`` on the first ``next()``.
anchortrack peeks at a chained stream's first event before handing the stream
over, so that refusal is recovered from like an HTTP one: evicted, resent in
full, and the caller gets the resend's stream.

The server is agentic-api behind a loopback adapter that turns its HTTP 404 for
a streamed request into llama-stack's in-stream refusal (same wording, same
``code``), so the chain semantics are a real server's.
(The same recovery against the local server's ``stale_in_stream`` hook is in
``tests/e2e/test_recovery.py``.)
"""

from __future__ import annotations

import json
import re
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import openai
import pytest

import anchortrack
from anchortrack.server import WireTap, http_client_classes
from anchortrack.stores import MemoryStore

from ..helpers import sent
from .helpers import MODEL, AgenticAPI


_NOT_FOUND = re.compile(r"Response with id '(?P<id>[^']+)'")


class LlamaShaped:
    """A loopback adapter: streamed 404s from *target* become llama-stack's in-stream error event."""

    def __init__(self, target: str) -> None:
        self.target = target.rstrip("/")
        adapter = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                streamed = bool(json.loads(raw or b"{}").get("stream"))
                request = urllib.request.Request(
                    adapter.target + self.path.removeprefix("/v1"),
                    data=raw,
                    headers={"content-type": "application/json", "authorization": "Bearer test"},
                )
                try:
                    with urllib.request.urlopen(request, timeout=30) as answer:
                        status, ctype, body = answer.status, answer.headers["content-type"], answer.read()
                except urllib.error.HTTPError as refused:
                    status, ctype, body = refused.code, refused.headers["content-type"], refused.read()
                match = _NOT_FOUND.search(body.decode(errors="replace"))
                if streamed and status == 404 and match:
                    message = (
                        f"Response '{match['id']}' not found. "
                        "Use 'client.responses.list()' to list available Responses."
                    )
                    status, ctype = 200, "text/event-stream"
                    body = f"data: {json.dumps({'error': {'message': message, 'code': '404'}})}\n\n".encode()
                self.send_response(status)
                self.send_header("content-type", ctype or "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def base_url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(name="llama")
def _llama(gateway: AgenticAPI) -> Iterator[LlamaShaped]:
    adapter = LlamaShaped(gateway.base_url)
    yield adapter
    adapter.close()


@pytest.fixture(name="lclient")
def _lclient(llama: LlamaShaped, wire: WireTap) -> Iterator[openai.OpenAI]:
    sync, _ = http_client_classes()
    raw = openai.OpenAI(
        base_url=llama.base_url,
        api_key="test",
        max_retries=0,
        http_client=sync(event_hooks={"request": [wire.hook]}),
    )
    yield anchortrack.wrap(raw, store=MemoryStore())
    raw.close()


@pytest.fixture(name="laclient")
async def _laclient(llama: LlamaShaped, wire: WireTap) -> Any:
    _, asyn = http_client_classes()
    raw = openai.AsyncOpenAI(
        base_url=llama.base_url,
        api_key="test",
        max_retries=0,
        http_client=asyn(event_hooks={"request": [wire.ahook]}),
    )
    yield anchortrack.wrap(raw, store=MemoryStore())
    await raw.close()


def _first_turn(client: openai.OpenAI) -> tuple[list[Any], str]:
    history: list[Any] = [{"role": "user", "content": "one"}]
    first = client.responses.create(model=MODEL, input=history)
    return [*history, *first.output, {"role": "user", "content": "two"}], first.id


def _assert_recovered(client: Any, wire: WireTap, before: int, anchor_id: str, history: list[Any]) -> None:
    assert 2 == len(wire.bodies) - before
    assert anchor_id == sent(wire, -2)["previous_response_id"]
    assert "previous_response_id" not in sent(wire)
    assert len(history) == len(sent(wire)["input"])
    assert {"stale_anchor": 1} == anchortrack.tracker(client).stats.snapshot()["resends"]


def test_adapter_reproduces_llama_stacks_in_stream_refusal(llama: LlamaShaped, gateway: AgenticAPI) -> None:
    """Guard for the adapter itself: an unwrapped stream to a lost anchor raises a bare APIError."""
    client = openai.OpenAI(base_url=llama.base_url, api_key="test", max_retries=0)
    with pytest.raises(openai.APIError) as raised:
        list(client.responses.create(model=MODEL, input="x", previous_response_id="resp_gone", stream=True))
    assert not isinstance(raised.value, openai.APIStatusError)
    assert "404" == raised.value.code
    client.close()


@pytest.mark.parametrize("form", ["stream", "manager"])
def test_in_stream_stale_anchor_is_recovered(
    lclient: openai.OpenAI, gateway: AgenticAPI, wire: WireTap, form: str
) -> None:
    history, anchor_id = _first_turn(lclient)
    gateway.restart()
    before = len(wire.bodies)

    if form == "stream":
        events = list(lclient.responses.create(model=MODEL, input=history, stream=True))
        assert "response.created" == events[0].type
        final = events[-1].response
    else:
        with lclient.responses.stream(model=MODEL, input=history) as stream:
            final = stream.get_final_response()

    _assert_recovered(lclient, wire, before, anchor_id, history)
    lclient.responses.create(model=MODEL, input=[*history, *final.output, {"role": "user", "content": "3"}])
    assert final.id == sent(wire)["previous_response_id"]


@pytest.mark.parametrize("form", ["stream", "manager"])
async def test_in_stream_stale_anchor_is_recovered_async(
    laclient: openai.AsyncOpenAI, gateway: AgenticAPI, wire: WireTap, form: str
) -> None:
    history: list[Any] = [{"role": "user", "content": "one"}]
    first = await laclient.responses.create(model=MODEL, input=history)
    history = [*history, *first.output, {"role": "user", "content": "two"}]
    gateway.restart()
    before = len(wire.bodies)

    if form == "stream":
        events = [e async for e in await laclient.responses.create(model=MODEL, input=history, stream=True)]
        final = events[-1].response
    else:
        async with laclient.responses.stream(model=MODEL, input=history) as stream:
            final = await stream.get_final_response()

    _assert_recovered(laclient, wire, before, first.id, history)
    await laclient.responses.create(
        model=MODEL, input=[*history, *final.output, {"role": "user", "content": "3"}]
    )
    assert final.id == sent(wire)["previous_response_id"]
