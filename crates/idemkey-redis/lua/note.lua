-- KEYS[1]: the actor's ledger (sorted set), KEYS[2]: its bytes (hash).
-- ARGV[1]: the record's key, ARGV[2]: what changed ('stored', 'renewed' or 'gone', see
-- `note`), ARGV[3]: how long the record now lives at most (ms), ARGV[4]: its stored
-- response's bytes ('stored' only).
-- In a cluster only (see ledger.lua): follows a change the record's own script made.
-- Returns 1.
local now = now_ms()
note(KEYS[1], KEYS[2], ARGV[1], ARGV[2], now + tonumber(ARGV[3]), tonumber(ARGV[4]))
return 1
