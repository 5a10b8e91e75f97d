"""
A deterministic fake model on loopback, for servers that sit in front of one.

It answers ``POST /v1/responses`` (JSON or SSE) and ``/v1/chat/completions``
(JSON), records every request body, and decides its answer from the context
alone, so the same context always gets the same answer:

* when tools are offered and the last item is a user message mentioning a
  tool's name, it calls that tool (``call_<n>`` ids, arguments ``{"q": <text>}``);
* otherwise it answers ``"<k> items; last: <text of the last item>"``.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


MODEL = "fake-model"


def _text(item: Any) -> str:
    """The text of an input item, whatever its shape."""
    if isinstance(item, str):
        return item
    if not isinstance(item, dict):
        return ""
    if item.get("type") == "function_call_output":
        output = item.get("output")
        return output if isinstance(output, str) else json.dumps(output, sort_keys=True)
    if item.get("type") == "function_call":
        return f"{item.get('name')}({item.get('arguments')})"
    content = item.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


def _tool_names(tools: Any) -> list[str]:
    names = []
    for tool in tools or []:
        if isinstance(tool, dict):
            name = tool.get("name") or (tool.get("function") or {}).get("name")
            if isinstance(name, str):
                names.append(name)
    return names


class FakeModel:
    """The fake upstream: start it, point a gateway at `base_url`, read `requests`."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.paths: list[str] = []
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FakeModel:
        model = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                return

            def do_GET(self) -> None:
                if self.path.rstrip("/").endswith("/models"):
                    self._json(200, {"object": "list", "data": [{"id": MODEL, "object": "model"}]})
                else:
                    self._json(200, {"status": "ok"})

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                with model._lock:
                    model.requests.append(body)
                    model.paths.append(self.path)
                    n = next(model._ids)
                if self.path.endswith("/responses"):
                    response = model.respond(body, n)
                    if body.get("stream"):
                        self._sse(response)
                    else:
                        self._json(200, response)
                elif self.path.endswith("/chat/completions"):
                    self._json(200, model.complete(body, n))
                else:
                    self._json(404, {"error": {"message": f"no route {self.path}"}})

            def _json(self, status: int, payload: Any) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _sse(self, response: dict[str, Any]) -> None:
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.end_headers()
                for event in _events(response):
                    self.wfile.write(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode())
                self.wfile.flush()

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def clear(self) -> None:
        with self._lock:
            self.requests.clear()
            self.paths.clear()

    # ---- the model ----

    def decide(self, items: list[Any], tools: Any) -> tuple[str, str]:
        """("call", tool name) or ("say", text) for this context."""
        last = items[-1] if items else ""
        last_text = _text(last)
        is_user = isinstance(last, str) or (isinstance(last, dict) and last.get("role") == "user")
        if is_user:
            for name in _tool_names(tools):
                if name in last_text:
                    return "call", name
        return "say", f"{len(items)} items; last: {last_text}"

    def respond(self, body: dict[str, Any], n: int) -> dict[str, Any]:
        items = body.get("input")
        items = [items] if isinstance(items, str) else list(items or [])
        if body.get("instructions"):
            items = [{"role": "system", "content": body["instructions"]}, *items]
        kind, what = self.decide(items, body.get("tools"))
        if kind == "call":
            output: dict[str, Any] = {
                "type": "function_call",
                "id": f"fc_up{n}",
                "call_id": f"call_{n}",
                "name": what,
                "arguments": json.dumps({"q": _text(items[-1])}),
                "status": "completed",
            }
        else:
            output = {
                "type": "message",
                "id": f"msg_up{n}",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": what, "annotations": []}],
            }
        return {
            "id": f"resp_up{n}",
            "object": "response",
            "created_at": int(time.time()),
            "status": "completed",
            "model": body.get("model", MODEL),
            "output": [output],
            "parallel_tool_calls": bool(body.get("parallel_tool_calls", False)),
            "tool_choice": body.get("tool_choice", "auto"),
            "tools": body.get("tools") or [],
            "usage": {
                "input_tokens": len(items),
                "output_tokens": 1,
                "total_tokens": len(items) + 1,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens_details": {"reasoning_tokens": 0},
            },
        }

    def complete(self, body: dict[str, Any], n: int) -> dict[str, Any]:
        messages = list(body.get("messages") or [])
        kind, what = self.decide(messages, body.get("tools"))
        message: dict[str, Any] = {"role": "assistant", "content": None}
        if kind == "call":
            message["tool_calls"] = [
                {
                    "id": f"call_{n}",
                    "type": "function",
                    "function": {"name": what, "arguments": json.dumps({"q": _text(messages[-1])})},
                }
            ]
            finish = "tool_calls"
        else:
            message["content"] = what
            finish = "stop"
        return {
            "id": f"chatcmpl-{n}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", MODEL),
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {
                "prompt_tokens": len(messages),
                "completion_tokens": 1,
                "total_tokens": len(messages) + 1,
            },
        }


def _events(response: dict[str, Any]) -> list[dict[str, Any]]:
    """A minimal, well-formed Responses event stream for *response*."""
    seq = itertools.count()
    pending = {**response, "status": "in_progress", "output": []}
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": pending, "sequence_number": next(seq)},
        {"type": "response.in_progress", "response": pending, "sequence_number": next(seq)},
    ]
    for index, item in enumerate(response["output"]):
        events.append(
            {
                "type": "response.output_item.added",
                "output_index": index,
                "item": item,
                "sequence_number": next(seq),
            }
        )
        events.append(
            {
                "type": "response.output_item.done",
                "output_index": index,
                "item": item,
                "sequence_number": next(seq),
            }
        )
    events.append({"type": "response.completed", "response": response, "sequence_number": next(seq)})
    return events
