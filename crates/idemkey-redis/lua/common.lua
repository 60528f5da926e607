-- Shared by every script: src/scripts.rs puts it before each one (after the shebang line).
--
-- A record is one hash. Its fields:
--   a, o, k  the scope (actor, operation name, key), compared on every access, so that two
--            scopes whose digests collided are never confused;
--   id       the record id (16 bytes);  v  the operation version;  fp  the fingerprint (32 bytes);
--   st       0 in flight, 1 released, 2 completed;  tok  the fencing token;
--   lu       lease until (ms; read in flight only, left stale after a completion or release);
--   exp      expires at (ms), also the key's PEXPIREAT;
--   rq       the request id (absent if none);  resp  the encoded response (completed only);
--   ow       the key of the claim's owner's heartbeat (absent if the claim names no owner);
--   ot       the token `ow` was set with: the owner is trusted only for that grant (a script
--            from before this field took claims over without naming itself);
--   of       the claim's owner id as its fence (absent if the claim names no owner): with the
--            id and token, what a fenced script must match, heartbeats or not;
--   dw       (completed only) until when (ms) the completion's wait for replicas or an fsync
--            may still run: absent once it is done, or if the store does not wait.

-- The server's clock in milliseconds: every time is the server's, never the application's.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- An integer as a Redis argument: Lua would write a large number in exponent form.
local function int(n)
  return string.format('%d', n)
end

-- The hash at `key` as a table of fields, or nil when there is none.
local function load(key)
  local flat = redis.call('HGETALL', key)
  if #flat == 0 then
    return nil
  end
  local r = {}
  for i = 1, #flat, 2 do
    r[flat[i]] = flat[i + 1]
  end
  return r
end

-- Stops the script, before it writes anything, when the hash is not this scope's record.
local function check(r, actor, op, idem)
  if r.a ~= actor or r.o ~= op or r.k ~= idem then
    error({err = 'IDEMKEY_SCOPE the record hash belongs to another scope (digest collision)'})
  end
  if not (tonumber(r.exp) and tonumber(r.tok) and tonumber(r.st) and r.id and r.v and r.fp) then
    error({err = 'IDEMKEY_CORRUPT the record hash lacks a field'})
  end
end

-- The scope's record whatever its expiry, or nil.
local function scoped(key, actor, op, idem)
  local r = load(key)
  if r ~= nil then
    check(r, actor, op, idem)
  end
  return r
end

-- The scope's live record, or nil: an expired record is absent, whether Redis has deleted
-- its key yet or not.
local function live(key, actor, op, idem, now)
  local r = scoped(key, actor, op, idem)
  if r == nil or tonumber(r.exp) <= now then
    return nil
  end
  return r
end

-- The record the claim (id, token, its owner id or '') still holds, in
-- flight, or nil: the grant given again to another owner fences it off too. Like the SQL
-- stores' fenced statements, expiry is not checked here: only a takeover or a deletion
-- fences a claim.
local function held(key, actor, op, idem, id, token, owner)
  local r = scoped(key, actor, op, idem)
  if r == nil or r.id ~= id or tonumber(r.tok) ~= tonumber(token) or r.st ~= '0' then
    return nil
  end
  if (r.of or '') ~= owner then
    return nil
  end
  return r
end

-- An owner's heartbeat key's "<alive until>,<grace>" (ms): until when the owner is alive, and
-- its grace (0 if the key predates graces); nil without a key.
local function heartbeat(key)
  local value = redis.call('GET', key)
  if not value then
    return nil, nil
  end
  local alive_until, grace = string.match(value, '^(%d+),(%d+)$')
  if alive_until == nil then
    return tonumber(value), 0
  end
  return tonumber(alive_until), tonumber(grace)
end

-- Whether the in-flight record's claim names an owner whose last heartbeat (the key `ow`) has
-- lapsed (behaviour §8a): the claim is then stale, whatever its lease. Lapsed means past its
-- alive-until while beats (any owner's, `{prefix}:beats`) have come without a gap for a whole
-- grace of its own: after an outage that stopped every beat, no owner is lapsed before the
-- others had a grace to beat again; and the run must be unbroken now (a beat within two fifths
-- of the grace), so that before the first beat after an outage or a step of the server's
-- clock nobody is lapsed either. An owner without a heartbeat key leaves the claim to its
-- lease. Standalone servers only: the heartbeat keys are in other slots than the record.
local function owner_lapsed(r, now)
  if r.ow == nil or r.ot ~= r.tok then
    return false
  end
  local alive_until, grace = heartbeat(r.ow)
  if alive_until == nil or alive_until > now then
    return false
  end
  local prefix = string.match(r.ow, '^(.*):owner:%x+$')
  if prefix == nil then
    return false
  end
  local run = redis.call('HMGET', prefix .. ':beats', 'since', 'last')
  local since, last = tonumber(run[1]), tonumber(run[2])
  return since ~= nil and since + grace <= now and last ~= nil and last + grace * 2 / 5 > now
end

-- The record as src/record.rs reads it. `false` stands for an absent field: a nil would end
-- the array. A completion whose wait may still run is state 3, with the wait's time left as
-- its lease: nobody answers from it before it is as durable as the store was asked to make
-- it (its completer marks it done after the wait; past `dw` the wait has ended either way).
local function reply(r, now)
  local lease = 0
  local st = tonumber(r.st)
  if r.st == '0' and not owner_lapsed(r, now) then
    lease = math.max(tonumber(r.lu) - now, 0)
  elseif r.st == '2' and tonumber(r.dw) ~= nil and tonumber(r.dw) > now then
    st = 3
    lease = tonumber(r.dw) - now
  end
  return {r.id, r.v, r.fp, st, tonumber(r.tok), lease, r.rq or false, r.resp or false}
end

-- Sets the record's expiry to `exp`, in the hash and as the key's own expiry, so that Redis
-- deletes it then without a sweep. An instant already past deletes the key at once, which is
-- what an expired record is: absent. The other fields to set (name, value, ...) go in the
-- same HSET.
local function expire_at(key, exp, ...)
  redis.call('HSET', key, 'exp', int(exp), ...)
  redis.call('PEXPIREAT', key, int(exp))
end
