"""`Pool`: the upstream's HTTP client, keep-alive connections to one provider on asyncio streams.

A request takes the most recently released idle connection (or opens one) and gives it back once its answer
was read to the end, so a request costs its own bytes whatever the number of connections.  (The
general-purpose pool it replaces re-checked every idle connection's socket on each request and release: a
quarter of the server's CPU at 32 concurrent conversations.)  A proxy the environment names for the provider
(`proxy_for`) is used as an HTTP client uses it: a ``CONNECT`` tunnel for https, the absolute URL for http.
Over TLS the pool offers HTTP/2 (ALPN, the ``h2`` package): a provider that picks it gets the requests as
streams of one connection (another opens once its ``SETTINGS_MAX_CONCURRENT_STREAMS`` are busy, or after its
``GOAWAY``); one that does not gets HTTP/1.1."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import socket
import ssl
import time
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from typing import TypeVar
from urllib.parse import unquote, urlsplit

import h2.config
import h2.connection
import h2.events
import h2.exceptions


_T = TypeVar("_T")
#: Seconds an idle connection is kept for reuse (a minute: opening one can cost a second with a full
#: accept queue, or a TLS handshake); the most kept idle; the most open (more requests wait their turn).
KEEPALIVE, MAX_IDLE, MAX_OPEN = 60.0, 100, 1000
_READ = 65536
_BROKEN = (OSError, EOFError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError)
_HOP = frozenset({"host", "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade"})
#: What a stream's queue carries: its headers, a piece of its body, its end (None) or why it broke.
_Item = dict[str, str] | bytes | str | None


class TransportError(Exception):
    """The provider could not be reached, or the connection broke; ``kind`` names how (``ConnectError``…)."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


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
    """The ``http://`` proxy the environment names for *base_url* (``HTTPS_PROXY``/``HTTP_PROXY``,
    ``NO_PROXY``): its host, port and ``proxy-authorization`` (from the credentials in its URL, if any)."""
    parts = urlsplit(base_url)
    url = urllib.request.getproxies().get(parts.scheme)
    if not url or urllib.request.proxy_bypass(parts.netloc):
        return None
    proxy = urlsplit(url if "://" in url else f"http://{url}")
    if proxy.scheme != "http":
        raise ValueError(f"the upstream goes through http:// proxies only, not {url!r}")
    user = f"{unquote(proxy.username)}:{unquote(proxy.password or '')}" if proxy.username else None
    auth = user and "Basic " + base64.b64encode(user.encode()).decode()
    return proxy.hostname or "", proxy.port or 80, auth


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, timeout: float) -> None:
        self.reader, self.writer, self.timeout = reader, writer, timeout
        self.idle_since = 0.0

    async def timed(self, awaitable: Awaitable[_T]) -> _T:
        """*awaitable* within the timeout: `TransportError` ``ReadTimeout``, ``ReadError``…"""
        return await _timed(awaitable, self.timeout, "Read")

    def reusable(self, now: float) -> bool:
        return not (now - self.idle_since > KEEPALIVE or self.reader.at_eof() or self.writer.is_closing())

    def close(self) -> None:
        self.writer.close()

    async def body(self, chunked: bool, left: int | None) -> AsyncIterator[bytes]:
        """An answer's body, framed by chunks, by its length (*left*), or by the end of the connection."""
        reader, timed = self.reader, self.timed
        while True:
            if chunked:
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
            elif left is not None:
                piece = await timed(reader.read(min(left, _READ))) if left else b""
                if left and not piece:
                    raise TransportError("RemoteProtocolError")
                left -= len(piece)
            else:
                piece = await timed(reader.read(_READ))
            if not piece:
                return
            yield piece


class _H2:
    """An HTTP/2 connection: each request a stream of it, all the answers read by one task."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, timeout: float) -> None:
        self.writer, self.timeout, self.idle_since = writer, timeout, time.monotonic()
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(header_encoding="latin-1"))
        self.h2.initiate_connection()
        machine, state = self.h2.state_machine, h2.connection.ConnectionState.CLIENT_OPEN
        goaway = {(state, h2.connection.ConnectionInputs.RECV_GOAWAY): (None, state)}
        # The streams a GOAWAY covers go on (RFC 9113): h2's own table says so; without it, they all end.
        with contextlib.suppress(AttributeError, TypeError):
            machine._transitions = {**machine._transitions, **goaway}
        self.streams: dict[int, asyncio.Queue[_Item]] = {}
        self.window, self.ready = asyncio.Event(), asyncio.Event()  # a send window grew; SETTINGS came
        self.gone: str | None = None  # why no new stream may start (GOAWAY, the connection ended)
        self.flush()
        self._reading = asyncio.create_task(self._read(reader))

    def flush(self) -> None:
        if (data := self.h2.data_to_send()) and not self.writer.is_closing():
            self.writer.write(data)

    def room(self, now: float) -> int:
        """How many more streams it takes (none once it closed, as it does when idle past `KEEPALIVE`)."""
        if not self.streams and now - self.idle_since > KEEPALIVE:
            self.close()
        return 0 if self.gone else self.h2.remote_settings.max_concurrent_streams - len(self.streams)

    def close(self) -> None:
        """No new stream; the connection closes once its last stream ended."""
        self.gone = self.gone or "ReadError"
        if not self.streams:
            self.writer.close()

    async def _read(self, reader: asyncio.StreamReader) -> None:
        kind = "ReadError"
        try:
            while data := await reader.read(_READ):
                for event in self.h2.receive_data(data):
                    queue = self.streams.get(getattr(event, "stream_id", 0))
                    put = queue.put_nowait if queue is not None else lambda item: None
                    if isinstance(event, h2.events.ResponseReceived):
                        put(_headers((str(name), str(value)) for name, value in event.headers))
                    elif isinstance(event, h2.events.DataReceived):  # the provider may send as much again
                        self.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                        put(event.data)
                    elif isinstance(event, h2.events.StreamEnded | h2.events.StreamReset):
                        put(None if isinstance(event, h2.events.StreamEnded) else "RemoteProtocolError")
                    elif isinstance(event, h2.events.RemoteSettingsChanged):
                        self.ready.set()
                    elif isinstance(event, h2.events.ConnectionTerminated):
                        self.gone = "RemoteProtocolError"  # streams past its last one were not taken
                        for stream in [s for s in self.streams if s > (event.last_stream_id or 0)]:
                            self.streams[stream].put_nowait(self.gone)
                self.window.set()
                self.flush()
                if self.gone and not self.streams:
                    break
        except (OSError, h2.exceptions.H2Error) as error:
            kind = "ReadError" if isinstance(error, OSError) else "RemoteProtocolError"
        finally:
            self.gone = self.gone or kind
            for queue in self.streams.values():
                queue.put_nowait(kind)
            self.window.set()
            self.ready.set()
            self.writer.close()

    async def request(
        self, headers: list[tuple[str, str]], body: bytes, release: Callable[[], None]
    ) -> Response:
        """Send the request as a new stream; its answer once the headers arrived (`TransportError` else)."""
        stream = self.h2.get_next_available_stream_id()
        queue = self.streams[stream] = asyncio.Queue()

        def end(done: bool) -> None:
            release()
            del self.streams[stream]
            with contextlib.suppress(h2.exceptions.H2Error):
                if not done and not self.writer.is_closing():
                    self.h2.reset_stream(stream, 8)  # CANCEL: the rest of the answer is not wanted
                    self.flush()
            if not self.streams:
                self.idle_since = time.monotonic()
                if self.gone:
                    self.close()

        try:
            self.h2.send_headers(stream, headers, end_stream=not body)
            while body:  # as much as the provider's windows take, then wait for them to grow
                if self.gone:
                    raise TransportError(self.gone)
                window = min(self.h2.local_flow_control_window(stream), self.h2.max_outbound_frame_size)
                if window > 0:
                    self.h2.send_data(stream, body[:window], end_stream=window >= len(body))
                    body = body[window:]
                else:
                    self.flush()
                    self.window.clear()
                    await _timed(self.window.wait(), self.timeout, "Write")
            self.flush()
            head = await _timed(queue.get(), self.timeout, "Read")
            if not isinstance(head, dict):
                raise TransportError(head if isinstance(head, str) else "RemoteProtocolError")
        except BaseException as error:
            end(False)
            if isinstance(error, h2.exceptions.H2Error):
                raise TransportError("RemoteProtocolError") from None
            raise
        return Response(int(head.pop(":status")), head, self._body(queue), end)

    async def _body(self, queue: asyncio.Queue[_Item]) -> AsyncIterator[bytes]:
        while isinstance(item := await _timed(queue.get(), self.timeout, "Read"), bytes):
            yield item
        if item is not None:
            raise TransportError(item if isinstance(item, str) else "RemoteProtocolError")


def _headers(fields: Iterable[tuple[str, str]]) -> dict[str, str]:
    headers: dict[str, str] = {}
    for name, value in fields:
        key, value = name.strip().lower(), value.strip()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    return headers


class Response:
    """An answer whose body is still to be read (`read` or `lines`); `aclose` it in any case."""

    def __init__(
        self, status: int, headers: dict[str, str], body: AsyncIterator[bytes], end: Callable[[bool], None]
    ) -> None:
        self.status_code, self.headers = status, headers
        self._body, self._done = body, False
        self._end: Callable[[bool], None] | None = end

    async def _pieces(self) -> AsyncIterator[bytes]:
        async for piece in self._body:
            yield piece
        self._done = True

    async def read(self) -> bytes:
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
        """Give the connection back if the body was read to its end; close it (or the stream) otherwise."""
        end, self._end = self._end, None
        if end is not None:
            end(self._done)


class Pool:
    """Keep-alive connections to the origin of *base_url*, each request waiting *timeout* seconds at most to
    connect and for each read (`TransportError` ``ConnectTimeout`` / ``ReadTimeout``).  Over TLS *ssl_context*
    is made to offer HTTP/2 (ALPN)."""

    def __init__(
        self, base_url: str, timeout: float, ssl_context: ssl.SSLContext | None, headers: Mapping[str, str]
    ) -> None:
        parts = urlsplit(base_url)
        self._tls = ssl_context if parts.scheme == "https" else None
        if self._tls is not None:
            self._tls.set_alpn_protocols(["h2", "http/1.1"])
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
        pseudo = {":method": "POST", ":scheme": "https", ":authority": fields["host"]}
        self._h2_head = [*pseudo.items(), ("content-type", "application/json"), *fields.items()]
        self._h2_head = [(name, value) for name, value in self._h2_head if name not in _HOP]
        self._idle: list[_Connection] = []
        self._h2: list[_H2] = []  # HTTP/2 connections, the oldest (first to be filled) first
        self._opening: asyncio.Future[_Connection | _H2] | None = None  # a connection that may be h2
        self._h1 = False  # the last connection opened chose HTTP/1.1
        self._slots = asyncio.Semaphore(MAX_OPEN)
        self.closed = False

    async def _connection(self) -> _Connection | _H2:
        while (opening := self._opening) is not None:  # a connection being opened may carry this one too
            await asyncio.wait([opening])
            if not opening.cancelled() and isinstance(error := opening.exception(), TransportError):
                raise TransportError(error.kind)  # and its failure is this request's too
        now = time.monotonic()
        self._h2 = [connection for connection in self._h2 if connection.gone is None]
        for h2c in self._h2:
            if h2c.room(now) > 0:
                return h2c
        while self._idle:
            connection = self._idle.pop()
            if connection.reusable(now):
                return connection
            connection.close()
        opening = asyncio.ensure_future(_timed(self._open(), self.timeout, "Connect"))
        if self._tls and not self._h1:
            self._opening = opening
        try:
            opened = await opening
        finally:
            if self._opening is opening:
                self._opening = None
        if isinstance(opened, _H2):
            self._h2.append(opened)
        self._h1 = isinstance(opened, _Connection)  # then those opened meanwhile need not wait
        return opened

    async def _open(self) -> _Connection | _H2:
        if self._proxy is None:
            hostname = self._host if self._tls else None
            opening = asyncio.open_connection(self._host, self._port, ssl=self._tls, server_hostname=hostname)
        else:
            opening = self._tunnel() if self._tls else asyncio.open_connection(*self._proxy[:2])
        reader, writer = await opening
        tls = writer.get_extra_info("ssl_object")
        if tls is None or tls.selected_alpn_protocol() != "h2":
            return _Connection(reader, writer, self.timeout)
        connection = _H2(reader, writer, self.timeout)
        await connection.ready.wait()  # the provider's SETTINGS (how many streams it takes)
        if connection.gone:
            raise ConnectionError("the provider closed the connection")
        return connection

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
        if isinstance(connection, _H2):
            fields = [(":path", f"{self._path}{path}"), *self._h2_head, ("content-length", str(len(body)))]
            return await connection.request(fields, body, self._slots.release)
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
            headers = _headers((name, value) for name, _, value in (line.partition(":") for line in lines))
            length = headers.get("content-length")
            chunked = "chunked" in headers.get("transfer-encoding", "").lower()
            left = None if length is None or chunked else int(length)
        except BaseException as error:
            self.release(connection, reuse=False)
            if isinstance(error, ValueError):  # not HTTP
                raise TransportError("RemoteProtocolError") from None
            raise
        left = 0 if status in (204, 304) or 100 <= status < 200 else left
        close = version == "HTTP/1.0" or "close" in headers.get("connection", "").lower()
        keep = not close and (chunked or left is not None)
        h1 = connection
        return Response(status, headers, h1.body(chunked, left), lambda done: self.release(h1, done and keep))

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
        idle, self._idle, h2s, self._h2 = self._idle, [], self._h2, []
        for connection in idle:
            connection.close()
        for h2c in h2s:
            h2c.close()
