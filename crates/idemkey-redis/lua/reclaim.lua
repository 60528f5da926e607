-- KEYS[1]: the record's hash.
-- ARGV[1]: actor, ARGV[2]: operation name, ARGV[3]: key, ARGV[4]: the record id seen,
-- ARGV[5]: the token seen, ARGV[6]: lease (ms), ARGV[7]: retention (ms), ARGV[8]: the key of
-- the owner's heartbeat (or '' for none), ARGV[9]: the owner id (or '').
-- Claims the record again under the next token, keeping its id, if it is still as seen (same
-- id and token) and live, and either released or in flight with an expired lease or a lapsed
-- owner.
-- Returns the new token, or nil when the record changed in between.
local now = now_ms()
local r = live(KEYS[1], ARGV[1], ARGV[2], ARGV[3], now)
if r == nil or r.id ~= ARGV[4] or tonumber(r.tok) ~= tonumber(ARGV[5]) then
  return false
end
if not (r.st == '1' or (r.st == '0' and (tonumber(r.lu) <= now or owner_lapsed(r, now)))) then
  return false
end
local token = tonumber(r.tok) + 1
local lease_until = now + tonumber(ARGV[6])
redis.call('HSET', KEYS[1], 'st', '0', 'tok', int(token), 'lu', int(lease_until))
if ARGV[8] ~= '' then
  redis.call('HSET', KEYS[1], 'ow', ARGV[8], 'ot', int(token))
else
  redis.call('HDEL', KEYS[1], 'ow', 'ot')
end
if ARGV[9] ~= '' then
  redis.call('HSET', KEYS[1], 'of', ARGV[9])
else
  redis.call('HDEL', KEYS[1], 'of')
end
expire_at(KEYS[1], lease_until + tonumber(ARGV[7]))
return token
