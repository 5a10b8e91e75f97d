"""
Wrapping an ``OpenAI`` / ``AsyncOpenAI`` client (the I/O shells).

`wrap` returns a shallow copy of the client whose class is a subclass of the
original's, so ``isinstance`` holds and typed code and frameworks accept it.
The copy carries every attribute of the original — every constructor option,
private ones such as ``_strict_response_validation`` included, and any the SDK
adds later — and shares its connection pool; only the cached resource
properties (``responses``, ``beta``, ``with_raw_response``, ...) are dropped, so
they are built again for the copy. A tracer's patches on the original's
resources (``client.responses.create = traced``, as langsmith's and
braintrust's ``wrap_openai`` do) are carried over to the copy's, pointed at
it (`carry_patches`, in `anchortrack._patches`); ``with_options()`` and ``copy()`` carry them too. The
original is untouched.

An error the SDK raises through the wrapped client is re-raised as it is,
with anchortrack's own frames taken out of its traceback (`_trimmed`).

Two public seams are used:

* ``client.responses`` (and ``client.beta.responses``, where the SDK has it)
  is a subclass of the SDK's resource whose ``create`` (and ``parse``) plan the
  call *before* the SDK serializes anything, so a chained call only serializes
  its delta. ``stream()`` and the ``with_raw_response`` /
  ``with_streaming_response`` forms call these.
* ``client.post`` attaches the recorder to the one ``POST /responses`` that a
  planned call makes (a ``post_parser`` for parsed responses, a
  ``Stream`` subclass for event streams).

Every overridden method carries the SDK's own signature, docstring and
overloads (see `_mirror`), taken from the installed SDK when the class is
built.
"""

from __future__ import annotations

import functools
import inspect
import os
import types
import typing
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from functools import cached_property
from typing import Any, TypeVar

import openai
from openai import AsyncStream, Stream
from openai.resources.beta import AsyncBeta, Beta
from openai.resources.responses import AsyncResponses, Responses

from . import _otel
from ._flow import Ticket
from ._fork import ForkSafeLock
from ._hashing import Scope
from ._mode import Mode, coerce
from ._patches import TRACKER_ATTR, carry_patches, clone, is_cached
from ._stream import AsyncTrackedStream, TrackedStream
from ._tracker import Tracker, sent_streams
from ._websocket import connect_tracked
from .stores._base import AnchorStore
from .stores._open import coerce_store


ClientT = TypeVar("ClientT", openai.OpenAI, openai.AsyncOpenAI)
FuncT = TypeVar("FuncT", bound=Callable[..., Any])

_RESPONSES_PATH = "/responses"


def wrap(
    client: ClientT,
    *,
    store: AnchorStore | str | None = None,
    mode: Mode | str | None = None,
    namespace: str | None = None,
    record_incomplete: bool = False,
    store_timeout: float = 1.0,
    scope_by_api_key: bool = True,
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
        store_timeout: Seconds a store call may take (sync or async) before
            anchortrack gives up on it and sends the request in full; also the
            most the anchor write after a response may delay handing it back
            (a write that misses it waits in a bounded backlog).
        scope_by_api_key: Keep anchors apart per API key (the default): a
            keyed digest of the client's API key, never the key itself, is
            part of the scope, so clients with different keys sharing a
            store never share anchors. Pass False to keep using anchors
            across a key rotation (then separate tenants with *namespace*).

    Returns:
        A client of the same class as *client*, with every option of it
        (private ones included) and sharing its connection pool.
        ``with_options()`` and ``copy()`` on it do what the SDK's do and keep
        tracking, with the same tracker. Wrapping a client that `wrap` made
        returns it unchanged (the same client, the same tracker).

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
    existing = client.__dict__.get(TRACKER_ATTR)
    if isinstance(existing, Tracker):
        _check_rewrap(
            existing, store, coerced_mode, namespace, record_incomplete, store_timeout, scope_by_api_key
        )
        return client
    resolved = coerce_store(store) if store is not None else None
    tracker = Tracker(
        resolved,
        mode=coerced_mode,
        namespace=namespace,
        record_incomplete=record_incomplete,
        store_timeout=store_timeout,
        scope_by_api_key=scope_by_api_key,
    )
    base = _untracked_class(type(client))
    tracked: ClientT = clone(client, _tracked_class(base, is_async=is_async))
    setattr(tracked, TRACKER_ATTR, tracker)
    carry_patches(client, tracked)
    return tracked


def _check_rewrap(
    tracker: Tracker,
    store: object,
    mode: Mode | None,
    namespace: str | None,
    record_incomplete: bool,
    store_timeout: float,
    scope_by_api_key: bool = True,
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
        "store_timeout": store_timeout != 1.0 and store_timeout != tracker.store_timeout,
        "scope_by_api_key": not scope_by_api_key and tracker.scope_by_api_key,
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
    found = getattr(client, TRACKER_ATTR, None)
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
    on the next await (the tracker's ``aflush``).
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
        _otel.sent()
        if self.inner is not None:
            parsed = self.inner(parsed)
        if isinstance(parsed, (TrackedStream, AsyncTrackedStream)):
            parsed._bind(self.tracker, self.ticket)
            built = sent_streams.get()
            if built is not None:
                built.append(parsed)
        elif not isinstance(parsed, (Stream, AsyncStream)):
            self.tracker.observe(self.ticket, parsed)
            if self.is_sync:
                self.tracker.flush()
        return parsed


def _observed(path: str, kwargs: dict[str, Any], stream_cls: type[Any]) -> dict[str, Any]:
    """The ``post`` arguments with the pending recorder attached, if any."""
    pending = _pending.get()
    if pending is None or path.partition("?")[0] != _RESPONSES_PATH:
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
        out["stream_cls"] = _stream_class(kwargs.get("stream_cls"), stream_cls)
    return out


_stream_classes: dict[tuple[type[Any], Any], type[Any]] = {}


def _stream_class(requested: Any, tracked: type[Any]) -> Any:
    """
    The tracked stream class for the ``stream_cls`` the SDK asked for.

    ``Stream[E]`` becomes a tracked stream that yields ``E`` (the beta resource
    streams beta events); a class anchortrack does not know is kept, and that
    response is then not recorded.
    """
    if requested is None:
        return tracked
    generic = typing.get_origin(requested)
    args = typing.get_args(requested)
    if generic not in (Stream, AsyncStream) or len(args) != 1:
        return requested
    (event,) = args
    if typing.get_args(tracked.__orig_bases__[0]) == args:
        return tracked
    key = (tracked, event)
    cls = _stream_classes.get(key)
    if cls is None:
        # The SDK reads the event type from ``__orig_bases__``.
        namespace = {"__orig_bases__": (generic[event],), "__module__": tracked.__module__}
        cls = types.new_class(tracked.__name__, (tracked,), exec_body=lambda ns: ns.update(namespace))
        cls.__qualname__ = tracked.__qualname__
        _stream_classes[key] = cls
    return cls


_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _trimmed(error: BaseException) -> BaseException:
    """
    *error* with anchortrack's frames taken out of its traceback, if the SDK raised it.

    The caller's traceback then shows the entry point (``create``) and the
    SDK's frames, as unwrapped; the exception itself is unchanged. An error
    anchortrack raised itself keeps every frame.
    """
    frames: list[types.TracebackType] = []
    tb = error.__traceback__
    while tb is not None:
        frames.append(tb)
        tb = tb.tb_next
    if not frames or _ours(frames[-1]):
        return error
    kept: types.TracebackType | None = None
    for frame in reversed(frames):
        if not _ours(frame):
            kept = types.TracebackType(kept, frame.tb_frame, frame.tb_lasti, frame.tb_lineno)
    return error.with_traceback(kept)


def _ours(tb: types.TracebackType) -> bool:
    return tb.tb_frame.f_code.co_filename.startswith(_PACKAGE)


def _create(resource: Any, method: Callable[..., Any], params: dict[str, Any]) -> Any:
    """The tracked ``Responses.create`` / ``parse``."""
    client = resource._client
    tracker = client.__dict__.get(TRACKER_ATTR)
    if tracker is None:
        return method(**params)

    def send(body: Mapping[str, Any], ticket: Ticket | None) -> Any:
        token = _pending.set((tracker, ticket) if ticket is not None else None)
        try:
            return method(**body)
        finally:
            _pending.reset(token)

    try:
        return tracker.call(params, lambda: _scope(client, tracker), send)
    except Exception as error:  # noqa: BLE001 - re-raised as it is, with fewer frames
        raise _trimmed(error)  # noqa: B904 - the same exception: cause and context unchanged


async def _acreate(resource: Any, method: Callable[..., Any], params: dict[str, Any]) -> Any:
    """The tracked ``AsyncResponses.create`` / ``parse``."""
    client = resource._client
    tracker = client.__dict__.get(TRACKER_ATTR)
    if tracker is None:
        return await method(**params)

    async def send(body: Mapping[str, Any], ticket: Ticket | None) -> Any:
        token = _pending.set((tracker, ticket) if ticket is not None else None)
        try:
            return await method(**body)
        finally:
            _pending.reset(token)

    try:
        return await tracker.acall(params, lambda: _scope(client, tracker), send)
    except Exception as error:  # noqa: BLE001 - re-raised as it is, with fewer frames
        raise _trimmed(error)  # noqa: B904 - the same exception: cause and context unchanged


def _mirror(source: Callable[..., Any]) -> Callable[[FuncT], FuncT]:
    """
    Give an override the SDK method's identity: name, docstring, annotations.

    ``__wrapped__`` makes `inspect.signature` report the SDK's exact signature,
    and the SDK's ``__module__`` / ``__qualname__`` make
    ``typing.get_overloads`` find its overloads. Taken from the installed SDK
    when the class is built, so they follow whatever version is installed.
    """

    def apply(func: FuncT) -> FuncT:
        functools.update_wrapper(func, source)
        return func

    return apply


def _connect(resource: Any, method: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The tracked ``responses.connect()`` (WebSocket mode; see `anchortrack._websocket`)."""
    client = resource._client
    tracker = client.__dict__.get(TRACKER_ATTR)
    if tracker is None:
        return method(*args, **kwargs)
    return connect_tracked(tracker, lambda: _scope(client, tracker), method, args, kwargs)


class _TrackedResponses(Responses):
    """``client.responses`` of a tracked sync client."""

    @_mirror(Responses.create)
    def create(self, **params: Any) -> Any:
        return _create(self, super().create, params)

    @_mirror(Responses.parse)
    def parse(self, **params: Any) -> Any:
        return _create(self, super().parse, params)

    @_mirror(Responses.connect)
    def connect(self, *args: Any, **kwargs: Any) -> Any:
        return _connect(self, super().connect, args, kwargs)


class _AsyncTrackedResponses(AsyncResponses):
    """``client.responses`` of a tracked async client."""

    @_mirror(AsyncResponses.create)
    async def create(self, **params: Any) -> Any:
        return await _acreate(self, super().create, params)

    @_mirror(AsyncResponses.parse)
    async def parse(self, **params: Any) -> Any:
        return await _acreate(self, super().parse, params)

    @_mirror(AsyncResponses.connect)
    def connect(self, *args: Any, **kwargs: Any) -> Any:
        return _connect(self, super().connect, args, kwargs)


def _beta_resources() -> tuple[type[Any], type[Any]] | None:
    """The SDK's beta ``Responses`` / ``AsyncResponses`` (openai 3.x and late 2.x)."""
    try:
        from openai.resources.beta import responses
    except ImportError:  # pragma: no cover - depends on the installed SDK
        return None
    return responses.Responses, responses.AsyncResponses


def _beta_classes() -> tuple[type[Any], type[Any]] | None:
    """
    The tracked ``client.beta`` classes (sync, async), if the SDK has beta Responses.

    ``client.beta.responses.create`` posts to the same ``/responses`` endpoint
    (with ``?beta=true`` and an ``openai-beta`` header) and its responses chain
    by ``previous_response_id`` like the stable ones, so it is planned,
    recorded and recovered exactly as ``client.responses.create`` is (one
    tracker serves both, so a conversation may move between them). Its other
    methods are the SDK's, untouched: ``retrieve``, ``cancel``, ``delete`` and
    ``input_items`` read or change stored responses and send no history;
    ``compact`` returns a compacted item list rather than a response to chain
    from; ``connect()`` is passed through untouched (``client.responses.connect()``
    is the tracked WebSocket mode: `anchortrack._websocket`).
    """
    found = _beta_resources()
    if found is None:
        return None
    BetaResponses, AsyncBetaResponses = found

    class _TrackedBetaResponses(BetaResponses):  # type: ignore[misc,valid-type]
        """``client.beta.responses`` of a tracked sync client."""

        @_mirror(BetaResponses.create)
        def create(self, **params: Any) -> Any:
            return _create(self, super().create, params)

    class _AsyncTrackedBetaResponses(AsyncBetaResponses):  # type: ignore[misc,valid-type]
        """``client.beta.responses`` of a tracked async client."""

        @_mirror(AsyncBetaResponses.create)
        async def create(self, **params: Any) -> Any:
            return await _acreate(self, super().create, params)

    class _TrackedBeta(Beta):
        @_mirror_property(Beta, "responses")
        def responses(self) -> Any:
            return _TrackedBetaResponses(self._client)

    class _AsyncTrackedBeta(AsyncBeta):
        @_mirror_property(AsyncBeta, "responses")
        def responses(self) -> Any:
            return _AsyncTrackedBetaResponses(self._client)

    for cls, base in ((_TrackedBeta, Beta), (_AsyncTrackedBeta, AsyncBeta)):
        cls.__name__, cls.__qualname__, cls.__doc__ = base.__name__, base.__qualname__, base.__doc__
        cls.__module__ = base.__module__
    return _TrackedBeta, _AsyncTrackedBeta


def _mirror_property(owner: type[Any], name: str) -> Callable[[Callable[[Any], Any]], Any]:
    """A cached property overriding *owner*'s *name*, with its docstring."""

    def apply(func: Callable[[Any], Any]) -> Any:
        source = inspect.getattr_static(owner, name, None)
        getter = getattr(source, "func", None) or getattr(source, "fget", None)
        if getter is not None:
            func.__doc__ = getter.__doc__
        prop = cached_property(func)
        prop.__doc__ = func.__doc__
        return prop

    return apply


_BETA = _beta_classes()


def _copied(source: Any, new: Any) -> Any:
    """Carry the tracker over to a client made by ``copy()``/``with_options()``."""
    setattr(new, TRACKER_ATTR, source.__dict__.get(TRACKER_ATTR))
    carry_patches(source, new)
    return new


def _make_sync_class(base: type[Any]) -> type[Any]:
    class Tracked(base):  # type: ignore[misc]
        @_mirror_property(base, "responses")
        def responses(self) -> Responses:
            return _TrackedResponses(self)

        def post(self, path: str, **kwargs: Any) -> Any:
            return super().post(path, **_observed(path, kwargs, TrackedStream))

        @_mirror(base.copy)
        def copy(self, *args: Any, **kwargs: Any) -> Any:
            return _copied(self, super().copy(*args, **kwargs))

        @_mirror(base.with_options)
        def with_options(self, *args: Any, **kwargs: Any) -> Any:
            return _copied(self, super().with_options(*args, **kwargs))

        if _BETA is not None and is_cached(base, "beta"):

            @_mirror_property(base, "beta")
            def beta(self) -> Any:
                return _BETA[0](self)

    return Tracked


def _make_async_class(base: type[Any]) -> type[Any]:
    class Tracked(base):  # type: ignore[misc]
        @_mirror_property(base, "responses")
        def responses(self) -> AsyncResponses:
            return _AsyncTrackedResponses(self)

        async def post(self, path: str, **kwargs: Any) -> Any:
            return await super().post(path, **_observed(path, kwargs, AsyncTrackedStream))

        @_mirror(base.copy)
        def copy(self, *args: Any, **kwargs: Any) -> Any:
            return _copied(self, super().copy(*args, **kwargs))

        @_mirror(base.with_options)
        def with_options(self, *args: Any, **kwargs: Any) -> Any:
            return _copied(self, super().with_options(*args, **kwargs))

        if _BETA is not None and is_cached(base, "beta"):

            @_mirror_property(base, "beta")
            def beta(self) -> Any:
                return _BETA[1](self)

    return Tracked


_classes: dict[type[Any], type[Any]] = {}
_classes_lock = ForkSafeLock()
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
