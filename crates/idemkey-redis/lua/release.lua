-- KEYS[1]: the record's hash; under per-actor caps on a standalone server, KEYS[2] and
-- KEYS[3]: the actor's ledger (see ledger.lua).
-- ARGV[1]: actor, ARGV[2]: operation name, ARGV[3]: key, ARGV[4]: the claim's record id,
-- ARGV[5]: the claim's token, ARGV[6]: retention (ms), ARGV[7]: the claim's owner id (or '').
-- Gives the claim back without a response, keeping the record (and its id) for the retention
-- from now, if the claim still holds it. Returns 1, or 0 when fenced. The stale lease end
-- (`lu`) is left: it is read in flight only.
local now = now_ms()
if held(KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[7]) == nil then
  return 0
end
local exp = now + tonumber(ARGV[6])
expire_at(KEYS[1], exp, 'st', '1')
if KEYS[2] ~= nil then
  note(KEYS[2], KEYS[3], KEYS[1], 'renewed', exp, 0)
end
return 1
