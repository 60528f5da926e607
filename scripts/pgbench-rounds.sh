#!/usr/bin/env bash
# Runs pgbench pattern files in alternating rounds, from the directory that holds them, and
# prints "round pattern tps" lines (scripts/pgbench-atomic and scripts/pgbench-lease use it):
#   pgbench-rounds.sh SECONDS CLIENTS ROUNDS "TABLES TO EMPTY FIRST" PATTERN...
set -euo pipefail
T=$1; C=$2; R=$3; EMPTY=$4; shift 4
URL=${PGURL:-postgres://postgres@127.0.0.1:5432/test}
for round in $(seq 1 "$R"); do
  for s in "$@"; do
    if [ -n "$EMPTY" ]; then psql -q "$URL" -c "TRUNCATE $EMPTY" >/dev/null 2>&1; fi
    tps=$(pgbench -n -M prepared -c "$C" -j 2 -T "$T" -f "$s.sql" "$URL" 2>&1 | awk '/^tps/ {print $3; exit}')
    echo "$round $s $tps"
  done
done
