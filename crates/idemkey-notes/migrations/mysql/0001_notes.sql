-- The notes service's business table. The CHECK mirrors the handler's title validation. The
-- actor is stored as bytes, as idemkey's scope is, so that the index fits InnoDB's key limit.
CREATE TABLE IF NOT EXISTS notes (
    id         VARCHAR(255)    NOT NULL PRIMARY KEY,
    actor      VARBINARY(2048) NOT NULL,
    title      VARCHAR(1000)   NOT NULL CHECK (CHAR_LENGTH(TRIM(title)) BETWEEN 1 AND 200),
    created_at VARCHAR(40)     NOT NULL,
    KEY notes_actor (actor, created_at)
) ENGINE = InnoDB DEFAULT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
