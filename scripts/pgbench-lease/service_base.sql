\set n random(1, 9000000000000)
BEGIN;
INSERT INTO notes (id, actor, title, created_at) VALUES ('n' || :n, 'bench', 'bench note', '2026-12-01T11:37:20.881Z');
COMMIT;
