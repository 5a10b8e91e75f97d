"""
anchortrack: send only what the OpenAI Responses API has not seen.

Wrap a client and keep writing the loop you already have::

    import anchortrack
    from openai import OpenAI

    client = anchortrack.wrap(OpenAI())
    resp = client.responses.create(model="gpt-5", input=history)

Each call sends ``previous_response_id`` of the longest recorded response
whose server-side context is exactly a prefix of ``history``, plus the items
after it — or the full history when no such response can be proved.
"""

from __future__ import annotations

from typing import Any

from ._canonical import ItemError, canonical_item
from ._client import tracker_of as tracker
from ._client import wrap
from ._engine import plan_request, record_response
from ._explain import Explanation, explain
from ._hashing import SCHEME, Scope, fingerprint
from ._mode import MODE_ENV, Mode, using
from ._plan import Plan, Reason
from ._stats import Stats
from ._tracker import Tracker
from .stores._base import Anchor, AnchorStore


__all__ = [
    "MODE_ENV",
    "SCHEME",
    "Anchor",
    "AnchorStore",
    "Explanation",
    "ItemError",
    "Mode",
    "Plan",
    "Reason",
    "Scope",
    "Stats",
    "Tracker",
    "canonical_item",
    "explain",
    "fingerprint",
    "plan_request",
    "record_response",
    "tracker",
    "using",
    "wrap",
]


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from importlib.metadata import version

        return version("anchortrack")
    raise AttributeError(f"module 'anchortrack' has no attribute {name!r}")
