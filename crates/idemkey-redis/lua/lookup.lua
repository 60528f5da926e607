-- KEYS[1]: the record's hash.
-- ARGV[1]: actor, ARGV[2]: operation name, ARGV[3]: key.
-- Returns the live record (see `reply`), or nil when there is none or it expired.
local now = now_ms()
local r = live(KEYS[1], ARGV[1], ARGV[2], ARGV[3], now)
if r == nil then
  return false
end
return reply(r, now)
