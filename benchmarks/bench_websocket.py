"""
Request bytes per call over a WebSocket (``client.responses.connect()``) vs HTTP vs stateless.

The 25-call tool loop (each call answers a tool call with ~1.5 KB of output;
the caller sends its whole history every call) runs against the local
Responses server (started here, in-process) six ways:

* HTTP, stateless (a plain client) and chained (``anchortrack.wrap``);
* a socket, stateless (a plain client) and chained, with ``store: true``
  (anchors in the client's store) and ``store: false`` (connection-local
  anchors: the socket's latest response).

HTTP bytes are request bodies on the wire (an HTTP event hook on the openai
client); socket bytes are the ``response.create`` frames the server received.
Prints a table and the ratios; nothing is timed.

    python benchmarks/bench_websocket.py
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import openai

import anchortrack
from anchortrack.server import ResponsesServer, WireTap


CALLS = 25
OUTPUT = "x" * 1500
ASK = 'Collect all the records.\n!call fetch {"page": 1}\n!rounds ' + str(CALLS - 1)
#: Chained over a socket must send at most this share of the stateless bytes.
TARGET = 0.10


def loop(create: Callable[[list[Any]], Any]) -> None:
    """The tool loop: *create* sends the whole history and returns the response."""
    history: list[Any] = [{"role": "user", "content": ASK}]
    for _ in range(CALLS):
        response = create(history)
        history += [item.to_dict(mode="json") for item in response.output]
        history += [
            {"type": "function_call_output", "call_id": item.call_id, "output": OUTPUT}
            for item in response.output
            if item.type == "function_call"
        ]


def over_http(server: ResponsesServer, *, wrapped: bool) -> list[int]:
    tap = WireTap()
    client = openai.OpenAI(
        base_url=server.base_url, api_key="local", http_client=tap.http_client(), max_retries=0
    )
    if wrapped:
        client = anchortrack.wrap(client)
    try:
        loop(lambda history: client.responses.create(model="scripted", input=history))
    finally:
        client.close()
    return [len(body) for body in tap.bodies]


def over_a_socket(server: ResponsesServer, *, wrapped: bool, store: bool) -> list[int]:
    hub = server.app.state.websockets
    start = len(hub.received)
    client = openai.OpenAI(base_url=server.base_url, api_key="local", max_retries=0)
    if wrapped:
        client = anchortrack.wrap(client)
    try:
        with client.responses.connect() as conn:

            def create(history: list[Any]) -> Any:
                conn.response.create(model="scripted", input=history, store=store)
                for event in conn:
                    if event.type == "response.completed":
                        return event.response
                    if event.type in ("error", "response.failed"):
                        raise RuntimeError(f"the server refused a create: {event.type}")
                raise RuntimeError("the socket closed")

            loop(create)
    finally:
        client.close()
    return [frame.bytes for frame in hub.received[start:]]


def main() -> int:
    with ResponsesServer(store="memory") as server:
        runs = {
            "HTTP stateless": over_http(server, wrapped=False),
            "HTTP chained": over_http(server, wrapped=True),
            "socket stateless": over_a_socket(server, wrapped=False, store=True),
            "socket chained (store)": over_a_socket(server, wrapped=True, store=True),
            "socket chained (store=false)": over_a_socket(server, wrapped=True, store=False),
        }
    assert all(len(sizes) == CALLS for sizes in runs.values()), {k: len(v) for k, v in runs.items()}
    names = list(runs)
    print(f"{'call':>4}  " + "  ".join(f"{name:>28}" for name in names))
    for call in (1, 2, 3, 5, 10, 15, 20, CALLS):
        print(f"{call:>4}  " + "  ".join(f"{runs[name][call - 1]:>28,}" for name in names))
    totals = {name: sum(sizes) for name, sizes in runs.items()}
    print("total " + "  ".join(f"{totals[name]:>28,}" for name in names))
    per_call = {name: total / CALLS for name, total in totals.items()}
    print("mean  " + "  ".join(f"{per_call[name]:>28,.0f}" for name in names))
    stateless = totals["HTTP stateless"]
    for name in names[1:]:
        print(f"{name}: {totals[name] / stateless:.3f} of HTTP stateless bytes")
    socket_ratio = totals["socket chained (store=false)"] / totals["socket stateless"]
    print(f"socket chained (store=false) / socket stateless: {socket_ratio:.3f} (target <= {TARGET})")
    print(f"socket chained / HTTP chained: {totals['socket chained (store)'] / totals['HTTP chained']:.3f}")
    return 0 if socket_ratio <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
