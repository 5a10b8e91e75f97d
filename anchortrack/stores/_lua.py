"""
Lua scripts that give `RedisStore` one atomic round trip per find, put, get and evict.

They read the values of `_redis_format.encode_value` and the keys of
`_redis_format.KeySchema`, building other keys from prefix arguments (one
scope's keys share a hash tag, so they stay on one Redis Cluster slot).
"""

from __future__ import annotations


_RID_OF = """
local function rid_of(v)
  if not v then return nil end
  local rid = string.match(v, '^2|[^|]*|[^|]*|[^|]*|[^|]*|[^|]*|(.*)$')
  if rid then return rid end
  local n, rest = string.match(v, '^3|[^|]*|[^|]*|[^|]*|[^|]*|[^|]*|(%d+)|(.*)$')
  if n then return string.sub(rest, tonumber(n) + 1) end
  return nil
end
"""

#: KEYS: view key, reverse key.
#: ARGV: value, view hex, PXAT milliseconds, response id, view key prefix,
#: reverse key prefix, parent response id (or ""), children key prefix.
#: Drops the reverse entry of the response the view used to name, and the
#: view entry the response id used to be recorded under, then writes both
#: keys with the same absolute expiry, and adds the response to its parent's
#: children (a set that lives as long as its longest-lived member).
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
if ARGV[7] ~= '' then
  local ckey = ARGV[8] .. ARGV[7]
  redis.call('SADD', ckey, ARGV[4])
  local left = redis.call('PTTL', ckey)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  if left < 0 or now + left < tonumber(ARGV[3]) then redis.call('PEXPIREAT', ckey, ARGV[3]) end
end
return 1
"""
)

#: KEYS: view keys. ARGV: view key prefix, reverse key prefix.
#: Returns the values of the view keys (false where there is none), as ``MGET`` would
#: (``GET`` per key: Lua's ``unpack`` would limit ``MGET`` to a few thousand keys).
#: Redis evicting with an ``allkeys-*`` policy may drop an anchor's reverse key and
#: keep its view key, which `EVICT` could then not reach: a missing reverse key is
#: restored until the view key's own expiry (``pcall``: with ``noeviction`` a full
#: Redis refuses the write, and the lookup still answers).
FIND = (
    _RID_OF
    + """
local found, skip = {}, #ARGV[1] + 1
for i, key in ipairs(KEYS) do
  local v = redis.call('GET', key)
  found[i] = v
  local rid = rid_of(v)
  if rid and redis.call('EXISTS', ARGV[2] .. rid) == 0 then
    local left = redis.call('PTTL', key)
    if left > 0 then redis.pcall('SET', ARGV[2] .. rid, string.sub(key, skip), 'PX', left) end
  end
end
return found
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

#: Most responses one eviction forgets (a bound on the script's run time).
MAX_EVICTED = 10_000

#: KEYS: reverse key. ARGV: view key prefix, response id, reverse key prefix,
#: children key prefix.
#: Forgets the response and, breadth first, every response recorded as
#: chained from it: deletes each one's reverse entry, its view entry only if
#: that still names it, and its children set.
#: Returns how many responses it forgot.
EVICT = (
    _RID_OF
    + """
local queue, seen, i, forgot = {ARGV[2]}, {[ARGV[2]] = true}, 1, 0
while i <= #queue and i <= """
    + str(MAX_EVICTED)
    + """ do
  local rid = queue[i]
  i = i + 1
  local rkey = ARGV[3] .. rid
  local view = redis.call('GET', rkey)
  if view then
    redis.call('DEL', rkey)
    forgot = forgot + 1
    local vkey = ARGV[1] .. view
    if rid_of(redis.call('GET', vkey)) == rid then redis.call('DEL', vkey) end
  end
  local ckey = ARGV[4] .. rid
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
