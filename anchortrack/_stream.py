"""Tracked event streams: hooks on the SDK's ``Stream`` / ``AsyncStream`` (its ``_iterator`` and its
response's close) record the response at its terminal event; a stream that ends without one is
``stream_abandoned``. A chained stream is *peeked* (its first event read at once), so an in-stream refusal is
recovered from like an HTTP one. A stream class (a tracer's) that bypasses ``_iterator`` goes through
unrecorded, with one warning."""

from __future__ import annotations

import warnings
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any

import openai
from openai import AsyncStream, Stream

from ._socket import TERMINAL_EVENTS


if TYPE_CHECKING:
    from ._calls import Calls
    from ._flow import Ticket


class _Call:
    """The call a tracked stream carries the response of: records it, or reports it abandoned, once."""

    __slots__ = ("done", "first", "held", "items", "reported", "stream", "target", "terminal")

    def __init__(self, stream: Any, tracker: Calls, ticket: Ticket) -> None:
        self.stream = stream
        self.target: tuple[Calls, Ticket] | None = (tracker, ticket)  # None once discarded
        self.items: dict[int, Any] = {}  # the output items seen, by index
        self.terminal: str | None = None  # the terminal event's type, once it arrived
        self.reported = False
        self.held = False  # while a peeked error awaits the tracker's decision
        self.done = False
        self.first: object = None  # the peeked first event

    def completes(self, event: Any) -> Calls | None:
        """Feed *event*; if terminal, record its response (or the items seen); return the tracker to flush."""
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

    def refusal(self, first: object) -> BaseException | None:
        """The error the peeked *first* event (None: there was none) is or carries; without one, `release`."""
        self.first = first
        if isinstance(first, BaseException):
            return first
        if getattr(first, "type", None) != "error":
            self.release()
            return None
        # OpenAI's in-stream error event, as the ``APIError`` it stands for
        body = {key: getattr(first, key, None) for key in ("message", "code", "param")}
        message = body["message"]
        if not isinstance(message, str):
            message = "An error occurred during streaming"
        return openai.APIError(message, self.stream.response.request, body=body)


class StreamCall(_Call):
    """The call of a sync ``Stream``; `_peek`, `_discard` and `_release` are the tracker's steps."""

    __slots__ = ()

    def __init__(self, stream: Stream[Any], tracker: Calls, ticket: Ticket) -> None:
        super().__init__(stream, tracker, ticket)
        stream._iterator = self._events(stream._iterator)
        close = stream.response.close

        def closed() -> None:
            try:
                close()
            finally:
                self.end()

        stream.response.close = closed  # type: ignore[method-assign]

    def _events(self, events: Iterator[Any]) -> Iterator[Any]:
        try:
            for event in events:
                tracker = self.completes(event)
                if tracker is not None:
                    tracker.flush()
                yield event
        finally:
            self.end()

    def _peek(self) -> BaseException | None:
        """Read the first event now; return the error it is or carries, held until `_discard`/`_release`."""
        self.held = True
        try:
            first = next(self.stream._iterator, None)
        except Exception as caught:  # noqa: BLE001 - an error event, raised by the SDK
            first = caught
        self.stream._iterator = _replay(first, self.stream._iterator)
        return self.refusal(first)

    def _discard(self) -> None:
        self.target = None
        self.stream.close()

    #: Count a stream whose first-event error is the caller's, as if it had ended now.
    _release = _Call.release


class AsyncStreamCall(_Call):
    """The call of an ``AsyncStream``: the async twin of `StreamCall`."""

    __slots__ = ()

    def __init__(self, stream: AsyncStream[Any], tracker: Calls, ticket: Ticket) -> None:
        super().__init__(stream, tracker, ticket)
        stream._iterator = self._events(stream._iterator)
        aclose = stream.response.aclose

        async def closed() -> None:
            try:
                await aclose()
            finally:
                self.end()

        stream.response.aclose = closed  # type: ignore[method-assign]

    async def _events(self, events: AsyncIterator[Any]) -> AsyncIterator[Any]:
        try:
            async for event in events:
                tracker = self.completes(event)
                if tracker is not None:
                    await tracker.aflush()
                yield event
        finally:
            self.end()

    async def _peek(self) -> BaseException | None:
        self.held = True
        try:
            first = await anext(self.stream._iterator, None)
        except Exception as caught:  # noqa: BLE001 - an error event, raised by the SDK
            first = caught
        self.stream._iterator = _areplay(first, self.stream._iterator)
        return self.refusal(first)

    async def _discard(self) -> None:
        self.target = None
        await self.stream.close()

    async def _release(self) -> None:
        self.release()


def track(stream: object, tracker: Calls, ticket: Ticket) -> _Call | None:
    """Track *stream*, a ``Stream`` / ``AsyncStream`` of the SDK's or of a tracer's subclass; return its call.
    None (warned once per stream class) if it does not iterate through the SDK's ``_iterator``."""
    base = AsyncStream if isinstance(stream, AsyncStream) else Stream
    cls = type(stream)
    missing = [
        f"{base.__name__}.{name}"
        for name in ("__iter__", "__next__", "__aiter__", "__anext__")
        if name in vars(base) and getattr(cls, name, None) is not vars(base)[name]
    ]
    if "_iterator" not in vars(stream):
        missing.insert(0, f"{base.__name__}._iterator")
    if missing:
        _warn_unrecorded(cls, missing)
        return None
    if isinstance(stream, AsyncStream):
        return AsyncStreamCall(stream, tracker, ticket)
    return StreamCall(stream, tracker, ticket) if isinstance(stream, Stream) else None


#: The stream classes warned about, by name (a tracer may make a class per request, as logfire does).
_warned: set[str] = set()


def _warn_unrecorded(cls: type[Any], missing: list[str]) -> None:
    """Warn, once per stream class, that its streams go through unrecorded, and why."""
    name = f"{cls.__module__}.{cls.__qualname__}"
    if name in _warned:
        return
    _warned.add(name)
    what = ", ".join(missing)
    warnings.warn(
        f"anchortrack: streamed responses of {name} are not recorded "
        f"({what} of the openai SDK not there to attach to): such calls go through as they are, and the "
        "next call of the conversation is sent in full.",
        RuntimeWarning,
        stacklevel=2,
    )


def _replay(first: object, rest: Iterator[Any]) -> Iterator[Any]:
    """*first* (an event, an error raised by the first ``next()``, or None: no event), then *rest*."""
    if isinstance(first, BaseException):
        raise first
    if first is not None:
        yield first
    yield from rest


async def _areplay(first: object, rest: AsyncIterator[Any]) -> AsyncIterator[Any]:
    if isinstance(first, BaseException):
        raise first
    if first is not None:
        yield first
    async for event in rest:
        yield event
