"""Wrapping an ``OpenAI`` / ``AsyncOpenAI`` client (the I/O shells): `wrap` returns a copy whose class
subclasses the original's (`anchortrack._patches`). ``client.responses`` plans ``create`` / ``parse`` before
the SDK serializes anything; ``client.post`` attaches the recorder to the one ``POST /responses`` a planned
call makes (through the private names `anchortrack._seams` checks). An error the SDK raises is re-raised as it
is, without anchortrack's frames in its traceback."""

from __future__ import annotations

import functools
import inspect
import os
import types
from collections.abc import Callable
from functools import cached_property
from typing import Any, TypeVar

import openai
from openai import AsyncStream, Stream
from openai.resources.beta import AsyncBeta, Beta
from openai.resources.responses import AsyncResponses, Responses

from . import _otel
from ._calls import Calls, sending
from ._fork import ForkSafeLock
from ._hashing import Scope
from ._mode import Mode
from ._patches import TRACKER_ATTR, adopt, clone, is_cached
from ._seams import missing_http, unattached
from ._settings import checked
from ._stream import track
from ._tracker import Tracker
from .stores._base import AnchorStore
from .stores._open import coerce_store


ClientT = TypeVar("ClientT", openai.OpenAI, openai.AsyncOpenAI)


def wrap(
    client: ClientT,
    *,
    store: AnchorStore | str | None = None,
    mode: Mode | str | None = None,
    namespace: str | None = None,
    record_incomplete: bool | None = None,
    store_timeout: float | None = None,
    scope_by_api_key: bool | None = None,
) -> ClientT:
    """
    Return a tracked copy of *client*.

    A setting left out (None) is its environment variable's value, if it has one, else its default; it
    asks for nothing when *client* is already wrapped.

    Args:
        client: An ``openai.OpenAI`` or ``openai.AsyncOpenAI`` (or subclass, e.g. ``AzureOpenAI``).
        store: Where anchors live: an `AnchorStore` (`MemoryStore`, `SQLiteStore`, `RedisStore`, or your
            own), or a store spec string opened with `anchortrack.stores.open_store` (``"memory"``: a new
            private memory store; ``"sqlite:PATH"``; ``"redis://…"``). Default: one bounded in-process
            `MemoryStore` shared by every client wrapped without ``store=`` in this process, so a sync and
            an async client continue each other's conversations. Share a `SQLiteStore` or `RedisStore` to
            continue them across processes.
        mode: ``"chained"`` (default), ``"shadow"`` or ``"off"``. The ``ANCHORTRACK_MODE`` environment
            variable wins over this.
        namespace: Keep these anchors apart from other clients' anchors.
        record_incomplete: Anchor on ``incomplete`` responses too (default False).
        store_timeout: Seconds a store call may take before anchortrack gives up on it and sends the
            request in full; also the most the anchor write after a response may delay handing it back
            (a write that misses it waits in a bounded backlog). Default 1 second.
        scope_by_api_key: Keep anchors apart per API key (a keyed digest of the key, never the key
            itself, is part of the scope; the default). Pass False to keep using anchors across a key
            rotation (then separate tenants with *namespace*).

    Returns:
        A client of the same class as *client*, with every option of it and sharing its connection pool.
        ``with_options()`` and ``copy()`` on it keep tracking with the same tracker. Wrapping a client
        that `wrap` made returns it unchanged.

    Raises:
        TypeError: *client* is not an openai client; *store* is neither a store nor a store spec;
            *namespace* is not a string; *store_timeout* is not a number.
        ValueError: *mode* names no mode; *store_timeout* is not a finite number above 0; *client* is
            already wrapped and other settings were asked for.
        ImportError: a ``redis://`` spec without the ``redis`` extra.
    """
    if not isinstance(client, (openai.OpenAI, openai.AsyncOpenAI)):
        raise TypeError(
            f"anchortrack.wrap() takes an openai.OpenAI or openai.AsyncOpenAI, not {type(client).__name__}"
        )
    asked = {
        "mode": mode,
        "namespace": namespace,
        "record_incomplete": record_incomplete,
        "store_timeout": store_timeout,
        "scope_by_api_key": scope_by_api_key,
    }
    given = checked("anchortrack.wrap", asked)  # settings left out (None) are the settings' rows
    existing = client.__dict__.get(TRACKER_ATTR)
    if isinstance(existing, Tracker):
        # Settings left out ask for nothing: the existing tracker's are kept.
        differing = [name for name, value in given.items() if value != getattr(existing, name)]
        if store is not None and store is not existing.store:
            differing.insert(0, "store")
        if differing:
            raise ValueError(
                "this client is already wrapped by anchortrack with other settings "
                f"({', '.join(differing)}); wrap the original, unwrapped client instead, "
                "or use anchortrack.tracker(client) to reach the existing tracker"
            )
        return client
    tracker = Tracker(coerce_store(store) if store is not None else None, **given)
    base = _untracked_class(type(client))
    if not is_cached(base, "responses"):  # an SDK that builds its resources in the constructor
        unattached(
            f"its {base.__name__}.responses is not a cached_property", "its calls go out", stacklevel=3
        )
    tracked: ClientT = clone(client, _tracked_class(base), tracker)
    return tracked


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


def _working(resource: Any) -> tuple[Calls, Callable[[], Scope]] | None:
    """The calls of *resource*'s tracker and its client's scope; None when calls through it go out untracked:
    its client is not tracked, or a seam is missing."""
    client = resource._anchortrack_client
    tracker = client.__dict__.get(TRACKER_ATTR)
    if not isinstance(tracker, Tracker):
        return None
    missing = missing_http(resource, client)
    if missing is not None:
        unattached(missing, "responses.create() and parse() calls go out")
        return None
    return tracker._calls, lambda: tracker.scope_for(client)


def _observed(path: str, kwargs: dict[str, Any], *, is_async: bool) -> dict[str, Any]:
    """The ``post`` arguments, with a ``post_parser`` recording the pending call if this is its request."""
    pending = sending.get()
    if pending is None or path.partition("?")[0] != "/responses":
        return kwargs
    sending.set(None)
    calls, ticket, built = pending
    options = kwargs.get("options") or {}
    inner: Callable[[Any], Any] | None = options.get("post_parser")

    def observe(parsed: Any) -> Any:
        _otel.sent()
        if inner is not None:
            parsed = inner(parsed)
        if isinstance(parsed, (Stream, AsyncStream)):
            call = track(parsed, calls, ticket)  # another stream class is not recorded
            if call is not None:
                built.append(call)
        else:
            calls.observe(ticket, parsed)
            if not is_async:
                calls.flush()
        return parsed

    return {**kwargs, "options": {**options, "post_parser": observe}}


_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _trimmed(error: BaseException) -> BaseException:
    """*error* without anchortrack's frames in its traceback if the SDK raised it, as if unwrapped."""
    frames: list[types.TracebackType] = []
    tb = error.__traceback__
    while tb is not None:
        frames.append(tb)
        tb = tb.tb_next
    theirs = [frame for frame in frames if not frame.tb_frame.f_code.co_filename.startswith(_PACKAGE)]
    if not theirs or theirs[-1] is not frames[-1]:  # raised inside anchortrack: left as it is
        return error
    kept: types.TracebackType | None = None
    for frame in reversed(theirs):
        kept = types.TracebackType(kept, frame.tb_frame, frame.tb_lasti, frame.tb_lineno)
    return error.with_traceback(kept)


# -- the tracked classes: each override wraps the SDK method *base.name* (`functools.wraps`, so
# `inspect.signature` and ``typing.get_overloads`` report it) and calls it as ``super()`` would: looked
# up on each call, so a method patched later (by a tracer, say) is the one called.


def _tracked(base: type[Any], name: str) -> Callable[..., Any]:
    """The tracked ``create`` / ``parse``, sync or async as the SDK's."""
    wraps = functools.wraps(getattr(base, name))

    @wraps
    def tracked(self: Any, **params: Any) -> Any:
        sdk, working = types.MethodType(getattr(base, name), self), _working(self)  # `unattached` stacklevel
        if working is None:
            return sdk(**params)
        try:
            return working[0].call(params, working[1], lambda body: sdk(**body))
        except Exception as error:  # noqa: BLE001 - re-raised as it is, with fewer frames
            raise _trimmed(error)  # noqa: B904 - the same exception: cause and context unchanged

    @wraps
    async def atracked(self: Any, **params: Any) -> Any:
        sdk, working = types.MethodType(getattr(base, name), self), _working(self)  # `unattached` stacklevel
        if working is None:
            return await sdk(**params)
        try:
            return await working[0].acall(params, working[1], lambda body: sdk(**body))
        except Exception as error:  # noqa: BLE001 - re-raised as it is, with fewer frames
            raise _trimmed(error)  # noqa: B904 - the same exception: cause and context unchanged

    return atracked if inspect.iscoroutinefunction(getattr(base, name)) else tracked


def _connecting(base: type[Any]) -> Callable[..., Any]:
    """The tracked ``responses.connect()`` (WebSocket mode; see `anchortrack._websocket`), sync and async."""

    @functools.wraps(base.connect)
    def connect(self: Any, *args: Any, **kwargs: Any) -> Any:
        sdk, client = types.MethodType(base.connect, self), self._anchortrack_client
        tracker = client.__dict__.get(TRACKER_ATTR)
        if not isinstance(tracker, Tracker):
            return sdk(*args, **kwargs)
        try:
            from ._websocket import connect_tracked
        except ImportError as error:  # an SDK with connect() but without a name its tracking needs
            unattached(f"{error}".split(" (")[0], "responses.connect() sockets go out")
            return sdk(*args, **kwargs)
        return connect_tracked(tracker, lambda: tracker.scope_for(client), sdk, args, kwargs)

    return connect


def _responses(base: type[Any], doc: str, *names: str) -> type[Any]:
    """The tracked subclass of the SDK's responses resource *base*: those of *names* it has."""
    tracked = {
        name: _connecting(base) if name == "connect" else _tracked(base, name)
        for name in names
        if hasattr(base, name)  # ``connect``: WebSocket mode (openai >= 2.22)
    }
    return type(f"_{doc.replace(' ', '')}", (base,), {"__doc__": doc, "__module__": __name__, **tracked})


_TrackedResponses = _responses(Responses, "Tracked Responses", "create", "parse", "connect")
_AsyncTrackedResponses = _responses(AsyncResponses, "Async Tracked Responses", "create", "parse", "connect")
try:  # ``client.beta.responses``: ``create`` chains like the stable one, with the same tracker; its
    # ``connect`` is the SDK's own, untracked
    from openai.resources.beta.responses import AsyncResponses as AsyncBetaResponses
    from openai.resources.beta.responses import Responses as BetaResponses

    _BETA: tuple[type[Any], type[Any]] | None = (
        _responses(BetaResponses, "Tracked Beta Responses", "create"),
        _responses(AsyncBetaResponses, "Async Tracked Beta Responses", "create"),
    )
except ImportError:  # pragma: no cover - depends on the installed SDK
    _BETA = None


def _owned(resource: Any, client: Any) -> Any:
    """*resource*, a tracked resource of *client*, keeping *client* (the SDK's own reference is private)."""
    resource._anchortrack_client = client
    return resource


def _adopting(base: type[Any], name: str) -> Callable[..., Any]:
    """``copy`` / ``with_options`` of a tracked client: the SDK's, whose copy keeps the tracker."""

    @functools.wraps(getattr(base, name))
    def adopting(self: Any, *args: Any, **kwargs: Any) -> Any:
        return adopt(self, getattr(base, name)(self, *args, **kwargs), self.__dict__.get(TRACKER_ATTR))

    return adopting


def _mirror_property(owner: type[Any], name: str) -> Callable[[Callable[[Any], Any]], Any]:
    """A cached property overriding *owner*'s *name*, with its docstring."""

    def apply(func: Callable[[Any], Any]) -> Any:
        func.__doc__ = inspect.getattr_static(owner, name, None).__doc__  # a property's is its getter's
        return cached_property(func)

    return apply


_classes: dict[type[Any], type[Any]] = {}
_classes_lock = ForkSafeLock()


def _untracked_class(cls: type[Any]) -> type[Any]:
    base: type[Any] = cls.__dict__.get("_anchortrack_base", cls)
    return base


def _tracked_class(base: type[Any]) -> type[Any]:
    """The tracked subclass of the client class *base* (cached), named and documented as *base*."""
    with _classes_lock:
        if base in _classes:
            return _classes[base]
    is_async = issubclass(base, openai.AsyncOpenAI)
    responses_cls = _AsyncTrackedResponses if is_async else _TrackedResponses
    beta_responses = _BETA[is_async] if _BETA is not None and is_cached(base, "beta") else None

    class Tracked(base):  # type: ignore[misc]
        _anchortrack_base = base  # `_untracked_class`

        @_mirror_property(base, "responses")
        def responses(self) -> Any:
            return _owned(responses_cls(self), self)

        if is_async:

            async def post(self, path: str, **kwargs: Any) -> Any:
                return await super().post(path, **_observed(path, kwargs, is_async=True))

        else:

            def post(self, path: str, **kwargs: Any) -> Any:  # type: ignore[misc]
                return super().post(path, **_observed(path, kwargs, is_async=False))

        copy, with_options = _adopting(base, "copy"), _adopting(base, "with_options")

        if beta_responses is not None:

            @_mirror_property(base, "beta")
            def beta(self) -> Any:
                beta = (AsyncBeta if is_async else Beta)(self)  # the SDK's, with tracked responses
                beta.__dict__["responses"] = _owned(beta_responses(self), self)
                return beta

    for attr in ("__name__", "__qualname__", "__module__", "__doc__"):
        setattr(Tracked, attr, getattr(base, attr))
    with _classes_lock:
        return _classes.setdefault(base, Tracked)
