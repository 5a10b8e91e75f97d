"""
Tracked event streams: the openai ``Stream`` classes, recording on completion.

A response is recorded when its terminal event arrives, before that event reaches the caller; a
stream that ends or is closed without one is counted (``stream_abandoned``) then, not at garbage
collection. A chained stream is *peeked*: its first event is read at once, so a refusal of a stale
anchor inside the stream (HTTP 200, then an error event) is recovered from like an HTTP refusal.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import openai
from openai import AsyncStream, Stream
from openai.types.responses import ResponseStreamEvent

from ._socket import TERMINAL_EVENTS


if TYPE_CHECKING:
    from ._flow import Ticket


class Recorder(Protocol):
    """What a tracked stream needs from the tracker (`anchortrack._tracker.Tracker`)."""

    def observe(self, ticket: Ticket, response: object, output: Sequence[Any] | None = None) -> object: ...

    def flush(self) -> None: ...

    async def aflush(self) -> None: ...

    def abandoned(self, ticket: Ticket | None) -> None: ...


class _Call:
    """The call a tracked stream carries the response of: records it, or reports it abandoned, once."""

    __slots__ = ("done", "held", "items", "reported", "target", "terminal")

    def __init__(self, target: tuple[Recorder, Ticket] | None) -> None:
        self.target = target  # None once the stream is discarded: nothing to record or report
        self.items: dict[int, Any] = {}  # the output items seen, by index
        self.terminal: str | None = None  # the terminal event's type, once it arrived
        self.reported = False
        self.held = False  # while a peeked error awaits the tracker's decision
        self.done = False

    def completes(self, event: ResponseStreamEvent) -> Recorder | None:
        """
        Feed *event*; if it is the terminal one, record the response and return the tracker to flush.
        The output recorded is the terminal response's, or (a server left it empty) the items seen.
        """
        kind = getattr(event, "type", None)
        if kind == "response.output_item.done":
            self.items[getattr(event, "output_index", len(self.items))] = getattr(event, "item", None)
            return None
        if kind not in TERMINAL_EVENTS or self.terminal is not None:
            return None
        self.terminal = kind
        if self.target is None:
            return None
        response = getattr(event, "response", None)
        output = list(getattr(response, "output", None) or ())
        if not output and self.items:
            output = [self.items[i] for i in sorted(self.items)]
        tracker, ticket = self.target
        tracker.observe(ticket, response, output)
        return tracker

    def end(self) -> None:
        """The stream's iteration stopped or its response was closed, whichever comes first."""
        self.done = True
        if self.held or self.reported or self.target is None:
            return
        self.reported = True
        if self.terminal is None:
            self.target[0].abandoned(self.target[1])

    def release(self) -> None:
        """Stop holding `end` back, and report at once if the stream has already ended."""
        self.held = False
        if self.done:
            self.end()

    def refusal(self, first: object, response: Any) -> BaseException | None:
        """The error the peeked *first* event (None: there was none) is or carries; without one, `release`."""
        error = first if isinstance(first, BaseException) else _error_event(first, response)
        if error is None:
            self.release()
        return error


class TrackedStream(Stream[ResponseStreamEvent]):
    """A ``Stream`` of Responses events that records the response it carries."""

    _call: _Call | None = None

    def _bind(self, tracker: Recorder, ticket: Ticket) -> None:
        call = self._call = _Call((tracker, ticket))
        close = self.response.close

        def closed() -> None:
            try:
                close()
            finally:
                call.end()

        self.response.close = closed  # type: ignore[method-assign]

    def __stream__(self) -> Iterator[ResponseStreamEvent]:
        call = self._call or _Call(None)
        try:
            for event in super().__stream__():
                tracker = call.completes(event)
                if tracker is not None:
                    tracker.flush()
                yield event
        finally:
            call.end()

    def _peek(self) -> BaseException | None:
        """
        Read the first event now; return the error it is or carries, if any. After an error the stream
        is counted nowhere until the tracker decides: `_discard` (it recovers) or `_release`.
        """
        call = self._call or _Call(None)
        call.held = True
        first: ResponseStreamEvent | BaseException | None
        try:
            first = next(self._iterator, None)
        except Exception as caught:  # noqa: BLE001 - an error event, raised by the SDK
            first = caught
        self._iterator = _replay(first, self._iterator)
        return call.refusal(first, self.response)

    def _discard(self) -> None:
        """Close a refused stream without counting it anywhere."""
        if self._call is not None:
            self._call.target = None
        self.close()

    def _release(self) -> None:
        """Count a stream whose first-event error is the caller's, as if it had ended now."""
        if self._call is not None:
            self._call.release()


class AsyncTrackedStream(AsyncStream[ResponseStreamEvent]):
    """An ``AsyncStream`` of Responses events that records the response it carries."""

    _call: _Call | None = None

    def _bind(self, tracker: Recorder, ticket: Ticket) -> None:
        call = self._call = _Call((tracker, ticket))
        aclose = self.response.aclose

        async def closed() -> None:
            try:
                await aclose()
            finally:
                call.end()

        self.response.aclose = closed  # type: ignore[method-assign]

    async def __stream__(self) -> AsyncIterator[ResponseStreamEvent]:
        call = self._call or _Call(None)
        try:
            async for event in super().__stream__():
                tracker = call.completes(event)
                if tracker is not None:
                    await tracker.aflush()
                yield event
        finally:
            call.end()

    async def _peek(self) -> BaseException | None:
        """Async twin of `TrackedStream._peek`."""
        call = self._call or _Call(None)
        call.held = True
        first: ResponseStreamEvent | BaseException | None
        try:
            first = await anext(self._iterator, None)
        except Exception as caught:  # noqa: BLE001 - an error event, raised by the SDK
            first = caught
        self._iterator = _areplay(first, self._iterator)
        return call.refusal(first, self.response)

    async def _discard(self) -> None:
        """Async twin of `TrackedStream._discard`."""
        if self._call is not None:
            self._call.target = None
        await self.close()

    async def _release(self) -> None:
        """Async twin of `TrackedStream._release`."""
        if self._call is not None:
            self._call.release()


def _error_event(event: object, response: Any) -> openai.APIError | None:
    """An ``error`` event (OpenAI's in-stream shape) as the ``APIError`` it stands for, else None."""
    if getattr(event, "type", None) != "error":
        return None
    body = {key: getattr(event, key, None) for key in ("message", "code", "param")}
    message = body["message"] if isinstance(body["message"], str) else "An error occurred during streaming"
    return openai.APIError(message, response.request, body=body)


def _replay(
    first: ResponseStreamEvent | BaseException | None, rest: Iterator[ResponseStreamEvent]
) -> Iterator[ResponseStreamEvent]:
    """*first* (an event, an error raised by the first ``next()``, or None: no event), then *rest*."""
    if isinstance(first, BaseException):
        raise first
    if first is not None:
        yield first
    yield from rest


async def _areplay(
    first: ResponseStreamEvent | BaseException | None, rest: AsyncIterator[ResponseStreamEvent]
) -> AsyncIterator[ResponseStreamEvent]:
    """Async twin of `_replay`."""
    if isinstance(first, BaseException):
        raise first
    if first is not None:
        yield first
    async for event in rest:
        yield event
