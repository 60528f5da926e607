-- Owners' heartbeats judged by the host's steady clock, not its wall clock (behaviour §8a):
-- every process on a SQLite file runs on one host, whose steady clock no step of the wall
-- clock moves, so that one process's clock jumping forward lapses no live owner. The wall
-- clock columns stay, written as before, for binaries that judge by them; a row that a
-- binary from before this migration wrote has no steady mark and leaves its claims to their
-- leases.
ALTER TABLE idemkey_owners ADD COLUMN steady_until INTEGER;
ALTER TABLE idemkey_beats ADD COLUMN steady_last INTEGER;
ALTER TABLE idemkey_beats ADD COLUMN steady_since INTEGER;
