"""anchortrack: send only what the OpenAI Responses API has not seen.

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

import importlib
import typing
from typing import Any


if typing.TYPE_CHECKING:
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

#: Where the public names are defined. They are imported on first use (PEP 562), so
#: ``import anchortrack`` — and the ``anchortrack`` command's ``--help`` — does not import ``openai``.
_HOMES = {
    "._api": ("plan_request", "record_response"),
    "._client": ("tracker", "wrap"),
    "._explain": ("Explanation", "explain"),
    "._hashing": ("Scope",),
    "._mode": ("Mode", "using"),
    "._plan": ("Plan", "Reason"),
    "._stats": ("Stats",),
    "._tracker": ("Tracker",),
    ".stores._base": ("Anchor", "AnchorStore"),
}


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from importlib.metadata import version

        return version("anchortrack")
    if name not in __all__:
        raise AttributeError(f"module 'anchortrack' has no attribute {name!r}")
    for home, names in _HOMES.items():
        module = importlib.import_module(home, __name__)
        for public in names:
            value = getattr(module, public)
            # A name from a private module says where users import it from, as httpx's do: anchortrack.Plan
            if getattr(value, "__module__", "").startswith("anchortrack._"):
                value.__module__ = "anchortrack"
            globals()[public] = value
    return globals()[name]


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
