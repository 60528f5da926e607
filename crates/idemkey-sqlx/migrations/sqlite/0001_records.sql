-- idemkey's records. Times are milliseconds since the Unix epoch, from the database's clock.
CREATE TABLE IF NOT EXISTS idemkey_records (
    actor       TEXT    NOT NULL,
    operation   TEXT    NOT NULL,
    idem_key    TEXT    NOT NULL,
    record_id   BLOB    NOT NULL,
    version     TEXT    NOT NULL,
    fingerprint BLOB    NOT NULL,
    -- 0 in flight, 1 released, 2 completed
    state       INTEGER NOT NULL CHECK (state IN (0, 1, 2)),
    token       INTEGER NOT NULL,
    lease_until INTEGER,
    expires_at  INTEGER NOT NULL,
    created_at  INTEGER NOT NULL,
    request_id  TEXT,
    response    BLOB,
    PRIMARY KEY (actor, operation, idem_key)
);

CREATE INDEX IF NOT EXISTS idemkey_records_expires_at ON idemkey_records (expires_at);
