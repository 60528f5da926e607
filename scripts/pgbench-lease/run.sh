#!/usr/bin/env bash
# Lease mode's statement patterns against the key-less create, by pgbench on a PostgreSQL
# (issue 13: "lease mode ≥ 0.45; two commits against one is the floor of the design"):
#   base                   BEGIN; note; COMMIT                                  (1 commit)
#   lease_today            lookup; claim; BEGIN; note; COMMIT; completion       (3 commits)
#   lease_folded           lookup; claim; BEGIN; note; completion; COMMIT       (2 commits)
#   lease_folded_nolookup  claim; BEGIN; note; completion; COMMIT               (2 commits)
# "folded" is the completion riding in the handler's own transaction, fenced by token (not
# built). Usage: run.sh [seconds] [clients] [rounds]; prints TPS per pattern per round.
set -euo pipefail
cd "$(dirname "$0")"
T=${1:-8}; C=${2:-16}; R=${3:-3}; URL=${PGURL:-postgres://postgres@127.0.0.1:5432/test}
psql -q "$URL" -f setup.sql >/dev/null 2>&1
../pgbench-rounds.sh "$T" "$C" "$R" "pl_notes, pl_records" base lease_today lease_folded \
  lease_folded_nolookup
psql -q "$URL" -c 'DROP TABLE pl_notes, pl_records' >/dev/null 2>&1
