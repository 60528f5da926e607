-- The secret behind derived keys (one row): made once, kept with the records, so that every
-- process on this database derives the same keys across restarts.
CREATE TABLE IF NOT EXISTS idemkey_secret (
    id     SMALLINT       NOT NULL PRIMARY KEY CHECK (id = 1),
    secret VARBINARY(255) NOT NULL
) ENGINE = InnoDB;
