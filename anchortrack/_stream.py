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
``flush()``, the async one with ``await aflush()``.

A chained stream is *peeked* before the caller gets it (`TrackedStream._peek`):
its first event is read at once, so that a server that refuses a stale anchor
inside the stream (HTTP 200, then an error event, as llama-stack does) can be
recovered from like an HTTP refusal. The first event is then handed to the
caller as if it had never been read (an error, raised on the first ``next()``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import openai
from openai import AsyncStream, Stream
from openai.types.responses import ResponseStreamEvent

from ._recorder import StreamRecorder


if TYPE_CHECKING:
    from ._flow import Ticket


class Recorder(Protocol):
    """What a tracked stream needs from the tracker (`anchortrack._tracker.Tracker`)."""

    def observe(self, ticket: Ticket, response: object, output: Sequence[Any] | None = None) -> None: ...

    def flush(self) -> None: ...

    async def aflush(self) -> None: ...

    def abandoned(self, ticket: Ticket | None) -> None: ...


class _Ending:
    """
    Reports a bound stream that ends without its terminal event, once.

    It ends when its iteration stops, or when its HTTP response is closed —
    by ``close()``, a ``with`` block's exit, or ``responses.stream()``'s
    manager — whichever comes first; never later, at garbage collection.
    """

    __slots__ = ("done", "recorder", "reported", "target")

    def __init__(self, target: tuple[Recorder, Ticket] | None) -> None:
        self.target = target
        self.recorder = StreamRecorder()
        self.reported = False
        self.done = False

    def end(self) -> None:
        self.done = True
        if self.reported or self.target is None:
            return
        self.reported = True
        if self.recorder.terminal is None:
            self.target[0].abandoned(self.target[1])


class TrackedStream(Stream[ResponseStreamEvent]):
    """A ``Stream`` of Responses events that records the response it carries."""

    _anchortrack: tuple[Recorder, Ticket] | None = None
    _ending: _Ending | None = None

    def _bind(self, tracker: Recorder, ticket: Ticket) -> None:
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
                    tracker.observe(ticket, final[0], final[1])
                    tracker.flush()
                yield event
        finally:
            ending.end()

    def _peek(self) -> BaseException | None:
        """
        Read the first event now; return the error it is or carries, if any.

        After an error, the stream is counted nowhere until the tracker
        decides: `_discard` (it recovers) or `_release` (the error is the
        caller's).
        """
        held = _hold(self._ending)
        try:
            first = next(self._iterator)
        except StopIteration:
            error = None
        except Exception as caught:  # noqa: BLE001 - an error event, raised by the SDK
            error = caught
            self._iterator = _raising(caught)
        else:
            self._iterator = _prepend(first, self._iterator)
            error = _error_event(first, self.response)
        if error is None:
            _release(self._ending, held)
        return error

    def _discard(self) -> None:
        """Close a refused stream without counting it anywhere."""
        self._anchortrack = None
        self.close()

    def _release(self) -> None:
        """Count a stream whose first-event error is the caller's, as if it had ended now."""
        _release(self._ending, held=True)


class AsyncTrackedStream(AsyncStream[ResponseStreamEvent]):
    """An ``AsyncStream`` of Responses events that records the response it carries."""

    _anchortrack: tuple[Recorder, Ticket] | None = None
    _ending: _Ending | None = None

    def _bind(self, tracker: Recorder, ticket: Ticket) -> None:
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
                    tracker.observe(ticket, final[0], final[1])
                    await tracker.aflush()
                yield event
        finally:
            ending.end()

    async def _peek(self) -> BaseException | None:
        """Async twin of `TrackedStream._peek`."""
        held = _hold(self._ending)
        try:
            first = await self._iterator.__anext__()
        except StopAsyncIteration:
            error = None
        except Exception as caught:  # noqa: BLE001 - an error event, raised by the SDK
            error = caught
            self._iterator = _araising(caught)
        else:
            self._iterator = _aprepend(first, self._iterator)
            error = _error_event(first, self.response)
        if error is None:
            _release(self._ending, held)
        return error

    async def _discard(self) -> None:
        """Async twin of `TrackedStream._discard`."""
        self._anchortrack = None
        await self.close()

    async def _release(self) -> None:
        """Async twin of `TrackedStream._release`."""
        _release(self._ending, held=True)


def _hold(ending: _Ending | None) -> bool:
    """Keep *ending* from reporting for now; whether it was holding anything."""
    if ending is None or ending.reported:
        return False
    ending.reported = True
    return True


def _release(ending: _Ending | None, held: bool) -> None:
    """Let *ending* report again, and report at once if its stream has already ended."""
    if ending is None or not held:
        return
    ending.reported = False
    if ending.done:
        ending.end()


def _error_event(event: object, response: Any) -> openai.APIError | None:
    """An ``error`` event (OpenAI's in-stream shape) as the ``APIError`` it stands for, else None."""
    if getattr(event, "type", None) != "error":
        return None
    body = {key: getattr(event, key, None) for key in ("message", "code", "param")}
    message = body["message"] if isinstance(body["message"], str) else "An error occurred during streaming"
    return openai.APIError(message, response.request, body=body)


def _prepend(
    first: ResponseStreamEvent, rest: Iterator[ResponseStreamEvent]
) -> Iterator[ResponseStreamEvent]:
    yield first
    yield from rest


async def _aprepend(
    first: ResponseStreamEvent, rest: AsyncIterator[ResponseStreamEvent]
) -> AsyncIterator[ResponseStreamEvent]:
    yield first
    async for event in rest:
        yield event


def _raising(error: BaseException) -> Iterator[ResponseStreamEvent]:
    """A generator that raises *error* on the first ``next()``."""
    yield from ()
    raise error


async def _araising(error: BaseException) -> AsyncIterator[ResponseStreamEvent]:
    """An async generator that raises *error* on the first ``anext()``."""
    for _ in ():
        yield _
    raise error
