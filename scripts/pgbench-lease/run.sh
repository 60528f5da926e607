#!/usr/bin/env bash
# Lease mode's statement patterns against the key-less create, by pgbench on a PostgreSQL
# (the target is lease mode ≥ 0.45; two commits against one is the floor of the design):
#   base                   BEGIN; note; COMMIT                                  (1 commit)
#   lease_today            lookup; claim; BEGIN; note; COMMIT; completion       (3 commits)
#   lease_folded           lookup; claim; BEGIN; note; completion; COMMIT       (2 commits)
#   lease_folded_nolookup  claim; BEGIN; note; completion; COMMIT               (2 commits)
# "folded" is the completion riding in the handler's own transaction, fenced by token (serve's
# default). Then the service's own statements on its own tables:
#   service_base           the notes service's key-less create (as in scripts/pgbench-atomic)
#   service_lease          its keyed lease create as it sends it: the lookup, the claim with the
#                          database's clock (a commit of its own), BEGIN, the note, the fenced
#                          completion, COMMIT
#   service_lease_hot      the same, the completion keeping expires_at unless it must grow
#                          (GREATEST), so that PostgreSQL can update the row in place (HOT: the
#                          expires_at index is not touched); not built, see BENCHMARKS.md
# Usage: run.sh [seconds] [clients] [rounds]; prints TPS per pattern per round.
set -euo pipefail
cd "$(dirname "$0")"
T=${1:-8}; C=${2:-16}; R=${3:-3}; URL=${PGURL:-postgres://postgres@127.0.0.1:5432/test}
psql -q "$URL" -f setup.sql >/dev/null 2>&1
../pgbench-rounds.sh "$T" "$C" "$R" "pl_notes, pl_records" base lease_today lease_folded \
  lease_folded_nolookup
psql -q "$URL" -c 'DROP TABLE pl_notes, pl_records' >/dev/null 2>&1

# The service's own statements on its own tables.
export PGOPTIONS="-c search_path=idemkey_pgbench"
psql -q "$URL" -c 'DROP SCHEMA IF EXISTS idemkey_pgbench CASCADE' -c 'CREATE SCHEMA idemkey_pgbench' >/dev/null 2>&1
psql -q "$URL" -f ../../crates/idemkey-sqlx/migrations/postgres/0001_records.sql >/dev/null 2>&1
psql -q "$URL" -f ../../crates/idemkey-notes/migrations/postgres/0001_notes.sql >/dev/null 2>&1
../pgbench-rounds.sh "$T" "$C" "$R" "" service_base service_lease service_lease_hot
psql -q "$URL" -c 'DROP SCHEMA idemkey_pgbench CASCADE' >/dev/null 2>&1
