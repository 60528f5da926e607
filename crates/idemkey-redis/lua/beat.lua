-- KEYS[1]: the owner's heartbeat key.
-- ARGV[1]: the grace (ms).
-- The owner is alive until the grace from now, by the server's clock, never earlier than an
-- earlier beat said (a step back of the server's clock must not shorten it); the key itself
-- goes a day after that, as the SQL stores sweep their owners' rows.
local now = now_ms()
local alive_until = now + tonumber(ARGV[1])
local before = tonumber(redis.call('GET', KEYS[1]))
if before ~= nil and before > alive_until then
  alive_until = before
end
redis.call('SET', KEYS[1], int(alive_until), 'PX', int(alive_until - now + 86400000))
return 1
