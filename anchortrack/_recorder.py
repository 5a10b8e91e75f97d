"""
Watching a Responses event stream for its terminal event (pure).

Shared by the sync and async tracked streams.
"""

from __future__ import annotations

from typing import Any


#: Events that end a response and carry it whole.
TERMINAL_EVENTS = frozenset({"response.completed", "response.incomplete", "response.failed"})


class StreamRecorder:
    """Accumulate output items; hand back the final response at the terminal event."""

    __slots__ = ("_items", "terminal")

    def __init__(self) -> None:
        self._items: dict[int, Any] = {}
        self.terminal: str | None = None

    def feed(self, event: object) -> tuple[Any, list[Any]] | None:
        """
        Take one event; at a terminal event return ``(response, output items)``.

        The output comes from the terminal event's response, or — when a server
        leaves it empty — from the ``response.output_item.done`` events seen.
        """
        kind = getattr(event, "type", None)
        if kind == "response.output_item.done":
            index = getattr(event, "output_index", len(self._items))
            self._items[index] = getattr(event, "item", None)
            return None
        if kind not in TERMINAL_EVENTS or self.terminal is not None:
            return None
        self.terminal = kind
        response = getattr(event, "response", None)
        output = list(getattr(response, "output", None) or ())
        if not output and self._items:
            output = [self._items[i] for i in sorted(self._items)]
        return response, output
