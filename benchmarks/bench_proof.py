"""
What proving a history unchanged costs inside a loop, where the SDK leaves the caches cold.

The 200-call tool loop of ``bench_overhead.py`` runs through a wrapped client against the local
server (in its own process). After each response, the proof the planner runs on the next call
(every item of the last history looked up in the memo and proven unchanged) is timed on the
caller's history as it stands: once as the loop leaves the caches, then at once again, warm. A
hand-chained loop in the same run gives the client CPU of one call, for scale.

    python benchmarks/bench_proof.py
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from typing import Any

import openai


sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_overhead import LONG_CALLS, ask, hand_loop, tool_outputs

import anchortrack
from anchortrack._hashing import fingerprint_items
from benchmarks._support import server_process


def proof_times(client: openai.OpenAI, calls: int) -> tuple[list[float], list[float], int]:
    """Per call of one wrapped tool loop: the proof's seconds, cold then warm; the items proven in all."""
    tracker = anchortrack.tracker(client)
    history: list[Any] = [{"role": "user", "content": ask(calls)}]
    cold: list[float] = []
    warm: list[float] = []
    items = 0
    for _ in range(calls):
        resp = client.responses.create(model="scripted", input=history)
        for times in (cold, warm):
            started = time.perf_counter()
            fingerprint_items(history, tracker._memo)  # the planner's own pass: every item remembered
            times.append(time.perf_counter() - started)
        items += len(history)
        history += resp.output
        history += tool_outputs(resp.output)
    return cold, warm, items


def measure(base_url: str, calls: int = LONG_CALLS, rounds: int = 3) -> dict[str, float]:
    """The proof's cost per call and per item, cold and warm, and the hand-chained call's client CPU."""
    raw = openai.OpenAI(base_url=base_url, api_key="bench", max_retries=0)
    wrapped = anchortrack.wrap(raw, store="memory")
    hand_loop(raw, calls)  # warm up
    proof_times(wrapped, calls)
    cold: list[float] = []
    warm: list[float] = []
    hand: list[float] = []
    items = 0
    for _ in range(rounds):
        started = time.process_time()
        hand_loop(raw, calls)
        hand.append((time.process_time() - started) / calls)
        round_cold, round_warm, round_items = proof_times(wrapped, calls)
        cold += round_cold
        warm += round_warm
        items += round_items
    n = calls * rounds
    return {
        "cold_call": sum(cold) / n,
        "warm_call": sum(warm) / n,
        "cold_item": sum(cold) / items,
        "warm_item": sum(warm) / items,
        "hand_call": statistics.median(hand),
    }


def main() -> None:
    with server_process() as base_url:
        m = measure(base_url)
    print(f"the proof of a {LONG_CALLS}-call tool loop's history (histories to ~{2 * LONG_CALLS} items):")
    for label, key in (("in the loop (cold)", "cold"), ("again at once (warm)", "warm")):
        per_call, per_item = m[f"{key}_call"] * 1e6, m[f"{key}_item"] * 1e6
        print(f"  {label:22} {per_call:7.0f} us a call  {per_item:5.2f} us an item")
    print(f"  hand-chained call, client CPU  {m['hand_call'] * 1e6:7.0f} us")
    print(f"  the proof in the loop / the hand-chained call   {m['cold_call'] / m['hand_call']:5.3f}")


if __name__ == "__main__":
    main()
