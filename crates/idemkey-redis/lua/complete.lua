-- KEYS[1]: the record's hash; under per-actor caps on a standalone server, KEYS[2] and
-- KEYS[3]: the actor's ledger (see ledger.lua).
-- ARGV[1]: actor, ARGV[2]: operation name, ARGV[3]: key, ARGV[4]: the claim's record id,
-- ARGV[5]: the claim's token, ARGV[6]: the encoded response, ARGV[7]: retention (ms),
-- ARGV[8]: how long the completer will wait for replicas or an fsync (ms, '0' for no wait),
-- ARGV[9]: the claim's owner id (or '').
-- Stores the response and completes the record, kept for the retention from now, if the
-- claim still holds it; with a wait, marks it as waiting (`dw`) until `durable.lua` or the
-- wait's end; with a ledger, enters the response's bytes there. Returns 1, or 0 when fenced.
-- The stale lease end (`lu`) is left: it is read in flight only.
local now = now_ms()
if held(KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[9]) == nil then
  return 0
end
local exp = now + tonumber(ARGV[7])
if tonumber(ARGV[8]) > 0 then
  expire_at(KEYS[1], exp, 'st', '2', 'resp', ARGV[6], 'dw', int(now + tonumber(ARGV[8])))
else
  expire_at(KEYS[1], exp, 'st', '2', 'resp', ARGV[6])
end
if KEYS[2] ~= nil then
  note(KEYS[2], KEYS[3], KEYS[1], 'stored', exp, #ARGV[6])
end
return 1
