"""`RedisStore`: anchors shared by many workers and hosts (extra ``redis``), its keys, values and scripts.

Key schema (see `KeySchema`), with the scope in a hash tag::

    {prefix}:{<scope>}:v:<view hex>    ->  "2|<count>|<created>|<expires>|<properties>|<mac>|<response id>"
                                           (with a parent: "3|…|<mac>|<n>|<parent id><response id>")
    {prefix}:{<scope>}:r:<response id> ->  "<view hex>"
    {prefix}:{<scope>}:c:<response id> ->  set of the response ids chained from it

Both keys of an anchor carry the anchor's absolute expiry (``PXAT``); a children set lives as long
as its longest-lived member. ``find``, ``put``, ``get`` and ``evict`` are one ``EVALSHA`` each: the
Lua scripts below.
"""

from __future__ import annotations

import asyncio
import inspect
import math
import time
from collections.abc import Callable, Sequence
from typing import Any, cast
from weakref import WeakKeyDictionary

import redis
import redis.asyncio
import redis.asyncio.retry
import redis.backoff
import redis.retry

from ._base import DEFAULT_TTL, Anchor, resolve_secret_key
from ._checks import FORBIDDEN_KEY_CHARS, check_anchor, check_response_id, check_scope, checked_seconds


__all__ = ["RedisStore"]

_Call = tuple[list[str], list[str | int]]  # keys, args


class RedisStore:
    """Anchors in Redis: shared by every worker and host that uses one server.

    One store serves sync and async callers when it has a client of each kind: build it with
    `from_url`, or pass a sync ``redis.Redis`` as *client* and a ``redis.asyncio.Redis`` as
    *async_client* (or an async client alone as *client*). A method without a client of its kind
    raises `TypeError`. Errors are raised, never swallowed: clients from `from_url` time out fast and never
    retry; clients you pass in keep their own settings (with ``decode_responses=True`` too). An asyncio client
    is bound to the event loop it first runs on, so a store from `from_url` makes one async client per event
    loop; an async client you pass in is used as given. Values hold only counts, times and ids.

    Args:
        client: A ``redis.Redis`` or a ``redis.asyncio.Redis``.
        async_client: A ``redis.asyncio.Redis`` for the async methods, when *client* is a sync one.
        prefix: The first part of every key.
        ttl: Seconds an anchor lives; the tracker sets ``expires_at = created_at + ttl``.
        secret_key: Optional key for keyed view digests (else the ``ANCHORTRACK_SECRET_KEY`` variable).
        clock: Returns the current Unix time, to filter anchors the server has not expired yet;
            injectable for tests.

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
        if asynchronous is not None and not _is_async(asynchronous):
            raise TypeError(f"async_client must be a redis.asyncio.Redis, got {asynchronous!r}")
        self.key_schema = KeySchema(prefix)
        self.ttl = checked_seconds(ttl, type(self).__name__, "ttl")
        self.secret_key = resolve_secret_key(secret_key)
        self.client = cast("redis.Redis | None", sync)
        self.async_client = cast("redis.asyncio.Redis | None", asynchronous)
        self._clock = clock
        self._sync_side = _Scripts(sync) if sync is not None else None
        #: The given async client's scripts (one from `from_url` goes to the first event loop: `_async`).
        self._first_async = _Scripts(asynchronous) if asynchronous is not None else None
        # Set by `from_url` (the store owns its clients): a new async client for each event loop.
        self._new_async_client: Callable[[], redis.asyncio.Redis] | None = None
        self._async_sides: WeakKeyDictionary[asyncio.AbstractEventLoop, _Scripts] = WeakKeyDictionary()

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
        """Build a store that owns a sync and an async client for *url* (`close` / `aclose` close them).

        *url* is a ``redis://``, ``rediss://`` or ``unix://`` URL; *kwargs* go to both clients'
        ``from_url``, with ``socket_timeout`` and ``socket_connect_timeout`` 0.25 s unless given. The
        clients never retry, so that failures are fast (``retry`` is refused); the other arguments
        are the constructor's.
        """
        if "retry" in kwargs:
            raise TypeError(
                "RedisStore.from_url() clients never retry (the tracker retries later);"
                " build the clients yourself to use a retry policy"
            )
        options: dict[str, Any] = {"socket_timeout": 0.25, "socket_connect_timeout": 0.25, **kwargs}
        no_retry = redis.backoff.NoBackoff()

        def new_async() -> redis.asyncio.Redis:
            return redis.asyncio.Redis.from_url(url, retry=redis.asyncio.retry.Retry(no_retry, 0), **options)

        sync = redis.Redis.from_url(url, retry=redis.retry.Retry(no_retry, 0), **options)
        store = cls(
            sync, async_client=new_async(), prefix=prefix, ttl=ttl, secret_key=secret_key, clock=clock
        )
        store._new_async_client = new_async
        return store

    def find(self, scope: str, views: Sequence[bytes]) -> dict[bytes, Anchor]:
        """Return the live anchors recorded in *scope* for any of *views* (one EVALSHA)."""
        wanted = list(dict.fromkeys(views))
        call = self._find_call(scope, wanted)  # checks the scope, even with no views
        return self._found(wanted, self._sync("find").find(*call)) if wanted else {}

    def get(self, scope: str, response_id: str) -> Anchor | None:
        """Return the live anchor recorded in *scope* for *response_id* (one EVALSHA)."""
        return self._got(response_id, self._sync("get").get(*self._id_call(scope, response_id)))

    def put(self, scope: str, anchor: Anchor) -> None:
        """Record *anchor* in *scope* (one atomic EVALSHA; an id moves to its new view)."""
        self._sync("put").put(*self._put_call(scope, anchor))

    def evict(self, scope: str, response_id: str) -> None:
        """Forget *response_id* and its descendants, and each view that still names one (one EVALSHA)."""
        self._sync("evict").evict(*self._id_call(scope, response_id))

    def close(self) -> None:
        """Close the sync client if `from_url` made it; use `aclose` for both."""
        if self._new_async_client is not None and self.client is not None:
            self.client.close()

    async def afind(self, scope: str, views: Sequence[bytes]) -> dict[bytes, Anchor]:
        """Async twin of `find`."""
        wanted = list(dict.fromkeys(views))
        call = self._find_call(scope, wanted)
        return self._found(wanted, await self._async("afind").find(*call)) if wanted else {}

    async def aget(self, scope: str, response_id: str) -> Anchor | None:
        """Async twin of `get`."""
        return self._got(response_id, await self._async("aget").get(*self._id_call(scope, response_id)))

    async def aput(self, scope: str, anchor: Anchor) -> None:
        """Async twin of `put`."""
        await self._async("aput").put(*self._put_call(scope, anchor))

    async def aevict(self, scope: str, response_id: str) -> None:
        """Async twin of `evict`."""
        await self._async("aevict").evict(*self._id_call(scope, response_id))

    async def aclose(self) -> None:
        """Close the clients `from_url` made (the async one of this event loop)."""
        if self._new_async_client is None:
            return
        side = self._async_sides.pop(asyncio.get_running_loop(), None) or self._first_async
        self._first_async = None
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
            side = self._async_sides[loop] = self._first_async or _Scripts(self._new_async_client())
            self._first_async = None
        return side

    def _found(self, views: list[bytes], raws: Sequence[bytes | str | None]) -> dict[bytes, Anchor]:
        now = self._clock()
        anchors = [decode_value(view, raw) for view, raw in zip(views, raws, strict=True) if raw is not None]
        return {a.view: a for a in anchors if a is not None and a.is_live(now)}

    def _got(self, response_id: str, reply: Sequence[bytes | str] | None) -> Anchor | None:
        if not reply:
            return None
        view_hex, raw = reply
        try:
            view = bytes.fromhex(view_hex.decode() if isinstance(view_hex, bytes) else view_hex)
        except ValueError:
            return None
        anchor = self._found([view], [raw]).get(view)
        return anchor if anchor is not None and anchor.response_id == response_id else None

    def _find_call(self, scope: str, views: list[bytes]) -> _Call:
        return self.key_schema.view_keys(scope, views), [self.key_schema.base(scope)]

    def _id_call(self, scope: str, response_id: str) -> _Call:
        key = self.key_schema.response_key(scope, check_response_id(response_id))
        return [key], [self.key_schema.base(scope), response_id]

    def _put_call(self, scope: str, anchor: Anchor) -> _Call:
        a = check_anchor(anchor)
        schema = self.key_schema
        keys = [schema.view_keys(scope, [a.view])[0], schema.response_key(scope, a.response_id)]
        pxat = max(1, math.ceil(a.expires_at * 1000))  # Unix milliseconds, at least 1
        return keys, [encode_value(a), a.view.hex(), pxat, a.response_id, schema.base(scope), a.parent or ""]


class _Scripts:
    """A client (sync or asyncio) and its registered scripts: calling one returns what the client does."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.find, self.put, self.get, self.evict = (
            client.register_script(s) for s in (FIND, PUT, GET, EVICT)
        )


def _no_client(method: str, needed: str, held: str, instead: str) -> TypeError:
    return TypeError(
        f"RedisStore.{method}() needs {needed} client, but this store has only {held} one: {instead},"
        " or build the store with RedisStore.from_url() or RedisStore(sync_client, async_client=...)"
    )


def _is_async(client: object) -> bool:
    return inspect.iscoroutinefunction(getattr(client, "execute_command", None))


class KeySchema:
    """Key names: ``<prefix>:{<scope>}:`` and a kind (see the module's key schema). The scope's hash tag keeps
    its keys on one Redis Cluster slot, where multi-key scripts stay legal."""

    def __init__(self, prefix: str) -> None:
        if not prefix or any(c.isspace() or c in FORBIDDEN_KEY_CHARS for c in prefix):
            raise ValueError(f"prefix must be non-empty, without spaces or braces: {prefix!r}")
        self.prefix = prefix

    def base(self, scope: str) -> str:
        """Return the common start of every key of *scope* (the scripts add ``v:``, ``r:`` or ``c:``)."""
        return f"{self.prefix}:{{{check_scope(scope)}}}:"

    def view_prefix(self, scope: str) -> str:
        """Return the start of view keys of *scope* (a view's hex follows)."""
        return self.base(scope) + "v:"

    def view_keys(self, scope: str, views: Sequence[bytes]) -> list[str]:
        """Return the view keys of *views* in *scope*."""
        start = self.view_prefix(scope)
        return [start + v.hex() for v in views]

    def response_key(self, scope: str, response_id: str) -> str:
        """Return the reverse key of *response_id* in *scope*."""
        return self.base(scope) + "r:" + response_id


#: Version tag at the start of every encoded value; version 1 values (without the properties digest
#: and the MAC) are treated as absent.
VALUE_VERSION = "2"
#: Version tag of a value with a parent (`Anchor.parent`).
PARENT_VALUE_VERSION = "3"


def encode_value(anchor: Anchor) -> str:
    """Encode all but the view (in the key) as in the module's key schema: the response id last, so it may
    hold any character; the parent's length *n* in UTF-8 bytes; ASCII for ASCII ids (decoding clients)."""
    mac = anchor.mac.hex() if anchor.mac is not None else ""
    head = f"{anchor.count}|{anchor.created_at!r}|{anchor.expires_at!r}|{anchor.properties.hex()}|{mac}"
    if anchor.parent is None:
        return f"{VALUE_VERSION}|{head}|{anchor.response_id}"
    size = len(anchor.parent.encode())
    return f"{PARENT_VALUE_VERSION}|{head}|{size}|{anchor.parent}{anchor.response_id}"


def decode_value(view: bytes, raw: bytes | str) -> Anchor | None:
    """Decode a value written by `encode_value`; None if it is not one (of another version, say)."""
    data = raw.encode() if isinstance(raw, str) else raw
    parts = data.split(b"|", 7)
    parent: str | None = None
    try:
        if parts[0] == VALUE_VERSION.encode() and len(parts) >= 7:
            response_id = b"|".join(parts[6:]).decode()
        elif parts[0] == PARENT_VALUE_VERSION.encode() and len(parts) == 8:
            size = int(parts[6])
            if not 0 < size < len(parts[7]):
                return None
            parent, response_id = parts[7][:size].decode(), parts[7][size:].decode()
        else:
            return None
        count, created_at, expires_at = int(parts[1]), float(parts[2]), float(parts[3])
        properties, mac = bytes.fromhex(parts[4].decode()), bytes.fromhex(parts[5].decode())
    except (ValueError, UnicodeDecodeError):
        return None
    return Anchor(view, response_id, count, created_at, expires_at, properties, mac or None, parent)


# -- the Lua scripts: one atomic round trip per find, put, get and evict; "scope base" is `KeySchema.base`

#: ``rid_of(value)``: the response id of a value, and its parent's id (nil without one).
_RID_OF = """
local function rid_of(v)
  if not v then return nil end
  local rid = string.match(v, '^2|[^|]*|[^|]*|[^|]*|[^|]*|[^|]*|(.*)$')
  if rid then return rid end
  local n, rest = string.match(v, '^3|[^|]*|[^|]*|[^|]*|[^|]*|[^|]*|(%d+)|(.*)$')
  if n then return string.sub(rest, tonumber(n) + 1), string.sub(rest, 1, tonumber(n)) end
end
"""

#: KEYS: view key, reverse key.
#: ARGV: value, view hex, PXAT milliseconds, response id, scope base, parent response id (or "").
#: Drops the reverse entry of the response the view named and the view entry the id was recorded under,
#: writes both keys with one absolute expiry, and adds the response to its parent's children.
PUT = (
    _RID_OF
    + """
local old = rid_of(redis.call('GET', KEYS[1]))
if old and old ~= ARGV[4] then
  local rkey = ARGV[5] .. 'r:' .. old
  if redis.call('GET', rkey) == ARGV[2] then redis.call('DEL', rkey) end
end
local prev = redis.call('GET', KEYS[2])
if prev and prev ~= ARGV[2] then
  local vkey = ARGV[5] .. 'v:' .. prev
  if rid_of(redis.call('GET', vkey)) == ARGV[4] then redis.call('DEL', vkey) end
end
redis.call('SET', KEYS[1], ARGV[1], 'PXAT', ARGV[3])
redis.call('SET', KEYS[2], ARGV[2], 'PXAT', ARGV[3])
if ARGV[6] ~= '' then
  local ckey = ARGV[5] .. 'c:' .. ARGV[6]
  redis.call('SADD', ckey, ARGV[4])
  local left = redis.call('PTTL', ckey)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  if left < 0 or now + left < tonumber(ARGV[3]) then redis.call('PEXPIREAT', ckey, ARGV[3]) end
end
return 1
"""
)

#: KEYS: view keys. ARGV: scope base.
#: Returns the view keys' values (false where none) as ``MGET`` would (``GET`` per key: Lua's ``unpack``
#: limits ``MGET`` to a few thousand keys). An ``allkeys-*`` eviction may drop an anchor's reverse key, or
#: its parent's children set, and keep its view key, which `EVICT` could then not reach (from its id, or
#: from its parent's): a missing reverse key, and the anchor's place in its parent's children set, are
#: restored until the view key's expiry (``pcall``: a full Redis with ``noeviction`` refuses the write; the
#: lookup still answers).
FIND = (
    _RID_OF
    + """
local found, skip = {}, #ARGV[1] + 3
for i, key in ipairs(KEYS) do
  local v = redis.call('GET', key)
  found[i] = v
  local rid, parent = rid_of(v)
  if rid then
    local rkey, ckey = ARGV[1] .. 'r:' .. rid, parent and ARGV[1] .. 'c:' .. parent
    local lost_r = redis.call('EXISTS', rkey) == 0
    local lost_c = ckey and redis.call('SISMEMBER', ckey, rid) == 0
    local left = (lost_r or lost_c) and redis.call('PTTL', key) or -1
    if left > 0 and lost_r then redis.pcall('SET', rkey, string.sub(key, skip), 'PX', left) end
    if left > 0 and lost_c then
      redis.pcall('SADD', ckey, rid)
      local kept = redis.call('PTTL', ckey)
      if kept == -1 or (kept > 0 and kept < left) then redis.pcall('PEXPIRE', ckey, left) end
    end
  end
end
return found
"""
)

#: KEYS: reverse key. ARGV: scope base.
#: Returns ``{view hex, value}``, or nil when either entry is missing.
GET = """
local view = redis.call('GET', KEYS[1])
local v = view and redis.call('GET', ARGV[1] .. 'v:' .. view)
if not v then return false end
return {view, v}
"""

#: KEYS: reverse key. ARGV: scope base, response id.
#: Forgets the response and, breadth first, every response chained from it (at most 10,000: a bound on the
#: run time): deletes each one's reverse entry, its view entry only if that still names it, and its children
#: set. Returns how many it forgot.
EVICT = (
    _RID_OF
    + """
local queue, seen, i, forgot = {ARGV[2]}, {[ARGV[2]] = true}, 1, 0
while i <= #queue and i <= 10000 do
  local rid = queue[i]
  i = i + 1
  local rkey = ARGV[1] .. 'r:' .. rid
  local view = redis.call('GET', rkey)
  if view then
    redis.call('DEL', rkey)
    forgot = forgot + 1
    local vkey = ARGV[1] .. 'v:' .. view
    if rid_of(redis.call('GET', vkey)) == rid then redis.call('DEL', vkey) end
  end
  local ckey = ARGV[1] .. 'c:' .. rid
  for _, child in ipairs(redis.call('SMEMBERS', ckey)) do
    if not seen[child] then
      seen[child] = true
      queue[#queue + 1] = child
    end
  end
  redis.call('DEL', ckey)
end
return forgot
"""
)
