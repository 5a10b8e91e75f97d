"""`WireTap`: the exact request bodies an openai client puts on the wire."""

from __future__ import annotations

import json
from typing import Any


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
