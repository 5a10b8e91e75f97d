"""
A local OpenAI Responses API server with ``previous_response_id`` chaining.

It runs anywhere with no API key (for anchortrack's own end-to-end tests, ``anchortrack demo``, and testing
agents offline) and follows OpenAI's semantics: a chained request's context is every stored input and output
item of the chain, then the new input; ``instructions`` are not carried over; unknown, expired, deleted,
unstored or failed parents give 400 ``previous_response_not_found``; a response is saved before its id reaches
the client.

```python
from openai import OpenAI
from anchortrack.server import ResponsesServer

with ResponsesServer(store="memory") as srv:        # or "sqlite:/path/file.db"
    client = OpenAI(base_url=srv.base_url, api_key="test")
    first = client.responses.create(model="scripted", input="hello")
    second = client.responses.create(
        model="scripted", input="again", previous_response_id=first.id
    )
    srv.state.resolved_context(second.id)   # what the model saw
```

It also speaks the Responses WebSocket mode at ``/v1/responses`` (see `anchortrack.server._websocket`), runs
as ``anchortrack serve``, and can front a Chat Completions provider (Ollama, vLLM, llama.cpp, Groq, …) instead
of the deterministic `ScriptedModel`: see `Upstream`.  ``ResponsesServer`` and ``create_app`` need the
``anchortrack[server]`` extra (Starlette and uvicorn), imported on first use.
"""

from __future__ import annotations

import importlib
import json
from typing import TYPE_CHECKING, Any

from anchortrack.server._errors import APIError
from anchortrack.server._model import ModelReply, ScriptedModel
from anchortrack.server._state import ServerState


if TYPE_CHECKING:
    from anchortrack.server._app import create_app
    from anchortrack.server._runner import ResponsesServer
    from anchortrack.server._upstream import Upstream

__all__ = [
    "APIError",
    "ModelReply",
    "ResponsesServer",
    "ScriptedModel",
    "ServerState",
    "Upstream",
    "WireTap",
    "create_app",
    "http_client_classes",
]

#: The web stack the server extra installs.
_SERVER_EXTRA_MODULES = frozenset({"starlette", "uvicorn", "websockets", "h2"})

_LAZY = {
    "create_app": "anchortrack.server._app",
    "ResponsesServer": "anchortrack.server._runner",
    "Upstream": "anchortrack.server._upstream",
}


class WireTap:
    """Keeps the raw JSON bodies of every ``POST …/responses`` a client sends.

    For example:

    ```python
    tap = WireTap()
    client = OpenAI(base_url=srv.base_url, api_key="test", http_client=tap.http_client())
    client.responses.create(model="scripted", input="hello")
    tap.since(0)        # [{"model": "scripted", "input": "hello"}]
    ```

    Attributes:
        bodies: Every body seen so far, as sent.
    """

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    def hook(self, request: Any) -> None:
        """The sync ``request`` event hook."""
        if request.method == "POST" and request.url.path.endswith("/responses"):
            self.bodies.append(bytes(request.content))

    async def ahook(self, request: Any) -> None:
        """The async ``request`` event hook."""
        self.hook(request)

    def http_client(self) -> Any:
        """A new openai default HTTP client (sync) with the hook installed."""
        return http_client_classes()[0](event_hooks={"request": [self.hook]})

    def async_http_client(self) -> Any:
        """A new openai default HTTP client (async) with the hook installed."""
        return http_client_classes()[1](event_hooks={"request": [self.ahook]})

    def since(self, start: int) -> list[dict[str, Any]]:
        """The bodies sent after the first *start* ones, parsed."""
        return [json.loads(raw) for raw in self.bodies[start:]]

    def bytes_since(self, start: int) -> int:
        """Total bytes of the bodies sent after the first *start* ones."""
        return sum(len(raw) for raw in self.bodies[start:])


def http_client_classes() -> tuple[Any, Any]:
    """The openai client's own default HTTP client classes, sync and async.

    openai 3 uses httpx2; openai 2 uses httpx (it also names httpx2 classes, but they need an extra that is
    usually not installed).
    """
    import openai

    if int(openai.__version__.split(".")[0]) >= 3:
        return openai.DefaultHttpx2Client, openai.DefaultAsyncHttpx2Client
    return openai.DefaultHttpxClient, openai.DefaultAsyncHttpxClient


def __getattr__(name: str) -> Any:
    module_name = _LAZY.get(name)
    if module_name is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        missing = (error.name or "").split(".")[0]
        if missing not in _SERVER_EXTRA_MODULES:
            raise
        raise ImportError(
            f"anchortrack.server.{name} needs the server extra ({missing} is missing): "
            "pip install 'anchortrack[server]'",
            name=error.name,
        ) from error
    globals()[name] = value = getattr(module, name)
    return value
