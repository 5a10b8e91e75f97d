"""Whether a server applied a chain (pure): one that accepts ``previous_response_id`` and ignores it answers
the delta alone, and the model loses the conversation. Outside OpenAI's and Azure's hosts, a chained response
shows the chain was dropped when it names no ``previous_response_id``, or when its ``usage.input_tokens`` is
no more than the anchor's (unless ``truncation`` is ``auto``). `ChainWatch` keeps what this needs, per
tracker."""

from __future__ import annotations

import collections
import threading
from typing import Any

from ._properties import announced, openai_host


#: How many responses' input tokens a tracker keeps for the check (the anchors chained from next).
TOKENS_KEPT = 4096


class ChainDropped(Exception):
    """A chained response made without the anchor's context (*seen*: what showed it), not yet handed over."""

    def __init__(self, base_url: str, seen: str) -> None:
        super().__init__(f"{base_url} ignored previous_response_id: {seen}")
        self.base_url, self.seen = base_url, seen


def known_to_chain(base_url: str) -> bool:
    """Whether the server at *base_url* is known to apply ``previous_response_id``: OpenAI's or Azure's."""
    return openai_host(base_url)


def input_tokens(response: object) -> int | None:
    """``usage.input_tokens`` of *response*, if it says."""
    tokens = getattr(getattr(response, "usage", None), "input_tokens", None)
    return tokens if isinstance(tokens, int) and not isinstance(tokens, bool) else None


def evidence(response: object, anchor_tokens: int | None) -> str | None:
    """What shows that *response*, to a request chained to an anchor whose response read *anchor_tokens* input
    tokens (None: unknown), was made without the anchor's context; None: nothing does."""
    if announced(response):
        return None
    if getattr(response, "previous_response_id", None) is None:
        return "the response names no previous_response_id"
    tokens = input_tokens(response)
    if tokens is None or anchor_tokens is None or getattr(response, "truncation", None) == "auto":
        return None
    if tokens <= anchor_tokens:
        return f"usage.input_tokens {tokens}, not more than the anchor's {anchor_tokens}"
    return None


class ChainWatch:
    """One tracker's watch over the servers it chains to: the base URL of each scope, the input tokens of
    recent responses from servers not known to chain, and the scopes whose server dropped a chain."""

    def __init__(self, kept: int = TOKENS_KEPT) -> None:
        self._lock = threading.Lock()
        self._kept = kept
        self._urls: dict[str, str] = {}
        self._tokens: collections.OrderedDict[str, int] = collections.OrderedDict()
        self._stopped: dict[str, str] = {}  # scope key → what was seen
        self._flagged: collections.OrderedDict[str, str] = collections.OrderedDict()  # response id → seen

    def begin(self, scope_key: str, base_url: str) -> bool:
        """Note the base URL of *scope_key*; whether chaining stopped there."""
        with self._lock:
            if len(self._urls) >= self._kept and scope_key not in self._urls:
                self._urls.pop(next(iter(self._urls)))
            self._urls[scope_key] = base_url.rstrip("/")
            return scope_key in self._stopped

    def base_url(self, scope_key: str) -> str:
        """The base URL last seen for *scope_key* ("" if none)."""
        return self._urls.get(scope_key, "")

    def check(self, scope_key: str, parent: str | None, response: object) -> str | None:
        """For a response in *scope_key* to a request chained to *parent* (None: not chained), what shows the
        chain was dropped; None otherwise. Keeps its input tokens for the requests chained from it."""
        if known_to_chain(self.base_url(scope_key)):
            return None
        seen = None
        if parent is not None:
            with self._lock:
                anchor_tokens = self._tokens.get(parent)
            seen = evidence(response, anchor_tokens)
        tokens, response_id = input_tokens(response), getattr(response, "id", None)
        if isinstance(response_id, str):
            with self._lock:
                if seen is not None:
                    _keep(self._flagged, response_id, seen, self._kept)
                elif tokens is not None:
                    _keep(self._tokens, response_id, tokens, self._kept)
        return seen

    def flagged(self, response_id: object) -> str | None:
        """What `check` saw in the response *response_id* (once), if it showed a dropped chain."""
        with self._lock:
            return self._flagged.pop(response_id, None) if isinstance(response_id, str) else None

    def stop(self, scope_key: str, seen: str) -> bool:
        """Stop chaining in *scope_key*; whether it had not stopped yet (the first time: warn, count)."""
        with self._lock:
            first = scope_key not in self._stopped
            self._stopped.setdefault(scope_key, seen)
            return first

    def first_event(self, event: Any) -> object | None:
        """The response a stream's first event carries (``response.created``), if any."""
        created = getattr(event, "type", None) == "response.created"
        return getattr(event, "response", None) if created else None


def _keep(kept: collections.OrderedDict[str, Any], key: str, value: Any, most: int) -> None:
    """Keep *value* under *key*, and at most *most* entries, the oldest let go first."""
    kept[key] = value
    while len(kept) > most:
        kept.popitem(last=False)
