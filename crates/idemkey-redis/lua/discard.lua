-- KEYS[1]: the record's hash; under per-actor caps on a standalone server, KEYS[2] and
-- KEYS[3]: the actor's ledger (see ledger.lua).
-- ARGV[1]: actor, ARGV[2]: operation name, ARGV[3]: key, ARGV[4]: the claim's record id,
-- ARGV[5]: the claim's token, ARGV[6]: the claim's owner id (or '').
-- Deletes the record if the claim still holds it, and its ledger entry. Returns 1, or 0 when
-- fenced.
if held(KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]) == nil then
  return 0
end
redis.call('DEL', KEYS[1])
if KEYS[2] ~= nil then
  note(KEYS[2], KEYS[3], KEYS[1], 'gone', 0, 0)
end
return 1
