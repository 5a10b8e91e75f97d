"""The openai SDK's private names anchortrack attaches through, looked up per call: where one is missing the
call goes out untracked, with one ``RuntimeWarning`` per process (docs/compatibility.md lists them)."""

from __future__ import annotations

import importlib
import warnings
from typing import Any


_warned: set[str] = set()


def sdk(module: str, name: str) -> Any:
    """``module.name`` from the installed SDK, or None."""
    try:
        return getattr(importlib.import_module(module), name, None)
    except ImportError:
        return None


def missing_http(resource: Any, client: Any) -> str | None:
    """The seam an HTTP ``create`` / ``parse`` through *resource* (of *client*) lacks, or None: the resource
    sends through ``client.post`` (where anchortrack sees the request), and the SDK applies a request's
    ``post_parser`` to what it parsed (where anchortrack records the response)."""
    if getattr(resource, "_post", None) != client.post:
        return "its resources' _post is not the client's post"
    options = sdk("openai._models", "FinalRequestOptions")
    fields = getattr(options, "model_fields", None) or getattr(options, "__fields__", None) or {}
    if "post_parser" not in fields:
        return "no openai._models.FinalRequestOptions.post_parser"
    return None


#: Where the SDK keeps its WebSocket connection managers.
_RESPONSES = "openai.resources.responses.responses"


def missing_websocket() -> str | None:
    """The seam ``responses.connect()`` lacks, or None (openai >= 2.32): the SDK's serializer of a client
    event, and its connection managers' ``_connect_ws`` (each socket they open, and reopen, is made there)."""
    if sdk("openai._utils", "maybe_transform") is None:
        return "no openai._utils.maybe_transform"
    for name in ("ResponsesConnectionManager", "AsyncResponsesConnectionManager"):
        if not callable(getattr(sdk(_RESPONSES, name), "_connect_ws", None)):
            return f"no {name}._connect_ws"
    return None


def unattached(seam: str, what: str, *, stacklevel: int = 4) -> None:
    """Warn, once per *seam* in this process, that *what* go out untracked because *seam* is missing."""
    if seam in _warned:
        return
    _warned.add(seam)
    version = sdk("openai", "__version__")
    warnings.warn(
        f"anchortrack could not attach to the installed openai {version} ({seam}): {what} "
        "untracked, exactly as the unwrapped client sends them. anchortrack's compatibility notes list the "
        "openai versions it tracks.",
        RuntimeWarning,
        stacklevel=stacklevel,
    )
