-- idemkey's records. Times are milliseconds since the Unix epoch, from the database's clock
-- (UTC_TIMESTAMP(6) of each statement, never the application's).
CREATE TABLE IF NOT EXISTS idemkey_records (
    -- Binary strings holding the scope's UTF-8 bytes: they compare byte for byte (`Key-A` and
    -- `key-a` are two keys), and without the trailing-space padding of MySQL's utf8mb4_bin.
    -- 2048 + 512 + 255 bytes stay within InnoDB's 3072-byte index key (DYNAMIC rows); the
    -- store refuses a longer actor or operation name before writing.
    actor       VARBINARY(2048) NOT NULL,
    operation   VARBINARY(512)  NOT NULL,
    idem_key    VARBINARY(255)  NOT NULL,
    record_id   BINARY(16)      NOT NULL,
    version     TEXT            NOT NULL,
    fingerprint BINARY(32)      NOT NULL,
    -- 0 in flight, 1 released, 2 completed
    state       SMALLINT        NOT NULL CHECK (state IN (0, 1, 2)),
    token       BIGINT          NOT NULL,
    lease_until BIGINT,
    expires_at  BIGINT          NOT NULL,
    created_at  BIGINT          NOT NULL,
    request_id  VARCHAR(128),
    response    LONGBLOB,
    PRIMARY KEY (actor, operation, idem_key),
    KEY idemkey_records_expires_at (expires_at)
) ENGINE = InnoDB ROW_FORMAT = DYNAMIC DEFAULT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
