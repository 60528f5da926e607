DROP TABLE IF EXISTS pb_notes, pb_records;
CREATE TABLE pb_notes (id bigint PRIMARY KEY, actor text NOT NULL, title text NOT NULL CHECK (length(title) BETWEEN 1 AND 200), created_at bigint NOT NULL);
CREATE TABLE pb_records (actor text COLLATE "C" NOT NULL, operation text COLLATE "C" NOT NULL, key text COLLATE "C" NOT NULL,
  record_id bigint NOT NULL, token bigint NOT NULL, state smallint NOT NULL, fingerprint bytea NOT NULL, version text NOT NULL,
  lease_until bigint, expires_at bigint, response bytea, PRIMARY KEY (actor, operation, key));
CREATE INDEX ON pb_records (expires_at);
