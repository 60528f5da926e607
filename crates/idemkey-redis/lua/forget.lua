-- KEYS[1]: the record's hash; on a standalone server, KEYS[2] and KEYS[3]: the actor's
-- ledger (see ledger.lua), caps or not: a forget by a tool without caps makes room all the same.
-- ARGV[1]: actor, ARGV[2]: operation name, ARGV[3]: key, ARGV[4] (optional): a version.
-- Deletes the scope's record, whatever its state; with a version, only if that version wrote
-- it. Returns 1 if it deleted one, else 0.
local r = scoped(KEYS[1], ARGV[1], ARGV[2], ARGV[3])
if r == nil or (#ARGV >= 4 and r.v ~= ARGV[4]) then
  return 0
end
redis.call('DEL', KEYS[1])
if KEYS[2] ~= nil then
  note(KEYS[2], KEYS[3], KEYS[1], 'gone', 0, 0)
end
return 1
