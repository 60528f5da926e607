-- KEYS[1]: the record's hash.
-- ARGV[1]: actor, ARGV[2]: operation name, ARGV[3]: key.
-- Deletes the scope's record, whatever its state. Returns 1 if there was one, else 0.
if scoped(KEYS[1], ARGV[1], ARGV[2], ARGV[3]) == nil then
  return 0
end
redis.call('DEL', KEYS[1])
return 1
