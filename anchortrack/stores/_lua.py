"""
Lua scripts that give `RedisStore` one round trip per record, lookup by id
and eviction, atomically.

Values are those of `_redis_format.encode_value`
(``2|count|created|expires|properties|mac|id``), reverse keys hold the view in hex.
The scripts build the other entry's key from a prefix argument; every key of
a scope shares one hash tag, so that stays on one Redis Cluster slot.
"""

from __future__ import annotations


_RID_OF = """
local function rid_of(v)
  if not v then return nil end
  return string.match(v, '^2|[^|]*|[^|]*|[^|]*|[^|]*|[^|]*|(.*)$')
end
"""

#: KEYS: view key, reverse key.
#: ARGV: value, view hex, PXAT milliseconds, response id, view key prefix,
#: reverse key prefix.
#: Drops the reverse entry of the response the view used to name, and the
#: view entry the response id used to be recorded under, then writes both
#: keys with the same absolute expiry.
PUT = (
    _RID_OF
    + """
local old = rid_of(redis.call('GET', KEYS[1]))
if old and old ~= ARGV[4] then
  local rkey = ARGV[6] .. old
  if redis.call('GET', rkey) == ARGV[2] then redis.call('DEL', rkey) end
end
local prev = redis.call('GET', KEYS[2])
if prev and prev ~= ARGV[2] then
  local vkey = ARGV[5] .. prev
  if rid_of(redis.call('GET', vkey)) == ARGV[4] then redis.call('DEL', vkey) end
end
redis.call('SET', KEYS[1], ARGV[1], 'PXAT', ARGV[3])
redis.call('SET', KEYS[2], ARGV[2], 'PXAT', ARGV[3])
return 1
"""
)

#: KEYS: reverse key. ARGV: view key prefix.
#: Returns ``{view hex, value}``, or nil when either entry is missing.
GET = """
local view = redis.call('GET', KEYS[1])
if not view then return false end
local v = redis.call('GET', ARGV[1] .. view)
if not v then return false end
return {view, v}
"""

#: KEYS: reverse key. ARGV: view key prefix, response id.
#: Deletes the reverse entry, and the view entry only if it still names the
#: response id. Returns how many keys it deleted.
EVICT = (
    _RID_OF
    + """
local view = redis.call('GET', KEYS[1])
if not view then return 0 end
redis.call('DEL', KEYS[1])
local vkey = ARGV[1] .. view
if rid_of(redis.call('GET', vkey)) == ARGV[2] then
  redis.call('DEL', vkey)
  return 2
end
return 1
"""
)
