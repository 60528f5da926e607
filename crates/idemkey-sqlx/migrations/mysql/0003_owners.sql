-- Each process's heartbeat (behaviour §8a): a claim that names its owner is stale once the
-- owner's alive_until (milliseconds since the Unix epoch, the database's clock) has passed,
-- whatever its lease, and may be taken over. A claim without an owner keeps its lease alone.
ALTER TABLE idemkey_records ADD COLUMN owner BINARY(16) NULL;

CREATE TABLE IF NOT EXISTS idemkey_owners (
    owner       BINARY(16) NOT NULL PRIMARY KEY,
    alive_until BIGINT     NOT NULL
) ENGINE = InnoDB;
