-- KEYS[1]: the record's hash.
-- ARGV[1]: actor, ARGV[2]: operation name, ARGV[3]: key, ARGV[4]: the new record id,
-- ARGV[5]: version, ARGV[6]: fingerprint, ARGV[7]: lease (ms), ARGV[8]: retention (ms),
-- ARGV[9]: '1' if there is a request id, else '0', ARGV[10]: the request id (or ''),
-- ARGV[11]: the key of the owner's heartbeat (or '' for none), ARGV[12]: the owner id (or '').
-- Returns {1, token} after claiming: no live record existed, or an expired one was replaced
-- (under the new id). Returns {0, record} when a live record exists (see `reply`).
local now = now_ms()
local r = live(KEYS[1], ARGV[1], ARGV[2], ARGV[3], now)
if r ~= nil then
  return {0, reply(r, now)}
end
local lease_until = now + tonumber(ARGV[7])
-- Like the SQL stores: an in-flight record lives for its lease plus the retention, so that
-- the key outlives the lease even with a retention of zero.
local exp = lease_until + tonumber(ARGV[8])
-- An expired record's fields (its response) must not leak into the new one.
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'a', ARGV[1], 'o', ARGV[2], 'k', ARGV[3], 'id', ARGV[4],
  'v', ARGV[5], 'fp', ARGV[6], 'st', '0', 'tok', '1', 'lu', int(lease_until))
if ARGV[9] == '1' then
  redis.call('HSET', KEYS[1], 'rq', ARGV[10])
end
if ARGV[11] ~= '' then
  redis.call('HSET', KEYS[1], 'ow', ARGV[11], 'ot', '1')
end
if ARGV[12] ~= '' then
  redis.call('HSET', KEYS[1], 'of', ARGV[12])
end
expire_at(KEYS[1], exp)
return {1, 1}
