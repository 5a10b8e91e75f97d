"""
Wrapping an ``OpenAI`` / ``AsyncOpenAI`` client (the I/O shells).

`wrap` returns a copy of the client whose class is a subclass of the
original's, so ``isinstance`` holds and typed code and frameworks accept it.
The copy shares the original's connection pool; the original is untouched.

Two public seams are used:

* ``client.responses`` is a subclass of the SDK's ``Responses`` whose
  ``create`` and ``parse`` plan the call *before* the SDK serializes anything,
  so a chained call only serializes its delta. ``stream()`` and the
  ``with_raw_response`` / ``with_streaming_response`` forms call these.
* ``client.post`` attaches the recorder to the one ``POST /responses`` that a
  planned call makes (a ``post_parser`` for parsed responses, a
  ``Stream`` subclass for event streams).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from functools import cached_property
from typing import Any, TypeVar

import openai
from openai import AsyncStream, Stream
from openai.resources.responses import AsyncResponses, Responses

from ._flow import Ticket
from ._hashing import Scope
from ._mode import Mode, coerce
from ._stream import AsyncTrackedStream, TrackedStream
from ._tracker import Tracker, coerce_store
from .stores._base import AnchorStore


ClientT = TypeVar("ClientT", openai.OpenAI, openai.AsyncOpenAI)

_RESPONSES_PATH = "/responses"
_ATTR = "_anchortrack_tracker"


def wrap(
    client: ClientT,
    *,
    store: AnchorStore | str | None = None,
    mode: Mode | str | None = None,
    namespace: str | None = None,
    record_incomplete: bool = False,
    store_timeout: float = 1.0,
) -> ClientT:
    """
    Return a tracked copy of *client*.

    Args:
        client: An ``openai.OpenAI`` or ``openai.AsyncOpenAI`` (or subclass,
            e.g. ``AzureOpenAI``).
        store: Where anchors live: an `AnchorStore` (`MemoryStore`,
            `SQLiteStore`, `RedisStore`, or your own), or a store spec
            string opened with `anchortrack.stores.open_store` (``"memory"``:
            a new private memory store; ``"sqlite:PATH"``; ``"redis://…"``).
            Default: one bounded in-process `MemoryStore` shared by every
            client wrapped without ``store=`` in this process, so a sync and
            an async client continue each other's conversations; there,
            anchors are also kept apart by API key. Share a `SQLiteStore` or
            `RedisStore` to continue conversations across processes.
        mode: ``"chained"`` (default), ``"shadow"`` or ``"off"``. The
            ``ANCHORTRACK_MODE`` environment variable wins over this.
        namespace: Keep these anchors apart from other clients' anchors.
        record_incomplete: Anchor on ``incomplete`` responses too.
        store_timeout: Seconds an async store call may take before anchortrack
            gives up on it and sends the request in full.

    Returns:
        A client of the same class as *client*, sharing its connection pool.
        ``with_options()`` and ``copy()`` on it keep tracking, with the same
        store. Wrapping a client that `wrap` made returns it unchanged (the
        same client, the same tracker).

    Raises:
        TypeError: *client* is not an openai client; *store* is neither a
            store nor a store spec; *namespace* is not a string;
            *store_timeout* is not a number.
        ValueError: *mode* names no mode; *store_timeout* is not positive;
            *client* is already wrapped and other settings were asked for.
        ImportError: a ``redis://`` spec without the ``redis`` extra.
    """
    if isinstance(client, openai.AsyncOpenAI):
        is_async = True
    elif isinstance(client, openai.OpenAI):
        is_async = False
    else:
        raise TypeError(
            f"anchortrack.wrap() takes an openai.OpenAI or openai.AsyncOpenAI, not {type(client).__name__}"
        )
    coerced_mode = coerce(mode) if mode is not None else None
    if namespace is not None and not isinstance(namespace, str):
        raise TypeError(
            f"anchortrack.wrap(namespace=...) takes a string or None, not {type(namespace).__name__}"
        )
    if isinstance(store_timeout, bool) or not isinstance(store_timeout, (int, float)):
        raise TypeError(
            "anchortrack.wrap(store_timeout=...) takes seconds (a number), "
            f"not {type(store_timeout).__name__}"
        )
    if not store_timeout > 0:
        raise ValueError(f"anchortrack.wrap(store_timeout={store_timeout!r}): must be more than 0 seconds")
    existing = client.__dict__.get(_ATTR)
    if isinstance(existing, Tracker):
        _check_rewrap(existing, store, coerced_mode, namespace, record_incomplete, store_timeout)
        return client
    resolved = coerce_store(store) if store is not None else None
    tracker = Tracker(
        resolved,
        mode=coerced_mode,
        namespace=namespace,
        record_incomplete=record_incomplete,
        store_timeout=store_timeout,
    )
    base = _untracked_class(type(client))
    tracked = client.copy()
    tracked.__class__ = _tracked_class(base, is_async=is_async)
    setattr(tracked, _ATTR, tracker)
    return tracked


def _check_rewrap(
    tracker: Tracker,
    store: object,
    mode: Mode | None,
    namespace: str | None,
    record_incomplete: bool,
    store_timeout: float,
) -> None:
    """
    Refuse to wrap a wrapped client again with other settings.

    Settings left at their defaults ask for nothing; the existing tracker's
    are kept.

    Raises:
        ValueError: a setting differs from the existing tracker's.
    """
    asked = {
        "store": store is not None and store is not tracker.store,
        "mode": mode is not None and mode is not tracker.mode,
        "namespace": namespace is not None and namespace != tracker.namespace,
        "record_incomplete": record_incomplete and not tracker.record_incomplete,
        "store_timeout": store_timeout != 1.0 and store_timeout != tracker._guard.timeout,
    }
    differing = [name for name, differs in asked.items() if differs]
    if differing:
        raise ValueError(
            f"this client is already wrapped by anchortrack with other settings ({', '.join(differing)}); "
            "wrap the original, unwrapped client instead, or use anchortrack.tracker(client) "
            "to reach the existing tracker"
        )


def tracker(client: object) -> Tracker:
    """
    Return the tracker of a client made by `wrap`.

    Raises:
        TypeError: *client* was not made by `wrap`.
    """
    found = getattr(client, _ATTR, None)
    if not isinstance(found, Tracker):
        raise TypeError("this client is not tracked; make it with anchortrack.wrap()")
    return found


def _scope(client: Any, tracker: Tracker) -> Scope:
    return tracker.scope_for(client)


#: The recorder for the ``POST /responses`` the current planned call makes.
_pending: ContextVar[tuple[Tracker, Ticket] | None] = ContextVar("anchortrack_pending", default=None)


class _Observer:
    """
    A ``post_parser`` that hands the parsed result to the tracker.

    A sync client's response is written to the store at once; an async one's
    on the next await (the tracker's ``_aflush``).
    """

    __slots__ = ("inner", "is_sync", "ticket", "tracker")

    def __init__(
        self, tracker: Tracker, ticket: Ticket, inner: Callable[[Any], Any] | None, *, is_sync: bool
    ) -> None:
        self.tracker = tracker
        self.ticket = ticket
        self.inner = inner
        self.is_sync = is_sync

    def __call__(self, parsed: Any) -> Any:
        if self.inner is not None:
            parsed = self.inner(parsed)
        if isinstance(parsed, (TrackedStream, AsyncTrackedStream)):
            parsed._bind(self.tracker, self.ticket)
        elif not isinstance(parsed, (Stream, AsyncStream)):
            self.tracker._observe(self.ticket, parsed)
            if self.is_sync:
                self.tracker._flush()
        return parsed


def _observed(path: str, kwargs: dict[str, Any], stream_cls: type[Any]) -> dict[str, Any]:
    """The ``post`` arguments with the pending recorder attached, if any."""
    pending = _pending.get()
    if pending is None or path != _RESPONSES_PATH:
        return kwargs
    _pending.set(None)
    tracker, ticket = pending
    options = kwargs.get("options") or {}
    out = dict(kwargs)
    observer = _Observer(
        tracker, ticket, options.get("post_parser"), is_sync=not issubclass(stream_cls, AsyncStream)
    )
    out["options"] = {**options, "post_parser": observer}
    if kwargs.get("stream"):
        out["stream_cls"] = stream_cls
    return out


def _create(resource: Any, method: Callable[..., Any], params: dict[str, Any]) -> Any:
    """The tracked ``Responses.create`` / ``parse``."""
    client = resource._client
    tracker = client.__dict__.get(_ATTR)
    if tracker is None:
        return method(**params)

    def send(body: Mapping[str, Any], ticket: Ticket | None) -> Any:
        token = _pending.set((tracker, ticket) if ticket is not None else None)
        try:
            return method(**body)
        finally:
            _pending.reset(token)

    return tracker._call(params, lambda: _scope(client, tracker), send)


async def _acreate(resource: Any, method: Callable[..., Any], params: dict[str, Any]) -> Any:
    """The tracked ``AsyncResponses.create`` / ``parse``."""
    client = resource._client
    tracker = client.__dict__.get(_ATTR)
    if tracker is None:
        return await method(**params)

    async def send(body: Mapping[str, Any], ticket: Ticket | None) -> Any:
        token = _pending.set((tracker, ticket) if ticket is not None else None)
        try:
            return await method(**body)
        finally:
            _pending.reset(token)

    return await tracker._acall(params, lambda: _scope(client, tracker), send)


class _TrackedResponses(Responses):
    """``client.responses`` of a tracked sync client."""

    def create(self, **params: Any) -> Any:
        return _create(self, super().create, params)

    def parse(self, **params: Any) -> Any:
        return _create(self, super().parse, params)


class _AsyncTrackedResponses(AsyncResponses):
    """``client.responses`` of a tracked async client."""

    async def create(self, **params: Any) -> Any:
        return await _acreate(self, super().create, params)

    async def parse(self, **params: Any) -> Any:
        return await _acreate(self, super().parse, params)


def _copied(source: Any, new: Any) -> Any:
    """Carry the tracker over to a client made by ``copy()``/``with_options()``."""
    setattr(new, _ATTR, source.__dict__.get(_ATTR))
    return new


def _make_sync_class(base: type[Any]) -> type[Any]:
    class Tracked(base):  # type: ignore[misc]
        @cached_property
        def responses(self) -> Responses:
            return _TrackedResponses(self)

        def post(self, path: str, **kwargs: Any) -> Any:
            return super().post(path, **_observed(path, kwargs, TrackedStream))

        def copy(self, *args: Any, **kwargs: Any) -> Any:
            return _copied(self, super().copy(*args, **kwargs))

        with_options = copy

    return Tracked


def _make_async_class(base: type[Any]) -> type[Any]:
    class Tracked(base):  # type: ignore[misc]
        @cached_property
        def responses(self) -> AsyncResponses:
            return _AsyncTrackedResponses(self)

        async def post(self, path: str, **kwargs: Any) -> Any:
            return await super().post(path, **_observed(path, kwargs, AsyncTrackedStream))

        def copy(self, *args: Any, **kwargs: Any) -> Any:
            return _copied(self, super().copy(*args, **kwargs))

        with_options = copy

    return Tracked


_classes: dict[type[Any], type[Any]] = {}
_classes_lock = threading.Lock()
_BASE_ATTR = "_anchortrack_base"


def _untracked_class(cls: type[Any]) -> type[Any]:
    """The openai class a (possibly already tracked) client class derives from."""
    base: type[Any] = cls.__dict__.get(_BASE_ATTR, cls)
    return base


def _tracked_class(base: type[Any], *, is_async: bool) -> type[Any]:
    """Return (and cache) the tracked subclass of *base*."""
    with _classes_lock:
        cls = _classes.get(base)
        if cls is None:
            cls = (_make_async_class if is_async else _make_sync_class)(base)
            cls.__name__ = base.__name__
            cls.__qualname__ = base.__qualname__
            cls.__module__ = base.__module__
            setattr(cls, _BASE_ATTR, base)
            _classes[base] = cls
        return cls
