-- KEYS[1]: the record's hash; under per-actor caps on a standalone server, KEYS[2] and
-- KEYS[3]: the actor's ledger (see ledger.lua).
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
local exp = lease_until + tonumber(ARGV[7])
-- One HSET and at most one HDEL: the owner fields are set anew, or dropped.
local set = {'st', '0', 'tok', int(token), 'lu', int(lease_until)}
local drop = {}
if ARGV[8] ~= '' then
  table.insert(set, 'ow'); table.insert(set, ARGV[8])
  table.insert(set, 'ot'); table.insert(set, int(token))
elseif r.ow ~= nil or r.ot ~= nil then
  drop = {'ow', 'ot'}
end
if ARGV[9] ~= '' then
  table.insert(set, 'of'); table.insert(set, ARGV[9])
elseif r.of ~= nil then
  table.insert(drop, 'of')
end
if #drop > 0 then
  redis.call('HDEL', KEYS[1], unpack(drop))
end
expire_at(KEYS[1], exp, unpack(set))
if KEYS[2] ~= nil then
  note(KEYS[2], KEYS[3], KEYS[1], 'renewed', exp, 0)
end
return token
