"""
The floor under any pure-Python tracker that proves a history by value, measured in the loop.

A *floor* loop does only what tracking cannot do without, through anchortrack's own functions:
on every call it proves the caller's history against what it remembered of the last one (item
by item, by value) and fingerprints the new items, hashes the prefixes, looks the anchor up in a
plain dict, chains from it, then fingerprints the response's output and files the new anchor.
It has no store interface, no scope, no counters, no events, no fallback. The same tool loops as
``bench_overhead.py`` run through it, through the wrapped client and through the hand-chained
floor, interleaved; each ratio is the median of the per-round ratios.

What the floor costs over the hand-chained loop is what proving by value costs in pure Python,
whatever else a tracker does; what the wrapped client costs over the floor is anchortrack's own
machinery.

    python benchmarks/bench_floor.py
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from typing import Any

import openai


sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_overhead import CALLS, LONG_CALLS, ask, hand_loop, tool_outputs, wrapped_loop

import anchortrack
from anchortrack._hashing import Memo, fingerprint_history, fingerprint_items, prefix_hashes
from benchmarks._support import server_process


def floor_loop(client: openai.OpenAI, calls: int = CALLS) -> int:
    """The tool loop with only the proof, the fingerprints and a dict of anchors; returns how many chained."""
    memo = Memo()
    anchors: dict[bytes, str] = {}
    root = bytes(16)
    history: list[Any] = [{"role": "user", "content": ask(calls)}]
    seen = 0  # the items the server has seen: the last request and its response
    chained = 0
    for _ in range(calls):
        fps, _, _, _ = fingerprint_history(history, memo)  # proves the last history, fingerprints the rest
        hashes = memo.prefix_hashes(root, fps)
        anchor = anchors.get(hashes[seen - 1]) if seen else None
        if anchor is None:
            resp = client.responses.create(model="scripted", input=history)
        else:
            chained += 1
            resp = client.responses.create(
                model="scripted", input=history[seen:], previous_response_id=anchor
            )
        output = list(resp.output)
        output_fps, _, _ = fingerprint_items(output, memo)
        anchors[prefix_hashes(hashes[-1], output_fps)[-1]] = resp.id
        history += output
        seen = len(history)
        history += tool_outputs(output)
    return chained


def measure(base_url: str, calls: int = CALLS, repeats: int = 9) -> dict[str, float]:
    """Client CPU (process time) of the three loops, interleaved; the median ratios and the chained share."""
    raw = openai.OpenAI(base_url=base_url, api_key="bench", max_retries=0)
    wrapped = anchortrack.wrap(raw, store="memory")
    hand_loop(raw, calls)  # warm up every path
    wrapped_loop(wrapped, calls)
    chained = floor_loop(raw, calls)
    floor_over_hand: list[float] = []
    wrapped_over_hand: list[float] = []
    wrapped_over_floor: list[float] = []
    for _ in range(repeats):
        started = time.process_time()
        hand_loop(raw, calls)
        hand = time.process_time() - started
        started = time.process_time()
        floor_loop(raw, calls)
        floor = time.process_time() - started
        started = time.process_time()
        wrapped_loop(wrapped, calls)
        tracked = time.process_time() - started
        floor_over_hand.append(floor / hand)
        wrapped_over_hand.append(tracked / hand)
        wrapped_over_floor.append(tracked / floor)
    return {
        "floor": statistics.median(floor_over_hand),
        "wrapped": statistics.median(wrapped_over_hand),
        "machinery": statistics.median(wrapped_over_floor),
        "chained": chained / calls,
    }


def main() -> None:
    with server_process() as base_url:
        results = {calls: measure(base_url, calls) for calls in (CALLS, LONG_CALLS)}
    print("client CPU of a tool loop, ~1.5 KB tool outputs, as ratios (median of 9 interleaved rounds):")
    print(f"  {'':28} {'floor/hand':>11} {'wrapped/hand':>13} {'wrapped/floor':>14}")
    for calls, m in results.items():
        label = f"{calls}-call loop ({m['chained']:.0%} chained)"
        print(f"  {label:28} {m['floor']:11.3f} {m['wrapped']:13.3f} {m['machinery']:14.3f}")


if __name__ == "__main__":
    main()
