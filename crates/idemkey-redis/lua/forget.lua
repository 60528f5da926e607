-- KEYS[1]: the record's hash.
-- ARGV[1]: actor, ARGV[2]: operation name, ARGV[3]: key, ARGV[4] (optional): a version.
-- Deletes the scope's record, whatever its state; with a version, only if that version wrote
-- it. Returns 1 if it deleted one, else 0.
local r = scoped(KEYS[1], ARGV[1], ARGV[2], ARGV[3])
if r == nil or (#ARGV >= 4 and r.v ~= ARGV[4]) then
  return 0
end
redis.call('DEL', KEYS[1])
return 1
