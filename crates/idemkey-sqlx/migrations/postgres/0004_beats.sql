-- Liveness judged against the heartbeats themselves, not the clock alone (behaviour §8a): each
-- owner's grace, and since when beats have come without a gap. An outage of the database, or
-- a step of the clock, stops every owner's beats at once; the first beat after it starts the
-- run again, and an owner is lapsed only once the run is a whole grace old.
ALTER TABLE idemkey_owners ADD COLUMN IF NOT EXISTS grace BIGINT NOT NULL DEFAULT 0;

CREATE TABLE IF NOT EXISTS idemkey_beats (
    id        SMALLINT NOT NULL PRIMARY KEY CHECK (id = 1),
    last_beat BIGINT   NOT NULL,
    since     BIGINT   NOT NULL
);
