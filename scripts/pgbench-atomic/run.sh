#!/usr/bin/env bash
# Atomic mode's statement patterns against the key-less create, by pgbench on a PostgreSQL,
# without HTTP or Rust: what each pattern allows at best. TPS relative to base:
#   base                     BEGIN; note; COMMIT                                   (3 round trips)
#   commit_time              lookup; BEGIN; note; completed record; COMMIT         (5)  serve's default
#   commit_time_nolookup     BEGIN; note; completed record; COMMIT                 (4)  --no-lookup;
#                                                                                  also the ceiling's two-row transaction
#   claim_first              lookup; BEGIN; claim; note; completion; COMMIT        (6)  --strategy claim-first
#   claim_first_nolookup     BEGIN; claim; note; completion; COMMIT                (5)
#   *_pipelined              the same statements sent in one flight (pgbench's \startpipeline),
#                            which sqlx, the driver idemkey uses, cannot do
#   service_base             the notes service's key-less create, its own statement, on its own
#                            tables (the migrations, in a schema idemkey_pgbench)
#   service_commit_time      its keyed create as it sends it: the lookup and the record's upsert
#                            with the database's clock, the note, BEGIN and COMMIT
# Usage: run.sh [seconds] [clients] [rounds]; prints "round pattern tps" lines.
set -euo pipefail
cd "$(dirname "$0")"
T=${1:-8}; C=${2:-16}; R=${3:-3}; URL=${PGURL:-postgres://postgres@127.0.0.1:5432/test}
psql -q "$URL" -f setup.sql >/dev/null 2>&1
../pgbench-rounds.sh "$T" "$C" "$R" "pb_notes, pb_records" base commit_time \
  commit_time_nolookup claim_first claim_first_nolookup base_pipelined claim_first_pipelined
psql -q "$URL" -c 'DROP TABLE pb_notes, pb_records' >/dev/null 2>&1

# The service's own statements on its own tables.
export PGOPTIONS="-c search_path=idemkey_pgbench"
psql -q "$URL" -c 'DROP SCHEMA IF EXISTS idemkey_pgbench CASCADE' -c 'CREATE SCHEMA idemkey_pgbench' >/dev/null 2>&1
psql -q "$URL" -f ../../crates/idemkey-sqlx/migrations/postgres/0001_records.sql >/dev/null 2>&1
psql -q "$URL" -f ../../crates/idemkey-notes/migrations/postgres/0001_notes.sql >/dev/null 2>&1
../pgbench-rounds.sh "$T" "$C" "$R" "" service_base service_commit_time
psql -q "$URL" -c 'DROP SCHEMA idemkey_pgbench CASCADE' >/dev/null 2>&1
