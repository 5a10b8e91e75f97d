"""The upstream's HTTP/1.1 pool against a raw loopback server: framing, reuse, expiry, broken answers."""

from __future__ import annotations

import asyncio
import shutil
import ssl
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from anchortrack.server import _http
from anchortrack.server._http import Pool, TransportError


Answer = Callable[[bytes], Awaitable[bytes]]  # the request's body -> the raw answer ("CLOSE:" then closes)


class RawServer:
    """Answers each request on a kept-alive connection with *answer*'s raw bytes; counts connections."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.connections = 0
        self.heads: list[bytes] = []

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                self.heads.append(head)
                length = next(
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.startswith(b"content-length")
                )
                raw = await self.answer(await reader.readexactly(length))
                writer.write(raw.removeprefix(b"CLOSE:"))
                await writer.drain()
                if raw.startswith(b"CLOSE:"):
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@asynccontextmanager
async def raw_server(answer: Answer) -> AsyncIterator[tuple[RawServer, Pool]]:
    server = RawServer(answer)
    listening = await asyncio.start_server(server.serve, "127.0.0.1", 0)
    port = listening.sockets[0].getsockname()[1]
    pool = Pool(f"http://127.0.0.1:{port}/v1", 5.0, None, {"authorization": "Bearer k"})
    try:
        yield server, pool
    finally:
        await pool.aclose()
        listening.close()


def fixed(raw: bytes) -> Answer:
    async def answer(body: bytes) -> bytes:
        return raw

    return answer


def chunked(*pieces: bytes) -> bytes:
    framed = b"".join(b"%x;ext=1\r\n%s\r\n" % (len(piece), piece) for piece in pieces)
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    return head + framed + b"0\r\nx-trailer: 1\r\n\r\n"


def test_chunked_and_sized_answers_are_read_whole_and_their_connection_reused() -> None:
    """A chunked stream (with extensions and trailers) gives its lines across chunk bounds; a sized body
    its bytes; both leave the connection for the next request, which carries the base path and headers."""

    async def run() -> tuple[list[str], bytes, int, list[bytes]]:
        answers = iter(
            [
                chunked(b"data: 1\r\n", b"\r\ndata: ", b"2\n\ndata: [DONE]\n\n"),
                b'HTTP/1.1 200 OK\r\ncontent-length: 7\r\n\r\n{"a":1}',
            ]
        )

        async def answer(body: bytes) -> bytes:
            return next(answers)

        async with raw_server(answer) as (server, pool):
            response = await pool.post("/chat/completions", b"{}")
            try:
                lines = [line async for line in response.lines()]
            finally:
                await response.aclose()
            body = await (await pool.post("/chat/completions", b'{"x":2}')).read()
            return lines, body, server.connections, server.heads

    lines, body, connections, heads = asyncio.run(run())

    assert ["data: 1", "", "data: 2", "", "data: [DONE]", ""] == lines
    assert b'{"a":1}' == body
    assert 1 == connections
    assert heads[1].startswith(b"POST /v1/chat/completions HTTP/1.1\r\n")
    assert b"authorization: Bearer k\r\n" in heads[1]
    assert b"content-length: 7\r\n" in heads[1]


def test_a_connection_closed_by_the_provider_or_idle_too_long_is_not_reused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``connection: close``, an answer read to the end of the connection, a connection the provider
    closed while idle, and one idle past `KEEPALIVE` each cost a new connection, never a failed request;
    a kept-alive one is reused."""
    monkeypatch.setattr(_http, "KEEPALIVE", 0.3)
    sized = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"

    async def run() -> list[int]:
        plan = iter(
            [
                b"CLOSE:HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\nok",
                b"CLOSE:HTTP/1.1 200 OK\r\n\r\nok",  # no length: the body ends with the connection
                b"CLOSE:" + sized,  # the provider closes the connection once idle
                sized,
                sized,
                sized,
            ]
        )

        async def answer(body: bytes) -> bytes:
            return next(plan)

        counts = []
        async with raw_server(answer) as (server, pool):
            for body in (b"1", b"2", b"3", b"4", b"5"):
                await asyncio.sleep(0.05)
                assert b"ok" == await (await pool.post("/c", body)).read()
                counts.append(server.connections)
            await asyncio.sleep(0.5)
            assert b"ok" == await (await pool.post("/c", b"6")).read()
            counts.append(server.connections)
        return counts

    assert [1, 2, 3, 4, 4, 5] == asyncio.run(run())


def test_broken_answers_are_transport_errors_and_close_their_connection() -> None:
    """Garbage instead of a status line, a body shorter than its length, a bad chunk size and no answer in
    time each raise `TransportError` of the kind the server's 502/504 names."""

    async def silent(body: bytes) -> bytes:
        await asyncio.sleep(2)
        return b""

    cases: list[tuple[Answer, str, bool]] = [
        (fixed(b"SSH-2.0-nope\r\n\r\n"), "RemoteProtocolError", False),
        (fixed(b"CLOSE:HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nshort"), "RemoteProtocolError", True),
        (fixed(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n"), "RemoteProtocolError", True),
        (silent, "ReadTimeout", False),
    ]

    async def run(answer: Answer, reading: bool) -> tuple[str, int]:
        async with raw_server(answer) as (server, pool):
            pool.timeout = 0.3

            async def exchange() -> None:
                response = await pool.post("/c", b"{}")
                assert reading
                await response.read()

            with pytest.raises(TransportError) as caught:
                await exchange()
            assert not pool._idle
            return caught.value.kind, server.connections

    for answer, kind, reading in cases:
        assert (kind, 1) == asyncio.run(run(answer, reading))


def test_nothing_listening_is_a_connect_error() -> None:
    async def run() -> str:
        pool = Pool("http://127.0.0.1:9/v1", 2.0, None, {})
        with pytest.raises(TransportError) as caught:
            await pool.post("/c", b"{}")
        return caught.value.kind

    assert "ConnectError" == asyncio.run(run())


def test_headers_that_would_split_the_request_are_refused() -> None:
    with pytest.raises(ValueError, match="line breaks"):
        Pool("http://127.0.0.1:9/v1", 2.0, None, {"x-extra": "a\r\nhost: evil"})


def test_requests_past_the_open_connection_bound_wait_their_turn(monkeypatch: pytest.MonkeyPatch) -> None:
    """With `MAX_OPEN` 2, six concurrent requests are all answered over two connections."""
    monkeypatch.setattr(_http, "MAX_OPEN", 2)
    busy = {"now": 0, "most": 0}

    async def slow(body: bytes) -> bytes:
        busy["now"] += 1
        busy["most"] = max(busy["most"], busy["now"])
        await asyncio.sleep(0.05)
        busy["now"] -= 1
        return b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"

    async def run() -> tuple[list[bytes], int]:
        async with raw_server(slow) as (server, pool):

            async def one() -> bytes:
                return await (await pool.post("/c", b"{}")).read()

            answers = await asyncio.gather(*(one() for _ in range(6)))
            return answers, server.connections

    assert ([b"ok"] * 6, 2) == asyncio.run(run())
    assert 2 == busy["most"]


def test_https_is_verified_against_the_given_trust_store(tmp_path: Path) -> None:
    """Over TLS a request is answered (and its connection reused) when the provider's certificate is
    trusted, and is a connect error when it is not: the pool never skips verification."""
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command to make a certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    served = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    served.load_cert_chain(cert, key)

    async def run(trusted: ssl.SSLContext) -> tuple[bytes, int]:
        server = RawServer(fixed(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"))
        listening = await asyncio.start_server(server.serve, "127.0.0.1", 0, ssl=served)
        pool = Pool(f"https://127.0.0.1:{listening.sockets[0].getsockname()[1]}/v1", 5.0, trusted, {})
        try:
            answers = [await (await pool.post("/c", b"{}")).read() for _ in range(2)]
            assert answers[0] == answers[1]
            return answers[0], server.connections
        finally:
            await pool.aclose()
            listening.close()

    assert (b"ok", 1) == asyncio.run(run(ssl.create_default_context(cafile=str(cert))))
    with pytest.raises(TransportError) as caught:
        asyncio.run(run(ssl.create_default_context()))
    assert "ConnectError" == caught.value.kind


class Proxy:
    """An HTTP proxy: ``CONNECT`` tunnels and absolute-URL requests relayed to the origin."""

    def __init__(self) -> None:
        self.asked: list[bytes] = []

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        self.asked.append(head)
        method, target, rest = head.split(b" ", 2)
        if method == b"CONNECT":
            host, port = target.rsplit(b":", 1)
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        else:  # http://host:port/path: the origin gets the path
            host, _, path = target.removeprefix(b"http://").partition(b"/")
            host, port = host.rsplit(b":", 1)
            head = b" ".join((method, b"/" + path, rest))
        origin_reader, origin_writer = await asyncio.open_connection(host.decode(), int(port))
        if method != b"CONNECT":
            origin_writer.write(head)

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            while piece := await source.read(65536):
                sink.write(piece)
                await sink.drain()
            sink.close()

        await asyncio.gather(pipe(reader, origin_writer), pipe(origin_reader, writer), return_exceptions=True)


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_a_proxy_the_environment_names_carries_the_requests(
    scheme: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``HTTP(S)_PROXY`` is used as an HTTP client uses it (a tunnel for https, the absolute URL for http,
    its credentials sent to the proxy only), the connection kept alive; ``NO_PROXY`` goes direct."""
    served: ssl.SSLContext | None = None
    trusted: ssl.SSLContext | None = None
    if scheme == "https":
        if shutil.which("openssl") is None:
            pytest.skip("needs the openssl command to make a certificate")
        cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
             "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1",
             "-keyout", str(key), "-out", str(cert)],
            check=True, capture_output=True,
        )  # fmt: skip
        served = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        served.load_cert_chain(cert, key)
        trusted = ssl.create_default_context(cafile=str(cert))

    async def run(no_proxy: str) -> tuple[list[bytes], RawServer, Proxy]:
        server, proxy = RawServer(fixed(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")), Proxy()
        origin = await asyncio.start_server(server.serve, "127.0.0.1", 0, ssl=served)
        relay = await asyncio.start_server(proxy.serve, "127.0.0.1", 0)
        monkeypatch.setenv(
            f"{scheme}_proxy", f"http://us%40er:p%3Ass@127.0.0.1:{relay.sockets[0].getsockname()[1]}"
        )
        monkeypatch.setenv("no_proxy", no_proxy)
        pool = Pool(f"{scheme}://127.0.0.1:{origin.sockets[0].getsockname()[1]}/v1", 5.0, trusted, {})
        try:
            return [await (await pool.post("/c", b"{}")).read() for _ in range(2)], server, proxy
        finally:
            await pool.aclose()
            origin.close()
            relay.close()

    answers, server, proxy = asyncio.run(run(""))
    assert [b"ok", b"ok"] == answers
    assert 1 == server.connections == len(proxy.asked)  # one connection through the proxy, kept alive
    credentials = b"proxy-authorization: Basic dXNAZXI6cDpzcw=="  # base64 of "us@er:p:ss"
    assert credentials in proxy.asked[0]
    assert proxy.asked[0].startswith(
        b"CONNECT 127.0.0.1:" if scheme == "https" else b"POST http://127.0.0.1:"
    )
    assert all(b"/v1/c HTTP/1.1" in head for head in server.heads)
    if scheme == "https":  # the tunnel's requests are the provider's alone
        assert not any(b"proxy-authorization" in head for head in server.heads)

    answers, server, proxy = asyncio.run(run("127.0.0.1"))
    assert ([b"ok", b"ok"], 1, []) == (answers, server.connections, proxy.asked)


def test_a_proxy_other_than_http_is_refused_at_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("https_proxy", "socks5://127.0.0.1:1080")
    with pytest.raises(ValueError, match="http:// proxies only"):
        Pool("https://api.example.com/v1", 5.0, None, {})
