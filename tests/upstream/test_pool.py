"""The upstream connection pool and retry policy, counted at a real loopback provider."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from anchortrack.server import ResponsesServer, Upstream
from anchortrack.server._records import Row, SQLiteResponseStore

from .helpers import API_KEY
from .provider import FakeProvider, Reply


@pytest.fixture(name="own_bridge")
def _own_bridge(provider: FakeProvider) -> Iterator[ResponsesServer]:
    """A bridge of its own, so its first request opens a new connection to the provider."""
    with ResponsesServer(upstream=Upstream(provider.base_url, api_key=API_KEY, timeout=10)) as srv:
        yield srv


def test_one_pooled_connection_serves_many_requests(
    provider: FakeProvider, own_bridge: ResponsesServer
) -> None:
    """Twenty sequential requests (chained, as an agent sends them) reach the provider over one kept-alive
    connection; 8 concurrent ones over at most 8; the pool is closed at shutdown."""
    before = provider.connections
    with openai.OpenAI(base_url=own_bridge.base_url, api_key="k", max_retries=0) as client:
        previous = None
        for turn in range(20):
            answer = client.responses.create(
                model="m", input=f"turn {turn}", **({"previous_response_id": previous} if previous else {})
            )
            previous = answer.id
    sequential = provider.connections - before

    async def burst() -> None:
        async with openai.AsyncOpenAI(base_url=own_bridge.base_url, api_key="k", max_retries=0) as client:
            await asyncio.gather(*(client.responses.create(model="m", input=f"c{n}") for n in range(8)))

    asyncio.run(burst())
    concurrent = provider.connections - before
    backend = own_bridge.state.backend
    own_bridge.stop()

    assert 1 == sequential
    assert concurrent <= 8
    assert 28 == len(provider.bodies)
    assert isinstance(backend, Upstream)
    assert backend._pool is None  # closed by the app's shutdown


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_a_dropped_connection_is_retried(
    provider: FakeProvider, own_bridge: ResponsesServer, stream: bool
) -> None:
    """A provider that drops the first connection unanswered (a full accept queue, a restart) costs the
    caller nothing: the request is sent again on a new connection and answered, streamed or not."""
    provider.drop_connections(1)
    before = provider.connections
    with openai.OpenAI(base_url=own_bridge.base_url, api_key="k", max_retries=0) as client:
        if stream:
            events = list(client.responses.create(model="m", input="hi", stream=True))
            final = events[-1].response  # type: ignore[union-attr]
            assert "response.completed" == events[-1].type
            assert ["response.created", "response.in_progress"] == [e.type for e in events[:2]]
        else:
            final = client.responses.create(model="m", input="hi")

    assert "hello from the provider" == final.output_text
    assert 2 == provider.connections - before
    assert 1 == len(provider.bodies)  # the dropped connection never carried the request
    assert 1 == own_bridge.state.store.count()


def test_a_429_is_retried_after_its_retry_after(provider: FakeProvider, bridge: ResponsesServer) -> None:
    """A 429 with ``Retry-After: 1`` is sent again after a second (not the 0.5 s backoff) and answered;
    one asking to wait longer than two minutes is the caller's 429 at once, as the openai SDK does."""
    provider.script(
        Reply(status=429, body=b'{"error": {"message": "slow down"}}', headers={"retry-after": "1"})
    )
    with openai.OpenAI(base_url=bridge.base_url, api_key="k", max_retries=0) as client:
        started = time.monotonic()
        answer = client.responses.create(model="m", input="hi")
        waited = time.monotonic() - started
        provider.script(Reply(status=429, body=b"{}", headers={"retry-after": "600"}))
        with pytest.raises(openai.RateLimitError):
            client.responses.create(model="m", input="hi")

    assert "hello from the provider" == answer.output_text
    assert waited >= 1.0
    assert 3 == len(provider.bodies)


def test_a_read_timeout_is_not_retried(provider: FakeProvider) -> None:
    """A provider that takes the request and stays silent is answered 504 after one timeout, not three."""
    provider.script(Reply(delay=30))
    with (
        ResponsesServer(upstream=Upstream(provider.base_url, api_key=API_KEY, timeout=0.3)) as srv,
        openai.OpenAI(base_url=srv.base_url, api_key="k", max_retries=0) as client,
        pytest.raises(openai.APIStatusError) as caught,
    ):
        client.responses.create(model="m", input="hi")

    assert 504 == caught.value.status_code
    assert 1 == len(provider.bodies)


class _SlowDisk(SQLiteResponseStore):
    """A SQLite store whose write of a response to the input ``SLOW`` waits a second, as on a busy disk."""

    writing = threading.Event()
    written = 0.0

    def _put(self, row: Row) -> None:
        if "SLOW" in row.input_json:
            self.writing.set()
            time.sleep(1.0)
            self.written = time.monotonic()
        super()._put(row)


def test_a_slow_sqlite_write_does_not_stop_the_event_loop(provider: FakeProvider, tmp_path: Path) -> None:
    """While one response's save waits on the disk, the server keeps answering what needs no store (here
    an unknown route, in OpenAI's shape) before that write ends: the save runs off the event loop. The
    slow response is stored before its answer. (Requests that read the store wait for the write.)"""
    store = _SlowDisk(tmp_path / "responses.db")
    finished: dict[str, float] = {}
    with ResponsesServer(
        store=store, upstream=Upstream(provider.base_url, api_key=API_KEY, timeout=10)
    ) as srv:

        def send() -> None:
            with openai.OpenAI(base_url=srv.base_url, api_key="k", max_retries=0) as client:
                answer = client.responses.create(model="m", input="SLOW")
            assert store.get(answer.id) is not None
            finished["SLOW"] = time.monotonic()

        slow = threading.Thread(target=send)
        slow.start()
        assert store.writing.wait(30)
        with (
            openai.OpenAI(base_url=srv.base_url, api_key="k", max_retries=0) as client,
            pytest.raises(openai.NotFoundError) as caught,
        ):
            client.models.list()
        finished["other"] = time.monotonic()
        slow.join(30)
        stored = store.count()

    assert "Invalid URL (GET /v1/models)" == caught.value.body["message"]  # type: ignore[index]
    assert finished["other"] < store.written < finished["SLOW"]
    assert 1 == stored
