-- KEYS[1]: the record's hash; under per-actor caps on a standalone server, KEYS[2] and
-- KEYS[3]: the actor's ledger (see ledger.lua).
-- ARGV[1]: actor, ARGV[2]: operation name, ARGV[3]: key, ARGV[4]: the claim's record id,
-- ARGV[5]: the claim's token, ARGV[6]: lease (ms), ARGV[7]: retention (ms), ARGV[8]: the claim's
-- owner id (or '').
-- Renews the lease for another lease from now (and the expiry to the lease plus the
-- retention, as a claim sets it), if the claim still holds it. Returns 1, or 0 when fenced.
local now = now_ms()
if held(KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[8]) == nil then
  return 0
end
local lease_until = now + tonumber(ARGV[6])
local exp = lease_until + tonumber(ARGV[7])
expire_at(KEYS[1], exp, 'lu', int(lease_until))
if KEYS[2] ~= nil then
  note(KEYS[2], KEYS[3], KEYS[1], 'renewed', exp, 0)
end
return 1
