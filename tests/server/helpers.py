"""Helpers of the local server's tests: raw HTTP, plain clients, items as the server sends them."""

from __future__ import annotations

import hashlib
import http.client
import json
from collections.abc import Sequence
from typing import Any

import openai

from anchortrack.server import ResponsesServer


#: The key every helper and plain client sends (responses belong to the key that made them).
API_KEY = "test"


def raw_request(
    server: ResponsesServer,
    method: str,
    path: str,
    body: bytes | None = None,
    *,
    content_type: str = "application/json",
    api_key: str | None = API_KEY,
) -> tuple[int, Any, dict[str, str]]:
    """Send one raw HTTP request as *api_key*; return (status, decoded JSON body or text, headers)."""
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        headers = {"content-type": content_type} if body is not None else {}
        if api_key is not None:
            headers["authorization"] = f"Bearer {api_key}"
        connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
        data = response.read()
        header_map = {key.lower(): value for key, value in response.getheaders()}
    finally:
        connection.close()
    try:
        decoded: Any = json.loads(data)
    except ValueError:
        decoded = data.decode("utf-8", "replace")
    return response.status, decoded, header_map


def post_json(
    server: ResponsesServer, body: Any, path: str = "/v1/responses", *, api_key: str | None = API_KEY
) -> tuple[int, Any]:
    """POST *body* as JSON as *api_key*; return (status, decoded body)."""
    status, decoded, _ = raw_request(server, "POST", path, json.dumps(body).encode(), api_key=api_key)
    return status, decoded


def make_client(server: ResponsesServer) -> openai.OpenAI:
    """A real sync openai client for *server* that never retries."""
    return openai.OpenAI(base_url=server.base_url, api_key=API_KEY, max_retries=0)


_SDK_ONLY = frozenset({"parsed", "parsed_arguments"})


def plain(value: Any) -> Any:
    """JSON data without the fields the SDK's parse helpers add (``parsed``…)."""
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items() if key not in _SDK_ONLY}
    if isinstance(value, list):
        return [plain(item) for item in value]
    return value


def as_items(outputs: Sequence[Any]) -> list[dict[str, Any]]:
    """SDK output items as the JSON the server sent."""
    return [plain(item.to_dict()) for item in outputs]


def digest(context: Sequence[Any]) -> str:
    """The scripted model's context digest, computed independently."""
    text = json.dumps(list(context), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:12]
