"""
Tracked event streams: the openai ``Stream`` classes, recording on completion.

They subclass ``openai.Stream`` / ``openai.AsyncStream`` so that
``isinstance`` holds and every helper (``responses.stream()``, raw responses,
``close()``, ``response``) works unchanged.
A response is recorded when its terminal event arrives — before that event is
handed to the caller — and never at ``response.created``; a stream that ends
or is abandoned early records nothing, and is counted (``stream_abandoned``)
when its iteration stops or its response is closed (``close()``, ``with``
exit), not at garbage collection.
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


class _Ending:
    """
    Reports a bound stream that ends without its terminal event, once.

    It ends when its iteration stops, or when its HTTP response is closed —
    by ``close()``, a ``with`` block's exit, or ``responses.stream()``'s
    manager — whichever comes first; never later, at garbage collection.
    """

    __slots__ = ("recorder", "reported", "target")

    def __init__(self, target: tuple[Tracker, Ticket] | None) -> None:
        self.target = target
        self.recorder = StreamRecorder()
        self.reported = False

    def end(self) -> None:
        if self.reported or self.target is None:
            return
        self.reported = True
        if self.recorder.terminal is None:
            self.target[0]._abandoned(self.target[1])


class TrackedStream(Stream[ResponseStreamEvent]):
    """A ``Stream`` of Responses events that records the response it carries."""

    _anchortrack: tuple[Tracker, Ticket] | None = None
    _ending: _Ending | None = None

    def _bind(self, tracker: Tracker, ticket: Ticket) -> None:
        self._anchortrack = (tracker, ticket)
        ending = self._ending = _Ending(self._anchortrack)
        response, close = self.response, self.response.close

        def closed() -> None:
            try:
                close()
            finally:
                ending.end()

        response.close = closed  # type: ignore[method-assign]

    def __stream__(self) -> Iterator[ResponseStreamEvent]:
        ending = self._ending or _Ending(None)
        recorder = ending.recorder
        try:
            for event in super().__stream__():
                final = recorder.feed(event)
                if final is not None and self._anchortrack is not None:
                    tracker, ticket = self._anchortrack
                    tracker._observe(ticket, final[0], final[1])
                    tracker._flush()
                yield event
        finally:
            ending.end()


class AsyncTrackedStream(AsyncStream[ResponseStreamEvent]):
    """An ``AsyncStream`` of Responses events that records the response it carries."""

    _anchortrack: tuple[Tracker, Ticket] | None = None
    _ending: _Ending | None = None

    def _bind(self, tracker: Tracker, ticket: Ticket) -> None:
        self._anchortrack = (tracker, ticket)
        ending = self._ending = _Ending(self._anchortrack)
        response, aclose = self.response, self.response.aclose

        async def closed() -> None:
            try:
                await aclose()
            finally:
                ending.end()

        response.aclose = closed  # type: ignore[method-assign]

    async def __stream__(self) -> AsyncIterator[ResponseStreamEvent]:
        ending = self._ending or _Ending(None)
        recorder = ending.recorder
        try:
            async for event in super().__stream__():
                final = recorder.feed(event)
                if final is not None and self._anchortrack is not None:
                    tracker, ticket = self._anchortrack
                    tracker._observe(ticket, final[0], final[1])
                    await tracker._aflush()
                yield event
        finally:
            ending.end()
