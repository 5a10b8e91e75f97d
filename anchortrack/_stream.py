"""
Tracked event streams: the openai ``Stream`` classes, recording on completion.

They subclass ``openai.Stream`` / ``openai.AsyncStream`` so that
``isinstance`` holds and every helper (``responses.stream()``, raw responses,
``close()``, ``response``) works unchanged.
A response is recorded when its terminal event arrives — before that event is
handed to the caller — and never at ``response.created``; a stream that ends
or is abandoned early records nothing.
Each twin writes its anchor itself right after observing it: the sync one with
``_flush()``, the async one with ``await _aflush()``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING

from openai import AsyncStream, Stream
from openai.types.responses import ResponseStreamEvent

from ._recorder import StreamRecorder


if TYPE_CHECKING:
    from ._flow import Ticket
    from ._tracker import Tracker


class TrackedStream(Stream[ResponseStreamEvent]):
    """A ``Stream`` of Responses events that records the response it carries."""

    _anchortrack: tuple[Tracker, Ticket] | None = None

    def _bind(self, tracker: Tracker, ticket: Ticket) -> None:
        self._anchortrack = (tracker, ticket)

    def __stream__(self) -> Iterator[ResponseStreamEvent]:
        recorder = StreamRecorder()
        try:
            for event in super().__stream__():
                final = recorder.feed(event)
                if final is not None and self._anchortrack is not None:
                    tracker, ticket = self._anchortrack
                    tracker._observe(ticket, final[0], final[1])
                    tracker._flush()
                yield event
        finally:
            if recorder.terminal is None and self._anchortrack is not None:
                self._anchortrack[0]._abandoned(self._anchortrack[1])


class AsyncTrackedStream(AsyncStream[ResponseStreamEvent]):
    """An ``AsyncStream`` of Responses events that records the response it carries."""

    _anchortrack: tuple[Tracker, Ticket] | None = None

    def _bind(self, tracker: Tracker, ticket: Ticket) -> None:
        self._anchortrack = (tracker, ticket)

    async def __stream__(self) -> AsyncIterator[ResponseStreamEvent]:
        recorder = StreamRecorder()
        try:
            async for event in super().__stream__():
                final = recorder.feed(event)
                if final is not None and self._anchortrack is not None:
                    tracker, ticket = self._anchortrack
                    tracker._observe(ticket, final[0], final[1])
                    await tracker._aflush()
                yield event
        finally:
            if recorder.terminal is None and self._anchortrack is not None:
                self._anchortrack[0]._abandoned(self._anchortrack[1])
