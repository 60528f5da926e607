-- KEYS[1]: the owner's heartbeat key, KEYS[2]: the run of beats (`{prefix}:beats`).
-- ARGV[1]: the grace (ms).
-- The owner is alive until the grace from now, by the server's clock, never earlier than an
-- earlier beat said (a step back of the server's clock must not shorten it); the key holds
-- "<alive until>,<grace>" and goes a day after that, as the SQL stores sweep their owners'
-- rows. The run of beats (`since`, `last`) goes on, or starts again now after a gap longer
-- than two fifths of the grace (an owner beats every quarter): see `owner_lapsed`.
local now = now_ms()
local grace = tonumber(ARGV[1])
local alive_until = now + grace
local before = heartbeat(KEYS[1])
if before ~= nil and before > alive_until then
  alive_until = before
end
redis.call('SET', KEYS[1], int(alive_until) .. ',' .. int(grace), 'PX',
  int(alive_until - now + 86400000))
local last = tonumber(redis.call('HGET', KEYS[2], 'last'))
if last == nil or now - last > grace * 2 / 5 then
  redis.call('HSET', KEYS[2], 'since', int(now))
end
if last == nil or now > last then
  redis.call('HSET', KEYS[2], 'last', int(now))
end
return 1
