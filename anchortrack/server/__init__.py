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
from typing import TYPE_CHECKING, Any

from anchortrack.server._errors import APIError
from anchortrack.server._model import ModelReply, ScriptedModel
from anchortrack.server._state import ServerState
from anchortrack.server._wire import WireTap, http_client_classes


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
