\set n random(1, 9000000000000)
INSERT INTO pl_records VALUES ('alice','create-note','k' || :n, :n, 1, 0, '\x0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f20', 'v1', 100, 200, NULL) ON CONFLICT DO NOTHING RETURNING record_id;
BEGIN;
INSERT INTO pl_notes VALUES (:n, 'alice', 'bench note', 1);
UPDATE pl_records SET state=2, response='\x494b5231000000c9000000020000000c636f6e74656e742d74797065000000106170706c69636174696f6e2f6a736f6e', lease_until=NULL, expires_at=999 WHERE actor='alice' AND operation='create-note' AND key='k' || :n AND record_id=:n AND token=1 AND state=0;
COMMIT;
