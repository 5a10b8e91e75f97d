"""
Measuring request bytes on the wire (for ``anchortrack demo`` and the benchmarks).

`WireTap` is an HTTP event hook on the openai client's own HTTP client: it
keeps the exact bytes of every ``POST …/responses`` body that leaves the
process.
`wire_size` encodes JSON the way the openai client does (compact separators,
UTF-8, no ASCII escaping), so the size of a counterfactual body — the same
request sent stateless — is measured in the same unit as the real one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import openai


def wire_size(body: object) -> int:
    """Bytes of *body* as the openai client puts JSON on the wire."""
    return len(json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode())


def stateless_body(body: Mapping[str, Any], history: Sequence[Any]) -> dict[str, Any]:
    """*body* sent without ``previous_response_id``, with the full *history* as ``input``."""
    out = {k: v for k, v in body.items() if k != "previous_response_id"}
    out["input"] = list(history)
    return out


def chained_body(
    body: Mapping[str, Any], history: Sequence[Any], skip: int, anchor_id: str
) -> dict[str, Any]:
    """*body* chained from *anchor_id*, sending ``history[skip:]`` as ``input``."""
    out = dict(body)
    out["input"] = list(history[skip:])
    out["previous_response_id"] = anchor_id
    return out


class WireTap:
    """
    Keeps the raw JSON bodies of every ``POST …/responses`` a client sends.

    Example::

        tap = WireTap()
        client = OpenAI(http_client=tap.http_client())
    """

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    def hook(self, request: Any) -> None:
        """The ``request`` event hook."""
        if request.method == "POST" and request.url.path.endswith("/responses"):
            self.bodies.append(bytes(request.content))

    def http_client(self) -> Any:
        """A new openai default HTTP client (sync) with the hook installed."""
        return http_client_classes()[0](event_hooks={"request": [self.hook]})

    def since(self, start: int) -> list[dict[str, Any]]:
        """The bodies sent after the first *start* ones, parsed."""
        return [json.loads(raw) for raw in self.bodies[start:]]

    def bytes_since(self, start: int) -> int:
        """Total bytes of the bodies sent after the first *start* ones."""
        return sum(len(raw) for raw in self.bodies[start:])


def http_client_classes() -> tuple[Any, Any]:
    """
    The openai client's own default HTTP client classes, sync and async.

    openai 3 uses httpx2; openai 2 uses httpx (it also names httpx2 classes, but
    they need an extra that is usually not installed).
    """
    if int(openai.__version__.split(".")[0]) >= 3:
        return openai.DefaultHttpx2Client, openai.DefaultAsyncHttpx2Client
    return openai.DefaultHttpxClient, openai.DefaultAsyncHttpxClient
