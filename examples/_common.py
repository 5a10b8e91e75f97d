"""
Shared by the examples: a client for the local server, or OpenAI when OPENAI_API_KEY is set.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from openai import OpenAI


@contextlib.contextmanager
def endpoint() -> Iterator[tuple[OpenAI, str]]:
    """Yield an unwrapped client and the model to use."""
    if os.environ.get("OPENAI_API_KEY"):
        yield OpenAI(), os.environ.get("ANCHORTRACK_EXAMPLE_MODEL", "gpt-5-mini")
        return
    from anchortrack.server import ResponsesServer

    with ResponsesServer(store="memory") as server:
        yield OpenAI(base_url=server.base_url, api_key="local"), "scripted"
