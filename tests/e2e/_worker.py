"""
A worker process for cross-process tests.

    python -m tests.e2e._worker STORE BASE_URL

STORE is ``sqlite:PATH`` or a ``redis://`` URL. The worker reads one JSON
history per line on stdin, sends it through a wrapped client, and writes one
JSON line per turn: the response id, its output items and whether the call
chained.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import openai

import anchortrack
from anchortrack.stores import open_store


def main(store_spec: str, base_url: str) -> None:
    client = anchortrack.wrap(
        openai.OpenAI(base_url=base_url, api_key="test", max_retries=0), store=open_store(store_spec)
    )
    stats = anchortrack.tracker(client).stats
    for line in sys.stdin:
        history: list[Any] = json.loads(line)
        before = stats.count("chained")
        resp = client.responses.create(model="scripted", input=history)
        reply = {
            "id": resp.id,
            "output": [item.model_dump(mode="json", exclude_unset=True) for item in resp.output],
            "chained": stats.count("chained") > before,
        }
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
