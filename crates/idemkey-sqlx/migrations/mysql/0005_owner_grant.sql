-- The grant a claim's owner was named for (behaviour §8a): an owner is trusted, and its lapsed
-- heartbeat makes the claim stale, only while the record's id and token are still those it
-- was named with. A binary from before these columns takes a claim over without naming
-- itself, or claims an expired row leaving the old owner in place; such a claim then keeps
-- its lease rather than being taken from a live process because a dead one is named.
ALTER TABLE idemkey_records ADD COLUMN owner_record BINARY(16) NULL,
    ADD COLUMN owner_token BIGINT NULL;
