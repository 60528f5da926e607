-- KEYS[1]: the owner's heartbeat key.
-- ARGV[1]: the grace (ms).
-- The owner is alive until the grace from now, by the server's clock; the key itself goes a
-- day after that, as the SQL stores sweep their owners' rows.
local alive_until = now_ms() + tonumber(ARGV[1])
redis.call('SET', KEYS[1], int(alive_until), 'PX', int(tonumber(ARGV[1]) + 86400000))
return 1
