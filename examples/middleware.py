"""
A loop whose middleware redacts and injects items between calls.

anchortrack chains wherever the server's context is provably a prefix of what
you pass, and falls back to a full request where it is not — printing which
and why:

    python examples/middleware.py
"""

from __future__ import annotations

import re
from typing import Any

from _common import endpoint

import anchortrack


def redact(history: list[Any]) -> list[Any]:
    """Middleware: mask card numbers in user messages (returns a new list)."""
    out = []
    for item in history:
        if isinstance(item, dict) and item.get("role") == "user" and isinstance(item.get("content"), str):
            item = {**item, "content": re.sub(r"\b\d{4}(?: ?\d{4}){3}\b", "[card]", item["content"])}
        out.append(item)
    return out


def inject(history: list[Any], note: str) -> list[Any]:
    """Middleware: append retrieved context for the model."""
    return [*history, {"role": "developer", "content": f"retrieved: {note}"}]


def main() -> None:
    with endpoint() as (raw, model):
        client = anchortrack.wrap(raw)
        tracker = anchortrack.tracker(client)
        scope = tracker.scope_for(client)
        history: list[Any] = [
            {"role": "system", "content": "You are a support agent."},
            {"role": "user", "content": "My card 4111 1111 1111 1111 was charged twice."},
        ]
        steps = [
            ("plain turn", lambda h: h),
            ("append retrieved context", lambda h: inject(h, "refund policy v3")),
            ("redact an early message", redact),
            ("plain turn", lambda h: h),
        ]
        for n, (label, middleware) in enumerate(steps):
            history = middleware(history)
            # What will this call send, and why? (The same plan the wrapped client makes.)
            why = anchortrack.explain(history, store=tracker.store, scope=scope, recent=tracker.recent)
            response = client.responses.create(model=model, input=history)
            print(f"call {n} ({label}): {why.summary}")
            history += [*response.output, {"role": "user", "content": f"follow-up {n}"}]


if __name__ == "__main__":
    main()
