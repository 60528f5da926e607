-- KEYS[1]: the record's hash.
-- ARGV[1]: actor, ARGV[2]: operation name, ARGV[3]: key, ARGV[4]: the claim's record id,
-- ARGV[5]: the claim's token.
-- After the completion's wait: the completion may be answered from. Returns 1, or 0 when the
-- record is no longer this claim's completion (forgotten, expired) or was marked already.
local r = scoped(KEYS[1], ARGV[1], ARGV[2], ARGV[3])
if r == nil or r.id ~= ARGV[4] or tonumber(r.tok) ~= tonumber(ARGV[5]) or r.st ~= '2'
    or r.dw == nil then
  return 0
end
redis.call('HDEL', KEYS[1], 'dw')
return 1
