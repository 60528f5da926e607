-- KEYS[1]: the actor's ledger (sorted set), KEYS[2]: its bytes (hash).
-- ARGV[1]: the record's key, ARGV[2]: what changed, ARGV[3]: how long the record now lives
-- at most (ms), ARGV[4]: its stored response's bytes (`stored` only).
-- Follows a change the record's own script made:
--   'stored'  completed: it lives the retention from now and keeps ARGV[4] bytes;
--   'renewed' claimed again, extended or released: it lives at least until ARGV[3] from now;
--   'gone'    discarded or forgotten: its entry goes.
-- Returns 1.
local now = now_ms()
local member = ARGV[1]
if ARGV[2] == 'gone' then
  set_bytes(KEYS[2], member, 0)
  redis.call('ZREM', KEYS[1], member)
else
  local until_ms = int(now + tonumber(ARGV[3]))
  if ARGV[2] == 'stored' then
    redis.call('ZADD', KEYS[1], until_ms, member)
    set_bytes(KEYS[2], member, tonumber(ARGV[4]))
  else
    redis.call('ZADD', KEYS[1], 'GT', until_ms, member)
  end
end
prune(KEYS[1], KEYS[2], now)
keep(KEYS[1], KEYS[2])
return 1
