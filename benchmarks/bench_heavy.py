"""
Heavy histories: what chaining saves, and what the wrapped client's proof costs, when every turn adds
a large item or one large item stays in the history.

Two loops against the local Responses server (in its own process, so only the client's CPU counts):

* ``screenshots``: a computer-use style loop. Every turn the model calls a tool and the tool answers
  with a ~300 KB ``input_image`` data URL (a fresh screenshot), so the history grows by ~300 KB a turn.
* ``pdf``: a 2 MB PDF ``input_file`` sent once, in the first message, and kept in the history of a tool
  loop with ~1.5 KB tool outputs.

Each loop runs unwrapped (stateless: the whole history every call), hand-chained (tracks
``previous_response_id`` itself and sends only the new items: the floor) and wrapped (passes the whole
history, like the unwrapped loop). Reported: request bytes chained / stateless, what those bytes mean as
upload time at 10 and 100 Mbit/s, and client CPU (the calling thread's, ``time.thread_time``), with the
ratio wrapped / hand-chained as the median of per-round ratios of alternating runs in one process
(and the middle half of those ratios: one round alone moves by ±0.3 on a busy 2-core machine).

    python benchmarks/bench_heavy.py [TURNS ...]      # default: 20 40 100
"""

from __future__ import annotations

import base64
import random
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import openai


sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import anchortrack
from benchmarks._support import server_process


SHOT_BYTES = 300_000
PDF_BYTES = 2_000_000
OUTPUT = "x" * 1500
ROUNDS = 9  # this machine's per-round ratios spread by ±0.3: the median of nine is steadier
MBIT = 1_000_000 / 8  # bytes per second in one Mbit/s


def data_url(kind: str, size: int, seed: int) -> str:
    """A base64 data URL of about *size* characters of random (incompressible) bytes."""
    raw = random.Random(seed).randbytes(size * 3 // 4)
    return f"data:{kind};base64," + base64.b64encode(raw).decode("ascii")


def screenshots(turns: int, seed: int, size: int = SHOT_BYTES) -> list[str]:
    """One fresh screenshot per turn (new objects each round: nothing is remembered across rounds)."""
    return [data_url("image/png", size, seed * 100_003 + turn) for turn in range(turns)]


def ask(turns: int, tool: str) -> str:
    return f"Work through the task.\n!call {tool} {{}}\n!rounds {turns}"


# -- the two loops: build each turn's new items ----------------------------------------------------


def screenshot_start(turns: int, shots: Sequence[str]) -> list[Any]:
    return [{"role": "user", "content": ask(turns, "click")}]


def screenshot_answer(turn: int, output: Sequence[Any], shots: Sequence[str]) -> list[Any]:
    """The tool's answer to each call: the screen after it, as an image."""
    image = [{"type": "input_image", "image_url": shots[turn], "detail": "high"}]
    return [
        {"type": "function_call_output", "call_id": item.call_id, "output": image}
        for item in output
        if item.type == "function_call"
    ]


def pdf_start(turns: int, pdf: Sequence[str]) -> list[Any]:
    content = [
        {"type": "input_file", "filename": "report.pdf", "file_data": pdf[0]},
        {"type": "input_text", "text": ask(turns, "lookup")},
    ]
    return [{"role": "user", "content": content}]


def pdf_answer(turn: int, output: Sequence[Any], pdf: Sequence[str]) -> list[Any]:
    return [
        {"type": "function_call_output", "call_id": item.call_id, "output": OUTPUT}
        for item in output
        if item.type == "function_call"
    ]


Start = Callable[[int, Sequence[str]], list[Any]]
Answer = Callable[[int, Sequence[Any], Sequence[str]], list[Any]]
LOOPS: dict[str, tuple[Start, Answer]] = {
    "screenshots": (screenshot_start, screenshot_answer),
    "pdf": (pdf_start, pdf_answer),
}


def full_loop(client: openai.OpenAI, loop: str, turns: int, blobs: Sequence[str]) -> list[Any]:
    """The caller keeps the whole history and passes it every call; returns the history."""
    start, answer = LOOPS[loop]
    history = start(turns, blobs)
    for turn in range(turns):
        resp = client.responses.create(model="scripted", input=history)
        history += resp.output
        history += answer(turn, resp.output, blobs)
    return history


def hand_loop(client: openai.OpenAI, loop: str, turns: int, blobs: Sequence[str]) -> None:
    """The floor: tracks ``previous_response_id`` itself and sends only the new items."""
    start, answer = LOOPS[loop]
    new = start(turns, blobs)
    previous: str | None = None
    for turn in range(turns):
        params: dict[str, Any] = {"previous_response_id": previous} if previous else {}
        resp = client.responses.create(model="scripted", input=new, **params)
        previous = resp.id
        new = answer(turn, resp.output, blobs)


# -- measuring ---------------------------------------------------------------------------------------


class Meter:
    """Counts the request bytes a client sends (an httpx request hook: the body the SDK wrote)."""

    def __init__(self) -> None:
        self.sent = 0

    def hook(self, request: Any) -> None:
        self.sent += len(request.content)

    def client(self, base_url: str) -> openai.OpenAI:
        http = openai.DefaultHttpxClient(event_hooks={"request": [self.hook]})
        return openai.OpenAI(base_url=base_url, api_key="bench", max_retries=0, http_client=http)


def blobs_for(loop: str, turns: int, seed: int, size: int | None = None) -> list[str]:
    if loop == "pdf":
        return [data_url("application/pdf", size or PDF_BYTES, seed)]
    return screenshots(turns, seed, size or SHOT_BYTES)


def measure(
    base_url: str,
    loop: str,
    turns: int,
    *,
    rounds: int = ROUNDS,
    size: int | None = None,
    stateless: bool = True,
) -> dict[str, float]:
    """
    Bytes and client CPU of one loop at *turns*: medians over *rounds* alternating runs (the unwrapped
    loop once, it is the slow one). Asserts that the wrapped loop chains every call after the first and
    sends exactly what the hand-chained loop sends.
    """
    meters = {name: Meter() for name in ("hand", "wrapped", "unwrapped")}
    clients: dict[str, openai.OpenAI] = {name: meter.client(base_url) for name, meter in meters.items()}
    clients["wrapped"] = anchortrack.wrap(clients["wrapped"])
    runs: dict[str, tuple[Callable[..., object], openai.OpenAI]] = {
        "hand": (hand_loop, clients["hand"]),
        "wrapped": (full_loop, clients["wrapped"]),
    }
    for run, client in runs.values():  # warm every path up
        run(client, loop, 2, blobs_for(loop, 2, seed=0, size=size))
    times: dict[str, list[float]] = {name: [] for name in runs}
    sent: dict[str, int] = {}
    for round_ in range(rounds):
        for name, (run, client) in runs.items():
            blobs = blobs_for(loop, turns, seed=1 + round_, size=size)
            before = meters[name].sent
            started = time.thread_time()
            run(client, loop, turns, blobs)
            times[name].append(time.thread_time() - started)
            sent[name] = meters[name].sent - before
            del blobs
    stats = anchortrack.tracker(clients["wrapped"]).stats
    assert stats.count("chained") >= rounds * (turns - 1), stats.snapshot()
    assert sent["wrapped"] == sent["hand"], sent  # the wrapped loop sends exactly what a hand loop sends
    out = {f"cpu_{name}": statistics.median(values) for name, values in times.items()}
    ratios = sorted(w / h for w, h in zip(times["wrapped"], times["hand"], strict=True))
    out["ratio"] = statistics.median(ratios)
    out["ratio_low"], out["ratio_high"] = ratios[len(ratios) // 4], ratios[-1 - len(ratios) // 4]
    out["bytes_chained"] = sent["wrapped"]
    if stateless:
        blobs = blobs_for(loop, turns, seed=99, size=size)
        before = meters["unwrapped"].sent
        started = time.thread_time()
        full_loop(clients["unwrapped"], loop, turns, blobs)
        out["cpu_unwrapped"] = time.thread_time() - started
        out["bytes_stateless"] = meters["unwrapped"].sent - before
    for client in clients.values():
        client.close()
    return out


def memo_memory(base_url: str, turns: int) -> dict[str, int]:
    """
    The wrapped client's memo at the end of a screenshot loop of *turns*, its history still held: the
    bytes it counts against its bound (the screenshots it keeps proven: the caller's own strings), the
    bytes it allocated itself (its copies, entries and digests), and what it counts once the caller has
    dropped that history and the next conversation sends its first screenshot.
    """
    client = anchortrack.wrap(Meter().client(base_url))
    memo = anchortrack.tracker(client)._memo
    tracemalloc.start()
    try:
        history = full_loop(client, "screenshots", turns, screenshots(turns, seed=7))
        own = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(True, "*_hashing.py")])
        out = {"counted": memo.nbytes, "own": sum(stat.size for stat in own.statistics("filename"))}
    finally:
        tracemalloc.stop()
    del history
    full_loop(client, "screenshots", 2, screenshots(2, seed=8))  # its second call sends a screenshot
    out["after_drop"] = memo.nbytes
    client.close()
    return out


def upload(nbytes: float, mbit: float) -> str:
    seconds = nbytes / (mbit * MBIT)
    return f"{seconds:.1f} s" if seconds >= 1 else f"{seconds * 1e3:.0f} ms"


def report(loop: str, turns: int, m: dict[str, float]) -> str:
    stateless = m.get("bytes_stateless", float("nan"))
    return (
        f"| {loop} | {turns} | {m['bytes_chained'] / 1e6:,.1f} MB / {stateless / 1e6:,.1f} MB"
        f" ({m['bytes_chained'] / stateless:.3f})"
        f" | {upload(m['bytes_chained'], 10)} / {upload(stateless, 10)}"
        f" | {upload(m['bytes_chained'], 100)} / {upload(stateless, 100)}"
        f" | {m.get('cpu_unwrapped', float('nan')) * 1e3:,.0f} ms | {m['cpu_hand'] * 1e3:,.0f} ms"
        f" | {m['cpu_wrapped'] * 1e3:,.0f} ms"
        f" | **{m['ratio']:.2f}** ({m['ratio_low']:.2f} to {m['ratio_high']:.2f}) |"
    )


def main(argv: list[str]) -> int:
    sizes = [int(arg) for arg in argv] or [20, 40, 100]
    print(
        "| loop | turns | bytes chained / stateless | upload at 10 Mbit/s, chained / stateless"
        " | at 100 Mbit/s | CPU unwrapped | CPU hand-chained | CPU wrapped | wrapped / hand (middle half) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    with server_process() as base_url:
        for loop in LOOPS:
            for turns in sizes:
                print(report(loop, turns, measure(base_url, loop, turns)), flush=True)
        for turns in sizes:
            m = memo_memory(base_url, turns)
            print(
                f"memo after {turns} screenshot turns: counts {m['counted'] / 1e6:.1f} MB (the caller's"
                f" screenshots, shared), allocated {m['own'] / 1e3:.0f} KB itself;"
                f" {m['after_drop'] / 1e6:.1f} MB once the history is dropped and the next one starts"
            )
    print(f"(screenshots ~{SHOT_BYTES // 1000} KB each, PDF {PDF_BYTES / 1e6:.0f} MB;")
    print(f" CPU: the calling thread's, medians of {ROUNDS} alternating rounds, the unwrapped loop run once;")
    print(" ratio: the median of the per-round ratios, and the middle half of them)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
