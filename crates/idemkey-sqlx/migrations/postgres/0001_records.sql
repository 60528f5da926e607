-- idemkey's records. Times are milliseconds since the Unix epoch, from the database's clock
-- (clock_timestamp(), never the application's).
CREATE TABLE IF NOT EXISTS idemkey_records (
    -- "C": keys compare byte for byte, and the primary key needs no locale rules.
    actor       TEXT COLLATE "C" NOT NULL,
    operation   TEXT COLLATE "C" NOT NULL,
    idem_key    TEXT COLLATE "C" NOT NULL,
    record_id   BYTEA    NOT NULL,
    version     TEXT     NOT NULL,
    fingerprint BYTEA    NOT NULL,
    -- 0 in flight, 1 released, 2 completed
    state       SMALLINT NOT NULL CHECK (state IN (0, 1, 2)),
    token       BIGINT   NOT NULL,
    lease_until BIGINT,
    expires_at  BIGINT   NOT NULL,
    created_at  BIGINT   NOT NULL,
    request_id  TEXT,
    response    BYTEA,
    PRIMARY KEY (actor, operation, idem_key)
);

CREATE INDEX IF NOT EXISTS idemkey_records_expires_at ON idemkey_records (expires_at);
