-- KEYS[1]: the record's hash.
-- ARGV[1]: actor, ARGV[2]: operation name, ARGV[3]: key, ARGV[4]: the claim's record id,
-- ARGV[5]: the claim's token, ARGV[6]: the encoded response, ARGV[7]: retention (ms),
-- ARGV[8]: how long the completer will wait for replicas or an fsync (ms, '0' for no wait),
-- ARGV[9]: the claim's owner id (or '').
-- Stores the response and completes the record, kept for the retention from now, if the
-- claim still holds it; with a wait, marks it as waiting (`dw`) until `durable.lua` or the
-- wait's end. Returns 1, or 0 when fenced.
local now = now_ms()
if held(KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[9]) == nil then
  return 0
end
redis.call('HSET', KEYS[1], 'st', '2', 'resp', ARGV[6])
redis.call('HDEL', KEYS[1], 'lu')
if tonumber(ARGV[8]) > 0 then
  redis.call('HSET', KEYS[1], 'dw', int(now + tonumber(ARGV[8])))
end
expire_at(KEYS[1], now + tonumber(ARGV[7]))
return 1
