-- The notes service's business table. The CHECK mirrors the handler's title validation.
CREATE TABLE IF NOT EXISTS notes (
    id         TEXT NOT NULL PRIMARY KEY,
    actor      TEXT NOT NULL,
    title      TEXT NOT NULL CHECK (length(trim(title)) BETWEEN 1 AND 200),
    created_at TEXT NOT NULL
);

CREATE INDEX IF NOT EXISTS notes_actor ON notes (actor, created_at);
