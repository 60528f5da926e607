-- KEYS[1]: the record's hash; under per-actor caps on a standalone server, KEYS[2] and
-- KEYS[3]: the actor's ledger (see ledger.lua).
-- ARGV[1]: actor, ARGV[2]: operation name, ARGV[3]: key, ARGV[4]: the new record id,
-- ARGV[5]: version, ARGV[6]: fingerprint, ARGV[7]: lease (ms), ARGV[8]: retention (ms),
-- ARGV[9]: '1' if there is a request id, else '0', ARGV[10]: the request id (or ''),
-- ARGV[11]: the key of the owner's heartbeat (or '' for none), ARGV[12]: the owner id (or ''),
-- with a ledger: ARGV[13]: the record cap, ARGV[14]: the byte cap (each '' for none).
-- Returns {1, token} after claiming: no live record existed, or an expired one was replaced
-- (under the new id). Returns {0, record} when a live record exists (see `reply`), cap or
-- not. Returns the caps' refusal (see `refusal`) having written nothing of the record.
local now = now_ms()
local ledger = KEYS[2] ~= nil
local old = scoped(KEYS[1], ARGV[1], ARGV[2], ARGV[3])
if old ~= nil and tonumber(old.exp) > now then
  -- A live record counts whatever the ledger says: one it lacks (caps set since, an entry
  -- lost) is entered as it is, so that the ledger errs on the side of the cap.
  if ledger and redis.call('ZADD', KEYS[2], 'NX', old.exp, KEYS[1]) == 1 then
    set_bytes(KEYS[3], KEYS[1], #(old.resp or ''))
    keep(KEYS[2], KEYS[3])
  end
  return {0, reply(old, now)}
end
local lease_until = now + tonumber(ARGV[7])
-- Like the SQL stores: an in-flight record lives for its lease plus the retention, so that
-- the key outlives the lease even with a retention of zero.
local exp = lease_until + tonumber(ARGV[8])
if ledger then
  -- Checked before anything is written, in the script that creates the record: a refused
  -- request creates nothing, and concurrent ones are counted one at a time.
  if counted(KEYS[2], KEYS[3], KEYS[1], now) then
    -- The expired record's entry stands for this one, without its response.
    set_bytes(KEYS[3], KEYS[1], 0)
  else
    local refused = refusal(KEYS[2], KEYS[3], exp, now, ARGV[13], ARGV[14])
    if refused ~= nil then
      return refused
    end
  end
end
-- An expired record's fields (its response) must not leak into the new one.
if old ~= nil then
  redis.call('DEL', KEYS[1])
end
-- One HSET for every field, the expiry's included.
local fields = {'a', ARGV[1], 'o', ARGV[2], 'k', ARGV[3], 'id', ARGV[4], 'v', ARGV[5],
  'fp', ARGV[6], 'st', '0', 'tok', '1', 'lu', int(lease_until), 'exp', int(exp)}
local function add(name, value)
  fields[#fields + 1] = name
  fields[#fields + 1] = value
end
if ARGV[9] == '1' then
  add('rq', ARGV[10])
end
if ARGV[11] ~= '' then
  add('ow', ARGV[11])
  add('ot', '1')
end
if ARGV[12] ~= '' then
  add('of', ARGV[12])
end
redis.call('HSET', KEYS[1], unpack(fields))
redis.call('PEXPIREAT', KEYS[1], int(exp))
if ledger then
  -- Pruned above already: the entry lives at least as long as the record.
  redis.call('ZADD', KEYS[2], 'GT', int(exp), KEYS[1])
  keep(KEYS[2], KEYS[3])
end
return {1, 1}
