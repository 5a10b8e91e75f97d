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

    def _observe(self, ticket: Ticket, response: object, output: Sequence[Any] | None = None) -> None: ...

    def _flush(self) -> None: ...

    async def _aflush(self) -> None: ...

    def _abandoned(self, ticket: Ticket | None) -> None: ...


class TrackedStream(Stream[ResponseStreamEvent]):
    """A ``Stream`` of Responses events that records the response it carries."""

    _anchortrack: tuple[Recorder, Ticket] | None = None
    _refused = False

    def _bind(self, tracker: Recorder, ticket: Ticket) -> None:
        self._anchortrack = (tracker, ticket)

    def __stream__(self) -> Iterator[ResponseStreamEvent]:
        recorder = StreamRecorder()
        started = False
        try:
            for event in super().__stream__():
                started = True
                final = recorder.feed(event)
                if final is not None and self._anchortrack is not None:
                    tracker, ticket = self._anchortrack
                    tracker._observe(ticket, final[0], final[1])
                    tracker._flush()
                yield event
        except Exception:
            self._refused = not started  # refused before any event: no response to record
            raise
        finally:
            if recorder.terminal is None and self._anchortrack is not None and not self._refused:
                self._anchortrack[0]._abandoned(self._anchortrack[1])

    def _peek(self) -> BaseException | None:
        """Read the first event now; return the error it is or carries, if any."""
        try:
            first = next(self._iterator)
        except StopIteration:
            return None
        except Exception as error:  # noqa: BLE001 - an error event, raised by the SDK
            self._iterator = _raising(error)
            return error
        self._iterator = _prepend(first, self._iterator)
        return _error_event(first, self.response)

    def _discard(self) -> None:
        """Close a refused stream without counting it anywhere."""
        self._anchortrack = None
        self._refused = True
        self.close()


class AsyncTrackedStream(AsyncStream[ResponseStreamEvent]):
    """An ``AsyncStream`` of Responses events that records the response it carries."""

    _anchortrack: tuple[Recorder, Ticket] | None = None
    _refused = False

    def _bind(self, tracker: Recorder, ticket: Ticket) -> None:
        self._anchortrack = (tracker, ticket)

    async def __stream__(self) -> AsyncIterator[ResponseStreamEvent]:
        recorder = StreamRecorder()
        started = False
        try:
            async for event in super().__stream__():
                started = True
                final = recorder.feed(event)
                if final is not None and self._anchortrack is not None:
                    tracker, ticket = self._anchortrack
                    tracker._observe(ticket, final[0], final[1])
                    await tracker._aflush()
                yield event
        except Exception:
            self._refused = not started
            raise
        finally:
            if recorder.terminal is None and self._anchortrack is not None and not self._refused:
                self._anchortrack[0]._abandoned(self._anchortrack[1])

    async def _peek(self) -> BaseException | None:
        """Async twin of `TrackedStream._peek`."""
        try:
            first = await self._iterator.__anext__()
        except StopAsyncIteration:
            return None
        except Exception as error:  # noqa: BLE001 - an error event, raised by the SDK
            self._iterator = _araising(error)
            return error
        self._iterator = _aprepend(first, self._iterator)
        return _error_event(first, self.response)

    async def _discard(self) -> None:
        """Async twin of `TrackedStream._discard`."""
        self._anchortrack = None
        self._refused = True
        await self.close()


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
