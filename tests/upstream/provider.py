"""
A deterministic fake Chat Completions provider on loopback, for the bridge's tests.

It answers ``POST /v1/chat/completions`` with the next scripted :class:`Reply`
(JSON, or SSE chunks when the request streams), records every body and
``Authorization`` header it received, and refuses with a 400 any body a strict
Chat Completions server would refuse (Responses-only fields, ``input_text``
parts, unpaired tool calls, ``stream_options`` without ``stream``…), so a test
fails when the bridge sends something a real provider would not take.
"""

from __future__ import annotations

import dataclasses
import json
import socket
import sys
import threading
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


OMIT: Any = object()  # a Reply field left out of the provider's answer

DEFAULT_USAGE = {
    "prompt_tokens": 31,
    "completion_tokens": 12,
    "total_tokens": 43,
    "prompt_tokens_details": {"cached_tokens": 5},
    "completion_tokens_details": {"reasoning_tokens": 4},
}

_CHAT_KEYS = frozenset(
    {
        "model",
        "messages",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "top_p",
        "stream",
        "stream_options",
        "response_format",
    }
)


@dataclass
class Reply:
    """
    One scripted provider answer.

    ``tool_calls`` are ``(id, name, arguments)``; ``finish_reason=OMIT`` sends
    none.  ``text_first`` streams the content before the tool calls.  Failure
    modes: ``status``/``body`` (an HTTP error with that raw body), ``garbage``
    (this raw body, or this raw chunk in a stream, with status 200),
    ``error_chunk`` (an ``{"error": …}`` chunk mid-stream), ``truncate`` (the
    stream stops before the finish reason), ``delay`` (seconds before answering).
    ``headers`` are sent with the answer (e.g. ``retry-after``).
    """

    content: str | None = "hello from the provider"
    reasoning: str | None = None
    tool_calls: list[tuple[str, str, str]] = field(default_factory=list)
    finish_reason: Any = "stop"
    usage: Any = field(default_factory=lambda: dict(DEFAULT_USAGE))
    text_first: bool = False
    status: int = 200
    body: bytes | None = None
    garbage: bytes | None = None
    error_chunk: dict[str, Any] | None = None
    truncate: bool = False
    delay: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)

    def completion(self, model: str) -> dict[str, Any]:
        """The non-streamed answer."""
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.reasoning is not None:
            message["reasoning_content"] = self.reasoning
        if self.tool_calls:
            message["tool_calls"] = [
                {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
                for cid, name, args in self.tool_calls
            ]
        choice: dict[str, Any] = {"index": 0, "message": message}
        if self.finish_reason is not OMIT:
            choice["finish_reason"] = self.finish_reason
        answer = {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "created": 1_700_000_000,
            "model": model,
            "choices": [choice],
        }
        if self.usage is not OMIT:
            answer["usage"] = self.usage
        return answer

    def chunks(self, model: str, include_usage: bool) -> list[dict[str, Any]]:
        """The streamed answer, chunk by chunk (without ``[DONE]``)."""
        base = {
            "id": "chatcmpl-fake",
            "object": "chat.completion.chunk",
            "created": 1_700_000_000,
            "model": model,
        }

        def chunk(delta: dict[str, Any], finish: Any = None) -> dict[str, Any]:
            return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

        chunks = [chunk({"role": "assistant", "content": ""})]
        for piece in _pieces(self.reasoning or "", 5):
            chunks.append(chunk({"reasoning_content": piece}))
        text = [chunk({"content": piece}) for piece in _pieces(self.content or "", 4)]
        calls = []
        for index, (cid, name, args) in enumerate(self.tool_calls):
            calls.append(
                chunk(
                    {
                        "tool_calls": [
                            {
                                "index": index,
                                "id": cid,
                                "type": "function",
                                "function": {"name": name, "arguments": ""},
                            }
                        ]
                    }
                )
            )
            calls.extend(
                chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
                for piece in _pieces(args, 7)
            )
        chunks += text + calls if self.text_first else calls + text
        if self.error_chunk is not None:
            chunks.append({"error": self.error_chunk})
        if self.truncate:
            return chunks
        chunks.append(chunk({}, None if self.finish_reason is OMIT else self.finish_reason))
        if include_usage and self.usage is not OMIT:
            chunks.append({**base, "choices": [], "usage": self.usage})
        return chunks


def _pieces(text: str, size: int) -> list[str]:
    return [text[start : start + size] for start in range(0, len(text), size)]


def chat_problems(body: Any) -> list[str]:
    """What a strict Chat Completions server would refuse in *body*."""
    if not isinstance(body, dict):
        return ["body is not an object"]
    problems = [f"unknown parameter {key!r}" for key in body if key not in _CHAT_KEYS]
    if "stream_options" in body and body.get("stream") is not True:
        problems.append("stream_options without stream")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return [*problems, "messages must be a non-empty list"]
    expected_tools: list[str] = []
    for index, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        where = f"messages[{index}]"
        if role not in ("system", "user", "assistant", "tool"):
            problems.append(f"{where}: bad role {role!r}")
            continue
        if expected_tools and role != "tool":
            problems.append(f"{where}: tool messages missing for {expected_tools}")
            expected_tools = []
        content = message.get("content")
        if isinstance(content, list):
            for part in content:
                if not isinstance(part, dict) or part.get("type") not in ("text", "image_url"):
                    problems.append(f"{where}: bad content part {part!r}")
        elif not isinstance(content, str) and not (role == "assistant" and content is None):
            problems.append(f"{where}: bad content {content!r}")
        if role == "tool":
            call_id = message.get("tool_call_id")
            if call_id not in expected_tools:
                problems.append(f"{where}: tool message {call_id!r} answers no pending tool call")
            else:
                expected_tools.remove(call_id)
        if role == "assistant" and message.get("tool_calls") is not None:
            for call in message["tool_calls"]:
                function = call.get("function") or {}
                if call.get("type") != "function" or not isinstance(function.get("arguments"), str):
                    problems.append(f"{where}: bad tool call {call!r}")
                expected_tools.append(call.get("id"))
    if expected_tools:
        problems.append(f"tool messages missing for {expected_tools}")
    for tool in body.get("tools") or []:
        function = tool.get("function") if isinstance(tool, dict) else None
        if tool.get("type") != "function" or not isinstance(function, dict) or "name" not in function:
            problems.append(f"bad tool {tool!r}")
    return problems


class _Server(ThreadingHTTPServer):
    """Counts the connections it accepts; closes the next ``drop`` of them unanswered."""

    accepted = 0
    drop = 0

    def verify_request(self, request: Any, client_address: Any) -> bool:
        self.accepted += 1
        if self.drop > 0:
            self.drop -= 1
            return False  # closed without a byte: the client sees a dropped connection
        return True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away (the bridge timed out) is expected; anything else is reported."""
        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)


class FakeProvider:
    """The fake provider; :meth:`start` it, then queue replies with :meth:`script`."""

    def __init__(self) -> None:
        self.replies: deque[Reply] = deque()
        self.bodies: list[dict[str, Any]] = []
        self.authorizations: list[str | None] = []
        self.refuse_json_schema = False
        self.echo_authorization = False
        self._lock = threading.Lock()
        self._release = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def script(self, *replies: Reply) -> None:
        """Answer the next requests with *replies*, in order (then with the default reply)."""
        with self._lock:
            self.replies.extend(replies)

    def reset(self) -> None:
        """Forget queued replies, recorded requests and switches; wake any delayed answer."""
        with self._lock:
            self.replies.clear()
            self.bodies.clear()
            self.authorizations.clear()
        self.refuse_json_schema = False
        self.echo_authorization = False
        if self._server is not None:
            self._server.drop = 0
        self._release.set()
        self._release = threading.Event()

    @property
    def connections(self) -> int:
        """How many TCP connections the provider accepted so far (HTTP/1.1 keeps them alive)."""
        assert isinstance(self._server, _Server)
        return self._server.accepted

    def drop_connections(self, count: int) -> None:
        """Close the next *count* connections as soon as they are accepted, answering nothing."""
        assert isinstance(self._server, _Server)
        self._server.drop = count

    @property
    def messages(self) -> list[list[dict[str, Any]]]:
        """The ``messages`` of every request received, in order."""
        return [body.get("messages", []) for body in self.bodies]

    def _next(self) -> Reply:
        with self._lock:
            return self.replies.popleft() if self.replies else Reply()

    def start(self) -> FakeProvider:
        provider = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive: a pooled client reuses its connections

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                authorization = self.headers.get("authorization")
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = None
                with provider._lock:
                    provider.bodies.append(body if isinstance(body, dict) else {})
                    provider.authorizations.append(authorization)
                if self.path != "/v1/chat/completions":
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                problems = chat_problems(body)
                if problems:
                    self._send(
                        400, {"error": {"message": "; ".join(problems), "type": "invalid_request_error"}}
                    )
                    return
                fmt = body.get("response_format") or {}
                if provider.refuse_json_schema and fmt.get("type") == "json_schema":
                    self._send(
                        400,
                        {"error": {"message": "response_format json_schema is not supported", "code": None}},
                    )
                    return
                reply = provider._next()
                if provider.echo_authorization and reply.content:
                    reply = dataclasses.replace(
                        reply, content=reply.content.replace("AUTH", authorization or "")
                    )
                release = provider._release
                if reply.delay:
                    release.wait(reply.delay)
                if reply.status != 200:
                    text = reply.body or b"{}"
                    if provider.echo_authorization:
                        text = text.replace(b"AUTH", (authorization or "").encode())
                    self._send_raw(reply.status, text, "application/json", reply.headers)
                    return
                model = str(body.get("model"))
                if not body.get("stream"):
                    if reply.garbage is not None:
                        self._send_raw(200, reply.garbage, "application/json")
                    else:
                        self._send(200, reply.completion(model))
                    return
                include_usage = (body.get("stream_options") or {}).get("include_usage") is True
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("connection", "close")  # the stream ends with the connection
                self.close_connection = True
                self.end_headers()
                for chunk in reply.chunks(model, include_usage):
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                    self.wfile.flush()
                if reply.garbage is not None:
                    self.wfile.write(b"data: " + reply.garbage + b"\n\n")
                elif not reply.truncate:
                    self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()

            def _send(self, status: int, payload: Any) -> None:
                self._send_raw(status, json.dumps(payload).encode(), "application/json")

            def _send_raw(
                self, status: int, data: bytes, content_type: str, headers: dict[str, str] | None = None
            ) -> None:
                self.send_response(status)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.send_header("content-type", content_type)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        server = _Server(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, name="fake-provider", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._release.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(10)


def closed_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
