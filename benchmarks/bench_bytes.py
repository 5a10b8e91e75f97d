"""
Request bytes per turn: a tool-calling agent sent stateless vs chained by anchortrack.

25 user turns against the local Responses server (started here, in-process):
each turn the user asks, the model calls a tool, the tool answers with about
1.5 KB of JSON, and the model replies — two model calls per turn.
The same loop runs twice: through a plain client (stateless: the whole history
every call) and through ``anchortrack.wrap`` (chained).
Bytes are measured on the wire, with an HTTP event hook on the openai client.

Writes docs/img/bytes_per_turn.png and prints a table. Target: chained/stateless <= 0.05.

    python benchmarks/bench_bytes.py
"""

from __future__ import annotations

import json
import sys
from itertools import accumulate
from pathlib import Path
from typing import Any

import matplotlib


matplotlib.use("Agg")
import matplotlib.pyplot as plt
import openai

import anchortrack
from anchortrack.server import ResponsesServer, WireTap


TURNS = 25
TARGET = 0.05
PNG = Path(__file__).resolve().parents[1] / "docs" / "img" / "bytes_per_turn.png"
TOOLS: list[Any] = [
    {
        "type": "function",
        "name": "fetch_records",
        "description": "Fetch one page of customer records.",
        "parameters": {"type": "object", "properties": {"page": {"type": "integer"}}, "required": ["page"]},
    }
]


def tool_output(page: int) -> str:
    """About 1.5 KB of JSON, different for every page."""
    records = [
        {
            "id": page * 100 + i,
            "name": f"customer {page}-{i}",
            "plan": "pro",
            "balance_eur": (page * 37 + i) % 900,
        }
        for i in range(20)
    ]
    return json.dumps({"page": page, "records": records})


def run(client: openai.OpenAI, tap: WireTap) -> list[int]:
    """Run the agent; return the request bytes each turn put on the wire."""
    history: list[Any] = [{"role": "developer", "content": "You are a billing analyst. Use the tools."}]
    per_turn = []
    for turn in range(1, TURNS + 1):
        start = len(tap.bodies)
        ask = f'Check page {turn} for overdue accounts.\n!call fetch_records {{"page": {turn}}}'
        history.append({"role": "user", "content": ask})
        while True:
            resp = client.responses.create(model="scripted", input=history, tools=TOOLS)
            output = [item.to_dict(mode="json") for item in resp.output]
            history += output
            calls = [item for item in output if item["type"] == "function_call"]
            if not calls:
                break
            history += [
                {"type": "function_call_output", "call_id": c["call_id"], "output": tool_output(turn)}
                for c in calls
            ]
        per_turn.append(sum(len(body) for body in tap.bodies[start:]))
    return per_turn


#: Requests the wrapped loop chained, and all its requests (set by `measure`).
chaining: dict[str, int] = {}


def measure(server: ResponsesServer, *, wrapped: bool) -> list[int]:
    tap = WireTap()
    client = openai.OpenAI(
        base_url=server.base_url, api_key="local", http_client=tap.http_client(), max_retries=0
    )
    if wrapped:
        client = anchortrack.wrap(client)
    try:
        return run(client, tap)
    finally:
        if wrapped:
            stats = anchortrack.tracker(client).stats
            chaining.update(chained=stats.count("chained"), requests=stats.count())
        client.close()


def plot(stateless: list[int], chained: list[int]) -> None:
    turns = list(range(1, TURNS + 1))
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8), dpi=120)
    for ax, (a, b), title in (
        (left, (stateless, chained), "Request bytes per turn"),
        (right, (list(accumulate(stateless)), list(accumulate(chained))), "Cumulative request bytes"),
    ):
        ax.plot(turns, [v / 1024 for v in a], marker="o", markersize=3, color="#c0392b", label="stateless")
        ax.plot(
            turns,
            [v / 1024 for v in b],
            marker="o",
            markersize=3,
            color="#2471a3",
            label="anchortrack (chained)",
        )
        ax.set_title(title)
        ax.set_xlabel("turn (user message → tool call → 1.5 KB tool output → answer)")
        ax.set_ylabel("KiB")
        ax.grid(alpha=0.3)
        ax.legend(frameon=False)
    ratio = sum(chained) / sum(stateless)
    fig.suptitle(
        f"{TURNS}-turn tool-calling agent: chained sends {ratio:.1%} of the stateless bytes", fontsize=11
    )
    fig.tight_layout()
    PNG.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(PNG)
    plt.close(fig)


def main() -> int:
    with ResponsesServer(store="memory") as server:
        stateless = measure(server, wrapped=False)
        chained = measure(server, wrapped=True)
    print(f"{'turn':>4}  {'stateless B':>11}  {'chained B':>9}  {'cum. stateless':>14}  {'cum. chained':>12}")
    cum_s = cum_c = 0
    for turn, (s, c) in enumerate(zip(stateless, chained, strict=True), start=1):
        cum_s, cum_c = cum_s + s, cum_c + c
        if turn in (1, 2, 3, 5, 10, 15, 20, TURNS):
            print(f"{turn:>4}  {s:>11,}  {c:>9,}  {cum_s:>14,}  {cum_c:>12,}")
    ratio = cum_c / cum_s
    print(f"total: stateless {cum_s:,} B, chained {cum_c:,} B, ratio {ratio:.3f} (target <= {TARGET})")
    print(f"chaining rate: {chaining['chained']} of {chaining['requests']} wrapped requests chained")
    plot(stateless, chained)
    print(f"wrote {PNG.relative_to(Path.cwd()) if PNG.is_relative_to(Path.cwd()) else PNG}")
    return 0 if ratio <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
