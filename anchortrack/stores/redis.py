"""
`RedisStore`: anchors shared by many workers and hosts (extra ``redis``).

Key schema (see `KeySchema`), with the scope in a hash tag::

    {prefix}:{<scope>}:v:<view hex>    ->  "2|<count>|<created>|<expires>|<properties>|<mac>|<response id>"
                                           (with a parent: "3|…|<mac>|<n>|<parent id><response id>")
    {prefix}:{<scope>}:r:<response id> ->  "<view hex>"
    {prefix}:{<scope>}:c:<response id> ->  set of the response ids chained from it

Both keys of an anchor carry the anchor's absolute expiry (``PXAT``); a
children set lives as long as its longest-lived member. ``find``, ``put``,
``get`` and ``evict`` are one ``EVALSHA`` each (`anchortrack.stores._lua`).
"""

from __future__ import annotations

import asyncio
import inspect
import math
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any, cast

import redis
import redis.asyncio
import redis.asyncio.retry
import redis.backoff
import redis.retry

from . import _lua
from ._base import DEFAULT_TTL, Anchor, resolve_secret_key
from ._checks import check_anchor, check_response_id, check_ttl, unique_views
from ._redis_format import KeySchema, decode_value, encode_value


__all__ = ["RedisStore"]

#: Per-operation socket timeouts `RedisStore.from_url` uses unless told.
DEFAULT_SOCKET_TIMEOUT = 0.25

_Call = tuple[list[str], list[str | int]]  # keys, args


class RedisStore:
    """
    Anchors in Redis: shared by every worker and host that uses one server.

    One store serves sync and async callers when it has a client of each kind:
    build it with `from_url`, or pass a sync ``redis.Redis`` as *client* and a
    ``redis.asyncio.Redis`` as *async_client* (or an async client alone as
    *client*). A method without a client of its kind raises `TypeError`.
    Errors are raised, never swallowed: clients from `from_url` time out fast
    and never retry; clients you pass in keep their own settings (with
    ``decode_responses=True`` too).
    An asyncio client is bound to the event loop it first runs on, so a store
    from `from_url` makes one async client per event loop; an async client you
    pass in is used as given. Values hold only counts, times and ids.

    Args:
        client: A ``redis.Redis`` or a ``redis.asyncio.Redis``.
        async_client: A ``redis.asyncio.Redis`` for the async methods, when
            *client* is a sync one.
        prefix: The first part of every key.
        ttl: Seconds an anchor lives; the tracker sets ``expires_at = created_at + ttl``.
        secret_key: Optional key for keyed view digests (else the
            ``ANCHORTRACK_SECRET_KEY`` environment variable).
        clock: Returns the current Unix time, to filter anchors the server
            has not expired yet; injectable for tests.

    Attributes:
        key_schema: Names the keys (see `KeySchema`).
        client: The sync client, if any.
        async_client: The async client given or first made, if any.
    """

    def __init__(
        self,
        client: redis.Redis | redis.asyncio.Redis,
        *,
        async_client: redis.asyncio.Redis | None = None,
        prefix: str = "anchortrack",
        ttl: float = DEFAULT_TTL,
        secret_key: bytes | str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        sync, asynchronous = (None, client) if _is_async(client) else (client, async_client)
        if sync is not None and _is_async(sync):
            raise TypeError("client must be a redis.Redis or a redis.asyncio.Redis")
        if asynchronous is not None and not _is_async(asynchronous):
            raise TypeError(f"async_client must be a redis.asyncio.Redis, got {asynchronous!r}")
        self.key_schema = KeySchema(prefix)
        self.ttl = check_ttl(ttl)
        self.secret_key = resolve_secret_key(secret_key)
        self.client = cast("redis.Redis | None", sync)
        self.async_client = cast("redis.asyncio.Redis | None", asynchronous)
        self._clock = clock
        self._owned = False
        self._sync_side = _Scripts(sync) if sync is not None else None
        self._first_async = _Scripts(asynchronous) if asynchronous is not None else None
        # Set by `from_url`: a new async client for each event loop (one cannot outlive its loop).
        self._new_async_client: Callable[[], redis.asyncio.Redis] | None = None
        self._async_sides: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Scripts] = (
            weakref.WeakKeyDictionary()
        )

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        prefix: str = "anchortrack",
        ttl: float = DEFAULT_TTL,
        secret_key: bytes | str | None = None,
        clock: Callable[[], float] = time.time,
        **kwargs: Any,
    ) -> RedisStore:
        """
        Build a store that owns a sync and an async client for *url* (`close` / `aclose` close them).

        *url* is a ``redis://``, ``rediss://`` or ``unix://`` URL; *kwargs* go to
        both clients' ``from_url``, with ``socket_timeout`` and
        ``socket_connect_timeout`` 0.25 s unless given. The clients never retry,
        so that failures are fast (``retry`` is refused); the other arguments
        are the constructor's.
        """
        if "retry" in kwargs:
            raise TypeError(
                "RedisStore.from_url() clients never retry (the tracker retries later);"
                " build the clients yourself to use a retry policy"
            )
        options = {
            "socket_timeout": DEFAULT_SOCKET_TIMEOUT,
            "socket_connect_timeout": DEFAULT_SOCKET_TIMEOUT,
            **kwargs,
        }
        no_retry = redis.backoff.NoBackoff()

        def new_async_client() -> redis.asyncio.Redis:
            retry = redis.asyncio.retry.Retry(no_retry, 0)
            return redis.asyncio.Redis.from_url(url, retry=retry, **options)

        store = cls(
            redis.Redis.from_url(url, retry=redis.retry.Retry(no_retry, 0), **options),
            async_client=new_async_client(),
            prefix=prefix,
            ttl=ttl,
            secret_key=secret_key,
            clock=clock,
        )
        store._owned = True
        store._new_async_client = new_async_client
        return store

    def find(self, scope: str, views: Sequence[bytes]) -> dict[bytes, Anchor]:
        """Return the live anchors recorded in *scope* for any of *views* (one EVALSHA)."""
        wanted = unique_views(views)
        keys, args = self._find_call(scope, wanted)
        return self._found(wanted, self._sync("find").find(keys, args)) if wanted else {}

    def get(self, scope: str, response_id: str) -> Anchor | None:
        """Return the live anchor recorded in *scope* for *response_id* (one EVALSHA)."""
        keys, args = self._get_call(scope, response_id)
        return self._got(response_id, self._sync("get").get(keys, args))

    def put(self, scope: str, anchor: Anchor) -> None:
        """Record *anchor* in *scope* (one atomic EVALSHA; an id moves to its new view)."""
        keys, args = self._put_call(scope, anchor)
        self._sync("put").put(keys, args)

    def evict(self, scope: str, response_id: str) -> None:
        """Forget *response_id* and its descendants, and each view that still names one (one EVALSHA)."""
        keys, args = self._evict_call(scope, response_id)
        self._sync("evict").evict(keys, args)

    def close(self) -> None:
        """Close the sync client if `from_url` made it; use `aclose` for both."""
        if self._owned and self.client is not None:
            self.client.close()

    async def afind(self, scope: str, views: Sequence[bytes]) -> dict[bytes, Anchor]:
        """Async twin of `find`."""
        wanted = unique_views(views)
        keys, args = self._find_call(scope, wanted)
        return self._found(wanted, await self._async("afind").find(keys, args)) if wanted else {}

    async def aget(self, scope: str, response_id: str) -> Anchor | None:
        """Async twin of `get`."""
        keys, args = self._get_call(scope, response_id)
        return self._got(response_id, await self._async("aget").get(keys, args))

    async def aput(self, scope: str, anchor: Anchor) -> None:
        """Async twin of `put`."""
        keys, args = self._put_call(scope, anchor)
        await self._async("aput").put(keys, args)

    async def aevict(self, scope: str, response_id: str) -> None:
        """Async twin of `evict`."""
        keys, args = self._evict_call(scope, response_id)
        await self._async("aevict").evict(keys, args)

    async def aclose(self) -> None:
        """Close the clients `from_url` made (the async one of this event loop)."""
        if not self._owned:
            return
        side = self._async_sides.pop(asyncio.get_running_loop(), None)
        if side is None and self._first_async is not None:
            side, self._first_async = self._first_async, None  # never used
        if side is not None:
            await side.client.aclose()
        self.close()

    def _sync(self, method: str) -> _Scripts:
        if self._sync_side is None:
            raise _no_client(method, "a sync redis.Redis", "an async", f"await RedisStore.a{method}()")
        return self._sync_side

    def _async(self, method: str) -> _Scripts:
        if self.async_client is None:
            raise _no_client(method, "a redis.asyncio.Redis", "a sync", f"call RedisStore.{method[1:]}()")
        if self._new_async_client is None:  # the caller's client: used as given
            assert self._first_async is not None
            return self._first_async
        loop = asyncio.get_running_loop()
        side = self._async_sides.get(loop)
        if side is None:
            if self._first_async is not None:
                side, self._first_async = self._first_async, None
            else:
                side = _Scripts(self._new_async_client())
            self._async_sides[loop] = side
        return side

    def _found(self, views: list[bytes], raws: Sequence[bytes | str | None]) -> dict[bytes, Anchor]:
        now, found = self._clock(), {}
        for view, raw in zip(views, raws, strict=True):
            anchor = decode_value(view, raw) if raw is not None else None
            if anchor is not None and anchor.is_live(now):
                found[view] = anchor
        return found

    def _got(self, response_id: str, reply: Sequence[bytes | str] | None) -> Anchor | None:
        if not reply:
            return None
        view_hex, raw = reply
        text = view_hex.decode() if isinstance(view_hex, bytes) else view_hex
        try:
            view = bytes.fromhex(text)
        except ValueError:
            return None
        anchor = decode_value(view, raw)
        if anchor is None or anchor.response_id != response_id:
            return None
        return anchor if anchor.is_live(self._clock()) else None

    def _find_call(self, scope: str, views: list[bytes]) -> _Call:
        schema = self.key_schema
        return schema.view_keys(scope, views), [schema.view_prefix(scope), schema.response_prefix(scope)]

    def _put_call(self, scope: str, anchor: Anchor) -> _Call:
        a = check_anchor(anchor)
        schema = self.key_schema
        keys = [schema.view_keys(scope, [a.view])[0], schema.response_key(scope, a.response_id)]
        args: list[str | int] = [
            encode_value(a),
            a.view.hex(),
            max(1, math.ceil(a.expires_at * 1000)),  # PXAT: Unix milliseconds, at least 1
            a.response_id,
            schema.view_prefix(scope),
            schema.response_prefix(scope),
            a.parent or "",
            schema.children_prefix(scope),
        ]
        return keys, args

    def _get_call(self, scope: str, response_id: str) -> _Call:
        key = self.key_schema.response_key(scope, check_response_id(response_id))
        return [key], [self.key_schema.view_prefix(scope)]

    def _evict_call(self, scope: str, response_id: str) -> _Call:
        schema = self.key_schema
        key = schema.response_key(scope, check_response_id(response_id))
        return [key], [
            schema.view_prefix(scope),
            response_id,
            schema.response_prefix(scope),
            schema.children_prefix(scope),
        ]


class _Scripts:
    """A client (sync or asyncio) and its registered scripts: calling one returns what the client does."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.find = client.register_script(_lua.FIND)
        self.put = client.register_script(_lua.PUT)
        self.get = client.register_script(_lua.GET)
        self.evict = client.register_script(_lua.EVICT)


def _no_client(method: str, needed: str, held: str, instead: str) -> TypeError:
    """The error for calling *method* on a store without a client of its kind."""
    return TypeError(
        f"RedisStore.{method}() needs {needed} client, but this store has only {held} one: {instead},"
        " or build the store with RedisStore.from_url() or RedisStore(sync_client, async_client=...)"
    )


def _is_async(client: object) -> bool:
    """Whether *client* is an asyncio Redis client (its commands are coroutines)."""
    return inspect.iscoroutinefunction(getattr(client, "execute_command", None))
