-- KEYS[1]: the actor's ledger (sorted set), KEYS[2]: its bytes (hash).
-- ARGV[1]: the record's key, ARGV[2]: how long a new record may live (lease plus retention,
-- ms), ARGV[3]: the record cap ('' for none), ARGV[4]: the byte cap ('' for none).
-- In a cluster only (see ledger.lua): enters a record about to be claimed in the ledger, if
-- the caps let it in, before the claim, so that a refused request creates nothing. Checked
-- and entered in one script, so concurrent requests are counted one at a time.
-- Returns {1} when the record is counted (entered now, or there already), else the refusal
-- (see `refusal`), having entered nothing.
local now = now_ms()
if counted(KEYS[1], KEYS[2], ARGV[1], now) then
  return {1}
end
local until_ms = now + tonumber(ARGV[2])
local refused = refusal(KEYS[1], KEYS[2], until_ms, now, ARGV[3], ARGV[4])
if refused ~= nil then
  return refused
end
redis.call('ZADD', KEYS[1], int(until_ms), ARGV[1])
keep(KEYS[1], KEYS[2])
return {1}
