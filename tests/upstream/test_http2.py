"""The upstream's pool over HTTP/2 (ALPN ``h2``) against a real HTTP/2 server over TLS (hypercorn)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import h2.config
import h2.connection
import h2.events
import openai
import pytest
import trustme
from hypercorn.asyncio import serve
from hypercorn.config import Config

from anchortrack.server import ResponsesServer, Upstream
from anchortrack.server._http import Pool, TransportError

from .provider import Reply
from .test_http import Proxy


Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


class App:
    """An ASGI app answering ``POST /v1/<what>``; records each request's HTTP version and client port."""

    def __init__(self) -> None:
        self.versions: list[str] = []
        self.ports: set[int] = set()
        self.heads: list[tuple[str, dict[bytes, bytes]]] = []  # each request's path and headers
        self.gate = asyncio.Event()  # the streamed answer's second half waits for it
        self.busy = self.most = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        self.versions.append(scope["http_version"])
        self.ports.add(scope["client"][1])
        self.heads.append((scope["path"], dict(scope["headers"])))
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        what = scope["path"].rsplit("/", 1)[-1]
        head = {"type": "http.response.start", "status": 200, "headers": [(b"x-what", what.encode())]}
        await send(head)
        if what == "stream":
            await send({"type": "http.response.body", "body": b"data: 1\n\n", "more_body": True})
            await self.gate.wait()
            await send({"type": "http.response.body", "body": b"data: 2\n\n", "more_body": True})
            answer = b"data: [DONE]\n\n"
        elif what == "big":
            answer = bytes(range(256)) * (5 * 4096)  # 5 MiB, far past the default 64 KiB windows
        elif what == "slow":
            self.busy += 1
            self.most = max(self.most, self.busy)
            await asyncio.sleep(0.2)
            self.busy -= 1
            answer = b"slow"
        elif what == "completions":  # a Chat Completions provider
            asked = json.loads(body)
            reply = Reply(content="over h2")
            if asked.get("stream"):
                chunks = [json.dumps(chunk) for chunk in reply.chunks(asked["model"], True)]
                answer = "".join(f"data: {chunk}\n\n" for chunk in [*chunks, "[DONE]"]).encode()
            else:
                answer = json.dumps(reply.completion(asked["model"])).encode()
        else:  # echo the body's size: the request's body arrived whole
            answer = str(len(body)).encode()
        await send({"type": "http.response.body", "body": answer})


@pytest.fixture(scope="module", name="ca")
def _ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(name="trusted")
def _trusted(ca: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context()
    ca.configure_trust(context)
    return context


@contextlib.asynccontextmanager
async def h2_server(ca: trustme.CA, tmp_path: Path, **settings: Any) -> AsyncIterator[tuple[App, str]]:
    """Hypercorn serving `App` over TLS on a loopback port (ALPN h2 and http/1.1 unless *settings* say)."""
    pem = tmp_path / "server.pem"
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(pem))
    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    listening.listen()  # connections wait for hypercorn to take them
    port = listening.getsockname()[1]
    config = Config()
    config.bind = [f"fd://{listening.detach()}"]  # hypercorn's own from now on
    config.certfile = config.keyfile = str(pem)
    config.accesslog = config.errorlog = None
    for name, value in settings.items():
        setattr(config, name, value)
    app, stop = App(), asyncio.Event()
    serving = asyncio.create_task(serve(app, config, shutdown_trigger=stop.wait))  # type: ignore[arg-type]
    try:
        yield app, f"https://127.0.0.1:{port}/v1"
    finally:
        stop.set()
        await serving


async def post(pool: Pool, what: str, body: bytes = b"{}") -> bytes:
    response = await pool.post(f"/{what}", body)
    assert 200 == response.status_code
    assert what == response.headers["x-what"]
    return await response.read()


async def test_concurrent_requests_are_streams_of_one_h2_connection(
    ca: trustme.CA, trusted: ssl.SSLContext, tmp_path: Path
) -> None:
    """The provider picks h2; 20 concurrent requests (and a 1 MiB request body, flow-controlled on the
    way out) are answered over one TCP connection, all at once."""
    async with h2_server(ca, tmp_path) as (app, url):
        pool = Pool(url, 5.0, trusted, {"authorization": "Bearer k"})
        answers = await asyncio.gather(*(post(pool, "slow") for _ in range(20)))
        assert b"1048576" == await post(pool, "echo", b"x" * 1048576)
        await pool.aclose()
    assert [b"slow"] * 20 == answers
    path, head = app.heads[-1]
    assert ("/v1/echo", b"Bearer k", b"application/json") == (
        path,
        head[b"authorization"],
        head[b"content-type"],
    )
    assert {"2"} == set(app.versions)
    assert 1 == len(app.ports)
    assert 20 == app.most


async def test_a_full_connection_opens_another(
    ca: trustme.CA, trusted: ssl.SSLContext, tmp_path: Path
) -> None:
    """With SETTINGS_MAX_CONCURRENT_STREAMS 5, 20 concurrent requests take four connections, not 20; the
    next 20 take the same four again."""
    async with h2_server(ca, tmp_path, h2_max_concurrent_streams=5) as (app, url):
        pool = Pool(url, 5.0, trusted, {})
        for _ in range(2):
            assert [b"slow"] * 20 == await asyncio.gather(*(post(pool, "slow") for _ in range(20)))
        await pool.aclose()
    assert (4, 20) == (len(app.ports), app.most)  # five streams on each


async def test_a_streamed_answer_arrives_piece_by_piece(
    ca: trustme.CA, trusted: ssl.SSLContext, tmp_path: Path
) -> None:
    """The first event is read while the server still holds back the rest (which waits for that read)."""
    async with h2_server(ca, tmp_path) as (app, url):
        pool = Pool(url, 5.0, trusted, {})
        response = await pool.post("/stream", b"{}")
        lines = response.lines()
        first = await anext(lines)
        assert not app.gate.is_set()
        app.gate.set()
        rest = [line async for line in lines]
        await response.aclose()
        await pool.aclose()
    assert ["data: 1", "", "data: 2", "", "data: [DONE]", ""] == [first, *rest]


async def test_a_large_answer_is_read_whole(ca: trustme.CA, trusted: ssl.SSLContext, tmp_path: Path) -> None:
    """5 MiB, 80 times the initial window: it only arrives if what was read is acknowledged."""
    async with h2_server(ca, tmp_path) as (app, url):
        pool = Pool(url, 5.0, trusted, {})
        bodies = await asyncio.gather(post(pool, "big"), post(pool, "big"))
        await pool.aclose()
    assert [bytes(range(256)) * (5 * 4096)] * 2 == bodies
    assert (["2", "2"], 1) == (app.versions, len(app.ports))


async def test_h2_goes_through_the_proxy_tunnel(
    ca: trustme.CA, trusted: ssl.SSLContext, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the ``CONNECT`` tunnel of the proxy ``HTTPS_PROXY`` names, the provider's TLS picks h2 too."""
    proxy = Proxy()
    relay = await asyncio.start_server(proxy.serve, "127.0.0.1", 0)
    monkeypatch.setenv("https_proxy", f"http://127.0.0.1:{relay.sockets[0].getsockname()[1]}")
    monkeypatch.setenv("no_proxy", "")
    try:
        async with h2_server(ca, tmp_path) as (app, url):
            pool = Pool(url, 5.0, trusted, {})
            assert [b"2", b"2"] == await asyncio.gather(post(pool, "echo", b"ab"), post(pool, "echo", b"cd"))
            await pool.aclose()
    finally:
        relay.close()
    assert (["2", "2"], 1) == (app.versions, len(proxy.asked))
    assert proxy.asked[0].startswith(b"CONNECT 127.0.0.1:")


async def test_a_provider_offering_only_http1_gets_http1(
    ca: trustme.CA, trusted: ssl.SSLContext, tmp_path: Path
) -> None:
    """ALPN picks http/1.1: the pool behaves as before (concurrent requests on their own connections)."""
    async with h2_server(ca, tmp_path, alpn_protocols=["http/1.1"]) as (app, url):
        pool = Pool(url, 5.0, trusted, {})
        assert [b"slow"] * 3 == await asyncio.gather(*(post(pool, "slow") for _ in range(3)))
        assert b"slow" == await post(pool, "slow")
        await pool.aclose()
    assert {"1.1"} == set(app.versions)
    assert 3 == len(app.ports)


async def test_a_connection_the_provider_closed_is_not_reused(
    ca: trustme.CA, trusted: ssl.SSLContext, tmp_path: Path
) -> None:
    """Hypercorn closes a connection idle past its keep-alive: the next request opens a new one."""
    async with h2_server(ca, tmp_path, keep_alive_timeout=0.3) as (app, url):
        pool = Pool(url, 5.0, trusted, {})
        assert b"3" == await post(pool, "echo", b"abc")
        await asyncio.sleep(0.8)
        assert b"2" == await post(pool, "echo", b"ab")
        await pool.aclose()
    assert (["2", "2"], 2) == (app.versions, len(app.ports))


class GoawayServer:
    """An HTTP/2 server (h2, sans-IO) whose first connection sends GOAWAY once it has two requests: it
    still answers the first (its last stream), not the second; later connections answer everything."""

    def __init__(self) -> None:
        self.connections = 0

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        goaway = self.connections == 1
        connection = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
        connection.initiate_connection()
        asked: list[int] = []
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(65536):
                events = connection.receive_data(data)
                asked += [event.stream_id for event in events if isinstance(event, h2.events.StreamEnded)]
                if goaway and len(asked) == 2:
                    connection.close_connection(last_stream_id=asked[0])
                    # (h2 would not send the answer after its GOAWAY either)
                    connection.state_machine.state = h2.connection.ConnectionState.SERVER_OPEN
                    asked, goaway = asked[:1], False
                for stream in [] if goaway else asked:
                    connection.send_headers(stream, [(":status", "200"), ("content-length", "2")])
                    connection.send_data(stream, b"ok", end_stream=True)
                asked = asked if goaway else []
                writer.write(connection.data_to_send())
        writer.close()


async def test_a_goaway_ends_the_streams_past_its_last_one(
    ca: trustme.CA, trusted: ssl.SSLContext, tmp_path: Path
) -> None:
    """Of two concurrent requests, the one the provider's GOAWAY still covers is answered, the other is a
    `TransportError` before any answer (which the upstream retries); the next request opens a new
    connection."""
    served = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(served)
    served.set_alpn_protocols(["h2"])
    server = GoawayServer()
    listening = await asyncio.start_server(server.serve, "127.0.0.1", 0, ssl=served)
    pool = Pool(f"https://127.0.0.1:{listening.sockets[0].getsockname()[1]}/v1", 5.0, trusted, {})

    async def one() -> bytes:
        return await (await pool.post("/c", b"{}")).read()

    try:
        answers = await asyncio.gather(one(), one(), return_exceptions=True)
        assert b"ok" == await one()
    finally:
        await pool.aclose()
        listening.close()
    failed = [answer for answer in answers if isinstance(answer, TransportError)]
    assert (1, ["RemoteProtocolError"]) == (answers.count(b"ok"), [error.kind for error in failed])
    assert 2 == server.connections


async def test_requests_waiting_for_a_connection_share_its_failure(trusted: ssl.SSLContext) -> None:
    """While the first connection to an https provider opens (it may turn out h2), the other requests
    wait for it; when it times out they fail with it, after one connect timeout, not one each in turn."""
    held: list[asyncio.StreamWriter] = []

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)  # accepts the connection, never answers the TLS handshake

    listening = await asyncio.start_server(silent, "127.0.0.1", 0)
    pool = Pool(f"https://127.0.0.1:{listening.sockets[0].getsockname()[1]}/v1", 0.5, trusted, {})
    started = asyncio.get_running_loop().time()
    try:
        failures = await asyncio.gather(*(pool.post("/c", b"{}") for _ in range(5)), return_exceptions=True)
    finally:
        listening.close()
        for writer in held:
            writer.close()
    assert ["ConnectTimeout"] * 5 == [getattr(error, "kind", error) for error in failures]
    assert asyncio.get_running_loop().time() - started < 1.5
    assert 1 == len(held)


async def test_the_gateway_answers_through_an_h2_provider(
    ca: trustme.CA, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`anchortrack serve --upstream https://…` in front of an HTTP/2 Chat Completions provider (trusted
    through ``SSL_CERT_FILE``, as in production): a Responses request, plain and streamed, is answered."""
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "ca.pem"))
    async with h2_server(ca, tmp_path) as (app, url):
        upstream = Upstream(url, api_key="sk-0123456789")
        with ResponsesServer(store="memory", upstream=upstream) as server:
            client = openai.AsyncOpenAI(base_url=server.base_url, api_key="k", max_retries=0)
            first = await client.responses.create(model="m", input="hi")
            events = [event async for event in await client.responses.create(
                model="m", input="again", previous_response_id=first.id, stream=True
            )]  # fmt: skip
            await client.close()
    assert "over h2" == first.output_text, events[-1]
    assert "response.completed" == events[-1].type, events[-1]
    assert "over h2" == events[-1].response.output_text
    assert ["2", "2"] == app.versions
