-- Shared by the scripts that keep an actor's ledger (src/scripts.rs puts it after common.lua).
--
-- An actor's ledger, kept only under per-actor caps, is two keys in one slot (one hash tag,
-- the actor's digest): a sorted set of the actor's record keys, scored by the time each
-- record expires at the latest (ms), and a hash of the bytes each one's stored response
-- takes, with their sum in the field `total`. Its entries are pruned as they expire, and both
-- keys expire with the last of them, so an idle actor leaves nothing behind.
--
-- On a standalone server the record's own scripts keep it (the record at KEYS[1], the ledger
-- at KEYS[2] and KEYS[3]): a keyed create is then the claim and the completion, nothing more.
-- In a cluster the ledger's slot is the actor's, not the record's, and a script may not cross
-- slots: admit.lua and note.lua keep it there, one script before the claim and one after each
-- change.

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

-- Keeps both keys until the last entry expires, or deletes them when there is none. A
-- PEXPIREAT on a missing bytes hash does nothing: no need to ask first.
local function keep(set, bytes)
  local last = redis.call('ZRANGE', set, -1, -1, 'WITHSCORES')
  if #last == 0 then
    redis.call('DEL', set, bytes)
    return
  end
  redis.call('PEXPIREAT', set, last[2])
  redis.call('PEXPIREAT', bytes, last[2])
end

-- Sets the bytes of `member`'s stored response, keeping `total` their sum.
local function set_bytes(bytes, member, size)
  local old = tonumber(redis.call('HGET', bytes, member) or '0')
  if size > 0 then
    redis.call('HSET', bytes, member, size)
  elseif old > 0 then
    redis.call('HDEL', bytes, member)
  end
  if size ~= old then
    redis.call('HINCRBY', bytes, 'total', size - old)
  end
end

-- Whether `member` is counted already, after pruning what expired by `now`. An entry already
-- there stands for its record: a claim that replaces an expired one creates nothing more.
local function counted(set, bytes, member, now)
  prune(set, bytes, now)
  return redis.call('ZSCORE', set, member) ~= false
end

-- The caps' answer to one more record, not counted yet, that would live until `until_ms`:
-- nil when it fits under `max_records` and `max_bytes` (each '' for no cap, else an integer),
-- else {2, the actor's records with it, the bytes of their stored responses, ms until the
-- first of them expires}, from which the caller makes its error (src/caps.rs). The rule is
-- `ActorCaps::check`'s: refused past the record cap, or once the bytes reach the byte cap.
local function refusal(set, bytes, until_ms, now, max_records, max_bytes)
  local records = redis.call('ZCARD', set) + 1
  local total = tonumber(redis.call('HGET', bytes, 'total') or '0')
  if not ((max_records ~= '' and records > tonumber(max_records))
      or (max_bytes ~= '' and total >= tonumber(max_bytes))) then
    return nil
  end
  local first = redis.call('ZRANGE', set, 0, 0, 'WITHSCORES')
  local next_ms = until_ms
  if #first > 0 then
    next_ms = math.min(tonumber(first[2]), until_ms)
  end
  return {2, records, total, int(math.max(next_ms - now, 0))}
end

-- Follows a change of `member`'s record:
--   'stored'  completed: it lives until `until_ms` and keeps `size` bytes;
--   'renewed' claimed again, extended or released: it lives at least until `until_ms`;
--   'gone'    discarded or forgotten: its entry goes.
-- Expired entries are left to the next count, which prunes them first (`counted`): an entry
-- past its time changes no count and no key's expiry.
local function note(set, bytes, member, change, until_ms, size)
  if change == 'gone' then
    set_bytes(bytes, member, 0)
    redis.call('ZREM', set, member)
  elseif change == 'stored' then
    redis.call('ZADD', set, int(until_ms), member)
    set_bytes(bytes, member, size)
  else
    redis.call('ZADD', set, 'GT', int(until_ms), member)
  end
  keep(set, bytes)
end
