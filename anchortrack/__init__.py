"""
anchortrack: send only what the OpenAI Responses API has not seen.

Wrap a client and keep writing the loop you already have:

```python
import anchortrack
from openai import OpenAI

client = anchortrack.wrap(OpenAI())
resp = client.responses.create(model="gpt-5", input=history)
```

Each call sends ``previous_response_id`` of the longest recorded response
whose server-side context is exactly a prefix of ``history``, plus the items
after it — or the full history when no such response can be proved.
"""

from __future__ import annotations

from typing import Any

from ._api import plan_request, record_response
from ._client import tracker, wrap
from ._explain import Explanation, explain
from ._hashing import Scope
from ._mode import Mode, using
from ._plan import Plan, Reason
from ._stats import Stats
from ._tracker import Tracker
from .stores._base import Anchor, AnchorStore


__all__ = [
    "Anchor",
    "AnchorStore",
    "Explanation",
    "Mode",
    "Plan",
    "Reason",
    "Scope",
    "Stats",
    "Tracker",
    "explain",
    "plan_request",
    "record_response",
    "tracker",
    "using",
    "wrap",
]

# Names defined in private modules say where users import them from (as httpx
# does): reprs and documentation show ``anchortrack.Plan``, not ``anchortrack._plan``.
for _name in __all__:
    if getattr(globals()[_name], "__module__", "").startswith("anchortrack._"):
        setattr(globals()[_name], "__module__", "anchortrack")  # noqa: B010
del _name


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from importlib.metadata import version

        return version("anchortrack")
    raise AttributeError(f"module 'anchortrack' has no attribute {name!r}")
