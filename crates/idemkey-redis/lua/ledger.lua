-- Shared by the ledger's scripts (src/caps.rs puts it before each one, after common.lua).
--
-- An actor's ledger, kept only under per-actor caps, is two keys in one slot (one hash tag,
-- the actor's digest): a sorted set of the actor's record keys, scored by the time each
-- record expires at the latest (ms), and a hash of the bytes each one's stored response
-- takes, with their sum in the field `total`. Its entries are pruned as they expire, and both
-- keys expire with the last of them, so an idle actor leaves nothing behind.

-- Drops the entries whose records have expired by `now`.
local function prune(set, bytes, now)
  local gone = redis.call('ZRANGEBYSCORE', set, '-inf', now)
  for _, member in ipairs(gone) do
    local size = tonumber(redis.call('HGET', bytes, member) or '0')
    if size > 0 then
      redis.call('HINCRBY', bytes, 'total', -size)
    end
    redis.call('HDEL', bytes, member)
  end
  if #gone > 0 then
    redis.call('ZREMRANGEBYSCORE', set, '-inf', now)
  end
end

-- Keeps both keys until the last entry expires, or deletes them when there is none.
local function keep(set, bytes)
  local last = redis.call('ZRANGE', set, -1, -1, 'WITHSCORES')
  if #last == 0 then
    redis.call('DEL', set, bytes)
    return
  end
  redis.call('PEXPIREAT', set, last[2])
  if redis.call('EXISTS', bytes) == 1 then
    redis.call('PEXPIREAT', bytes, last[2])
  end
end

-- Sets the bytes of `member`'s stored response, keeping `total` their sum.
local function set_bytes(bytes, member, size)
  local old = tonumber(redis.call('HGET', bytes, member) or '0')
  if size > 0 then
    redis.call('HSET', bytes, member, size)
  else
    redis.call('HDEL', bytes, member)
  end
  if size ~= old then
    redis.call('HINCRBY', bytes, 'total', size - old)
  end
end
