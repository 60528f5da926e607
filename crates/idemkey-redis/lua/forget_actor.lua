-- KEYS[1]: a key SCAN found under the store's prefix, that may be any actor's record.
-- ARGV[1]: the actor.
-- Deletes the record if it is the actor's and completed, or expired (Redis would delete it
-- anyway). Returns 1 if it deleted it, 2 if it is the actor's and kept (live, in flight or
-- released: no response to replay), 0 otherwise (another actor's, or gone since the scan).
-- Only the fields it needs are read: a completed record's response may be large.
local f = redis.call('HMGET', KEYS[1], 'a', 'st', 'exp')
if f[1] ~= ARGV[1] then
  return 0
end
local exp = tonumber(f[3])
if f[2] == '2' or (exp ~= nil and exp <= now_ms()) then
  redis.call('DEL', KEYS[1])
  return 1
end
return 2
