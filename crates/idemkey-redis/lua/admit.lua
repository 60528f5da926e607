-- KEYS[1]: the actor's ledger (sorted set), KEYS[2]: its bytes (hash).
-- ARGV[1]: the record's key, ARGV[2]: how long a new record may live (lease plus retention, ms).
-- Enters a record about to be claimed in the ledger, before the claim, so that the caps are
-- checked (by the caller, on the reply) before anything is created. An entry already there
-- stands as it is: its claim meets the live record, or replaces an expired one.
-- Returns {1} when the entry was there, else {2, the actor's records with this one, the bytes
-- of their stored responses, ms until the first of them expires}: a caller that refuses the
-- record takes its entry out again (note.lua's 'gone').
local now = now_ms()
prune(KEYS[1], KEYS[2], now)
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  return {1}
end
redis.call('ZADD', KEYS[1], int(now + tonumber(ARGV[2])), ARGV[1])
keep(KEYS[1], KEYS[2])
local records = redis.call('ZCARD', KEYS[1])
local total = tonumber(redis.call('HGET', KEYS[2], 'total') or '0')
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return {2, records, total, int(math.max(tonumber(first[2]) - now, 0))}
