-- KEYS[1]: the record's hash.
-- ARGV[1]: actor, ARGV[2]: operation name, ARGV[3]: key.
-- Returns {record, ms left before it expires} for a live record (see `reply`), or nil.
-- Read by the replay cache (src/cache.rs) on its tracking connection: the `HGETALL` of `load`
-- is what makes the server send an invalidation when the key changes afterwards.
local now = now_ms()
local r = live(KEYS[1], ARGV[1], ARGV[2], ARGV[3], now)
if r == nil then
  return false
end
return {reply(r, now), tonumber(r.exp) - now}
