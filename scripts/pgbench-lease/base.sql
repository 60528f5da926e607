\set n random(1, 9000000000000)
BEGIN;
INSERT INTO pl_notes VALUES (:n, 'alice', 'bench note', 1);
COMMIT;
