"""
`Pool`: the upstream's HTTP/1.1 client, keep-alive connections to one provider on asyncio streams.

A request takes the most recently released idle connection (or opens one) and gives it back once its
answer was read to the end, so a request costs its own bytes whatever the number of connections.
(The general-purpose pool it replaces re-checked every idle connection's socket on each request and
release: a quarter of the server's CPU at 32 concurrent conversations.)  The answer's body is framed
by ``content-length``, ``transfer-encoding: chunked``, or the end of the connection.  A connection
idle for `KEEPALIVE` seconds is closed rather than reused, and one the provider closed is never reused.
A proxy the environment names for the provider (``HTTPS_PROXY``/``HTTP_PROXY``, ``NO_PROXY``; an
``http://`` proxy, with credentials if its URL has them) is used as an HTTP client uses it: a ``CONNECT``
tunnel for https, the absolute URL for http.
"""

from __future__ import annotations

import asyncio
import base64
import socket
import ssl
import time
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Mapping
from typing import TypeVar
from urllib.parse import unquote, urlsplit


_T = TypeVar("_T")
#: Seconds an idle connection is kept for reuse (a minute: opening one can cost a second with a full
#: accept queue, or a TLS handshake); the most kept idle; the most open (more requests wait their turn).
KEEPALIVE, MAX_IDLE, MAX_OPEN = 60.0, 100, 1000
_READ = 65536
_BROKEN = (OSError, EOFError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError)


class TransportError(Exception):
    """The provider could not be reached, or the connection broke; ``kind`` names how (``ConnectError``…)."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind

    @property
    def timeout(self) -> bool:
        return self.kind.endswith("Timeout")


async def _timed(awaitable: Awaitable[_T], timeout: float, phase: str) -> _T:
    """*awaitable* within *timeout*; no answer in time or a broken connection is a `TransportError`."""
    try:
        return await asyncio.wait_for(awaitable, timeout)
    except asyncio.TimeoutError:
        raise TransportError(f"{phase}Timeout") from None
    except _BROKEN as error:
        if phase == "Connect":
            raise TransportError("ConnectError") from None
        raise TransportError("ReadError" if isinstance(error, OSError) else "RemoteProtocolError") from None


def proxy_for(base_url: str) -> tuple[str, int, str | None] | None:
    """The proxy the environment names for *base_url*: its host, port and ``proxy-authorization``."""
    parts = urlsplit(base_url)
    url = urllib.request.getproxies().get(parts.scheme)
    if not url or urllib.request.proxy_bypass(parts.netloc):
        return None
    proxy = urlsplit(url if "://" in url else f"http://{url}")
    if proxy.scheme != "http":
        raise ValueError(f"the upstream goes through http:// proxies only, not {url!r}")
    user = f"{unquote(proxy.username)}:{unquote(proxy.password or '')}" if proxy.username else None
    return (
        proxy.hostname or "",
        proxy.port or 80,
        user and "Basic " + base64.b64encode(user.encode()).decode(),
    )


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, timeout: float) -> None:
        self.reader, self.writer, self.timeout = reader, writer, timeout
        self.idle_since = 0.0

    async def timed(self, awaitable: Awaitable[_T]) -> _T:
        """*awaitable* within the timeout: `TransportError` ``ReadTimeout``, ``ReadError``…"""
        return await _timed(awaitable, self.timeout, "Read")

    def reusable(self, now: float) -> bool:
        stale = now - self.idle_since > KEEPALIVE or self.reader.at_eof() or self.writer.is_closing()
        return not stale

    def close(self) -> None:
        self.writer.close()


class Response:
    """An answer whose body is still to be read (`read` or `lines`); `aclose` it in any case."""

    def __init__(self, pool: Pool, connection: _Connection, status: int, headers: dict[str, str]) -> None:
        self.status_code = status
        self.headers = headers
        self._pool: Pool | None = pool
        self._connection = connection
        self._done = False
        length = headers.get("content-length")
        self._chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        self._left = None if length is None or self._chunked else int(length)
        if status in (204, 304) or 100 <= status < 200:
            self._left = 0
        self._keep = "close" not in headers.get("connection", "").lower() and (
            self._chunked or self._left is not None
        )

    async def _pieces(self) -> AsyncIterator[bytes]:
        reader, timed = self._connection.reader, self._connection.timed
        while True:
            if self._chunked:
                line = await timed(reader.readuntil(b"\r\n"))
                try:
                    size = int(line.split(b";")[0], 16)
                except ValueError:
                    raise TransportError("RemoteProtocolError") from None
                piece = await timed(reader.readexactly(size + 2)) if size else b""
                if not size:
                    while await timed(reader.readuntil(b"\r\n")) != b"\r\n":
                        pass  # trailers
                piece = piece[:-2]
            elif self._left is not None:
                piece = await timed(reader.read(min(self._left, _READ))) if self._left else b""
                if self._left and not piece:
                    raise TransportError("RemoteProtocolError")
                self._left -= len(piece)
            else:
                piece = await timed(reader.read(_READ))
            if not piece:
                self._done = True
                return
            yield piece

    async def read(self) -> bytes:
        """The whole body."""
        try:
            return b"".join([piece async for piece in self._pieces()])
        finally:
            await self.aclose()

    async def lines(self) -> AsyncIterator[str]:
        """The body's lines (without their ends) as they arrive."""
        rest = b""
        async for piece in self._pieces():
            *complete, rest = (rest + piece).split(b"\n")
            for line in complete:
                yield line.rstrip(b"\r").decode("utf-8", "replace")
        if rest:
            yield rest.rstrip(b"\r").decode("utf-8", "replace")

    async def aclose(self) -> None:
        """Give the connection back if the body was read to its end; close it otherwise."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.release(self._connection, self._done and self._keep)


class Pool:
    """
    Keep-alive connections to the origin of *base_url*, each request waiting *timeout* seconds at most
    to connect and for each read (`TransportError` ``ConnectTimeout`` / ``ReadTimeout``).
    """

    def __init__(
        self, base_url: str, timeout: float, ssl_context: ssl.SSLContext | None, headers: Mapping[str, str]
    ) -> None:
        parts = urlsplit(base_url)
        self._tls = ssl_context if parts.scheme == "https" else None
        self._host = parts.hostname or ""
        self._port = parts.port or (443 if self._tls else 80)
        self._path = parts.path.rstrip("/")
        self.timeout = timeout
        host = f"[{self._host}]" if ":" in self._host else self._host
        default_port = self._port == (443 if self._tls else 80)
        self._origin = f"{host}:{self._port}"
        fields = {"host": host if default_port else self._origin, "user-agent": "anchortrack"}
        self._proxy = proxy_for(base_url)
        if self._proxy and not self._tls:  # plain http through a proxy: the absolute URL, its credentials
            self._path = f"http://{self._origin}{self._path}"
            fields.update({"proxy-authorization": self._proxy[2]} if self._proxy[2] else {})
        fields.update({name.lower(): value for name, value in headers.items()})
        if any(c in f"{name}{value}" for name, value in fields.items() for c in "\r\n\0"):
            raise ValueError("upstream headers must not contain line breaks")
        self._head = "".join(f"{name}: {value}\r\n" for name, value in fields.items()).encode("latin-1")
        self._idle: list[_Connection] = []
        self._slots = asyncio.Semaphore(MAX_OPEN)
        self.closed = False

    async def _connection(self) -> _Connection:
        now = time.monotonic()
        while self._idle:
            connection = self._idle.pop()
            if connection.reusable(now):
                return connection
            connection.close()
        if self._proxy is None:
            server_hostname = self._host if self._tls else None
            opening = asyncio.open_connection(
                self._host, self._port, ssl=self._tls, server_hostname=server_hostname
            )
        else:
            opening = self._tunnel() if self._tls else asyncio.open_connection(*self._proxy[:2])
        return _Connection(*await _timed(opening, self.timeout, "Connect"), self.timeout)

    async def _tunnel(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A TLS connection to the provider through the proxy's ``CONNECT`` tunnel."""
        assert self._proxy is not None
        host, port, auth = self._proxy
        loop = asyncio.get_running_loop()
        family, kind, proto, _, address = (await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM))[0]
        sock = socket.socket(family, kind, proto)
        try:
            sock.setblocking(False)
            await loop.sock_connect(sock, address)
            auth_line = f"proxy-authorization: {auth}\r\n" if auth else ""
            ask = f"CONNECT {self._origin} HTTP/1.1\r\nhost: {self._origin}\r\n{auth_line}\r\n"
            await loop.sock_sendall(sock, ask.encode("latin-1"))
            answer = b""
            while b"\r\n\r\n" not in answer:
                piece = await loop.sock_recv(sock, 4096)
                if not piece or len(answer) > 65536:
                    raise ConnectionError("the proxy closed the tunnel")
                answer += piece
            if answer.split(b" ", 2)[1:2] != [b"200"]:
                raise ConnectionError("the proxy refused the tunnel")
            return await asyncio.open_connection(sock=sock, ssl=self._tls, server_hostname=self._host)
        except BaseException:
            sock.close()
            raise

    async def post(self, path: str, body: bytes) -> Response:
        """Send *body* (JSON) to *path* under the base URL; the answer once its headers arrived."""
        await self._slots.acquire()
        try:
            connection = await self._connection()
        except BaseException:
            self._slots.release()
            raise
        head = f"POST {self._path}{path} HTTP/1.1\r\ncontent-type: application/json\r\n"
        head += f"content-length: {len(body)}\r\n"
        try:
            connection.writer.write(head.encode() + self._head + b"\r\n" + body)
            raw = await connection.timed(connection.reader.readuntil(b"\r\n\r\n"))
            while raw[9:10] == b"1" and raw[9:12] != b"101":  # 100 Continue and friends
                raw = await connection.timed(connection.reader.readuntil(b"\r\n\r\n"))
            status_line, *lines = raw[:-4].decode("latin-1").split("\r\n")
            version, _, rest = status_line.partition(" ")
            status = int(rest[:3])
            headers: dict[str, str] = {}
            for line in lines:
                name, _, value = line.partition(":")
                name, value = name.strip().lower(), value.strip()
                headers[name] = f"{headers[name]}, {value}" if name in headers else value
            if version == "HTTP/1.0":
                headers["connection"] = "close"
            return Response(self, connection, status, headers)
        except BaseException as error:
            self.release(connection, reuse=False)
            if isinstance(error, ValueError):  # not HTTP
                raise TransportError("RemoteProtocolError") from None
            raise

    def release(self, connection: _Connection, reuse: bool) -> None:
        """Keep *connection* for the next request if *reuse*, else close it; either way its slot is free."""
        self._slots.release()
        if not reuse or self.closed or len(self._idle) >= MAX_IDLE:
            connection.close()
            return
        connection.idle_since = time.monotonic()
        self._idle.append(connection)
        if not self._idle[0].reusable(connection.idle_since):  # the oldest one has had its time
            self._idle.pop(0).close()

    async def aclose(self) -> None:
        """Close the idle connections; those in use close when their answers are closed."""
        self.closed = True
        idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()
