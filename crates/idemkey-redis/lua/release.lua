-- KEYS[1]: the record's hash.
-- ARGV[1]: actor, ARGV[2]: operation name, ARGV[3]: key, ARGV[4]: the claim's record id,
-- ARGV[5]: the claim's token, ARGV[6]: retention (ms), ARGV[7]: the claim's owner id (or '').
-- Gives the claim back without a response, keeping the record (and its id) for the retention
-- from now, if the claim still holds it. Returns 1, or 0 when fenced.
local now = now_ms()
if held(KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[7]) == nil then
  return 0
end
redis.call('HSET', KEYS[1], 'st', '1')
redis.call('HDEL', KEYS[1], 'lu')
expire_at(KEYS[1], now + tonumber(ARGV[6]))
return 1
