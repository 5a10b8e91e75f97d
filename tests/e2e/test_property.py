"""
Property: for random conversations under random middleware edits, every request
anchortrack sends makes the server resolve exactly the caller's list (I1), and a
chained request is sent whenever a valid anchor exists — the longest one.
"""

from __future__ import annotations

import json
from typing import Any

import openai
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import anchortrack
from anchortrack.server import ResponsesServer, WireTap
from anchortrack.stores import MemoryStore

from ..helpers import canon


OPS = st.one_of(
    st.just(("turn",)),
    st.just(("tools",)),
    st.just(("reason",)),
    st.tuples(st.just("append"), st.text("abcxyz ", min_size=1, max_size=8)),
    st.tuples(st.just("insert"), st.integers(0, 1000), st.sampled_from(["user", "developer", "system"])),
    st.tuples(st.just("delete"), st.integers(0, 1000)),
    st.tuples(st.just("modify"), st.integers(0, 1000)),
    st.tuples(st.just("swap"), st.integers(0, 1000)),
    st.just(("regenerate",)),
    st.just(("redact_first",)),
)


def _message_indexes(history: list[Any]) -> list[int]:
    """Items middleware may touch: messages, never tool calls, outputs or reasoning."""
    return [i for i, item in enumerate(history) if canon([item])[0].get("type") == "message"]


def _oracle_skip(history: list[Any], views: list[list[dict[str, Any]]]) -> int:
    """The longest recorded view that is a strict prefix of history (0 if none)."""
    full = canon(history)
    best = 0
    for view in views:
        if best < len(view) < len(full) and full[: len(view)] == view:
            best = len(view)
    return best


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=st.lists(OPS, min_size=2, max_size=9))
def test_equivalence_under_random_middleware(
    server: ResponsesServer, raw_client: openai.OpenAI, wire: WireTap, ops: list[tuple[Any, ...]]
) -> None:
    """I1 + longest-anchor, for a few hundred random conversations."""
    client = anchortrack.wrap(raw_client, store=MemoryStore())
    history: list[Any] = [{"role": "system", "content": "sys"}, {"role": "user", "content": "hello"}]
    views: list[list[dict[str, Any]]] = []
    last_outputs: list[Any] = []

    def send(extra: str = "") -> None:
        nonlocal history, last_outputs
        if extra:
            history = [*history, {"role": "user", "content": f"go {extra}"}]
        expected_skip = _oracle_skip(history, views)
        before = len(wire.bodies)
        resp = client.responses.create(model="scripted", input=history)
        body = json.loads(wire.bodies[-1])
        assert before + 1 == len(wire.bodies)
        if expected_skip:
            assert "previous_response_id" in body
            assert len(history) - expected_skip == len(body["input"])
        else:
            assert "previous_response_id" not in body
        assert canon(history) == canon(server.state.resolved_context(resp.id))
        views.append(canon([*history, *resp.output]))
        last_outputs = list(resp.output)
        history = [*history, *resp.output]
        calls = [item for item in resp.output if item.type == "function_call"]
        history += [
            {"type": "function_call_output", "call_id": c.call_id, "output": f"out {c.call_id}"}
            for c in calls
        ]

    send()
    for op in ops:
        kind = op[0]
        messages = _message_indexes(history)
        if kind == "turn":
            send("on")
        elif kind == "tools":
            send('tool\n!call lookup {"q": 1}')
        elif kind == "reason":
            send("think\n!reason")
        elif kind == "append":
            history = [*history, {"role": "user", "content": op[1]}]
        elif kind == "insert":
            at = op[1] % (len(history) + 1)
            history = [*history[:at], {"role": op[2], "content": "injected"}, *history[at:]]
        elif kind == "delete" and len(messages) > 1:
            at = messages[op[1] % len(messages)]
            history = history[:at] + history[at + 1 :]
        elif kind == "modify" and messages:
            at = messages[op[1] % len(messages)]
            history = [*history[:at], {"role": "user", "content": "edited"}, *history[at + 1 :]]
        elif kind == "swap" and len(messages) > 1:
            k = op[1] % (len(messages) - 1)
            i, j = messages[k], messages[k + 1]
            history = list(history)
            history[i], history[j] = history[j], history[i]
        elif kind == "regenerate" and last_outputs:
            # Drop the newest response's items (and what followed), as a "regenerate" does.
            at = next((i for i, item in enumerate(history) if item is last_outputs[0]), None)
            if at is not None:
                history = history[:at]
        elif kind == "redact_first" and messages:
            at = messages[0]
            history = [*history[:at], {"role": "user", "content": "[redacted]"}, *history[at + 1 :]]
    send("end")
