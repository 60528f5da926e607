#!/usr/bin/env bash
# Every figure of BENCHMARKS.md's performance targets in one run: atomic mode claim-first
# against commit-time (with and without the lookup), the replay cache, lease mode (completion in
# the note's transaction, and separate), the concurrency sweep of both modes, on SQLite and
# (with IDEMKEY_BENCH_PG_URL) PostgreSQL; then, in the same run, what each statement pattern
# allows without HTTP (scripts/pgbench-atomic, scripts/pgbench-lease), unless
# IDEMKEY_BENCH_PATTERNS=0. Every side reports the server's and the machine's CPU time per
# request.
#
#   scripts/bench-strategies.sh [OUT_DIR]     # default: target/bench-strategies
#
# Needs a release build (cargo build --release -p idemkey-cli -p idemkey-bench). Each run's JSON and table go
# to OUT_DIR; the load average before and after goes to OUT_DIR/load.txt.
set -euo pipefail

# The bench starts the idemkey binary that IDEMKEY_BIN names.
export IDEMKEY_BIN=${IDEMKEY_BIN:-target/release/idemkey}
BENCH=${IDEMKEY_BENCH_BIN:-target/release/idemkey-bench}
OUT=${1:-target/bench-strategies}
PG=${IDEMKEY_BENCH_PG_URL:-}
D=${IDEMKEY_BENCH_DURATION:-6s}
mkdir -p "$OUT"
uptime > "$OUT/load.txt"

bench() {
    local name=$1
    shift
    "$BENCH" "$@" --json "$OUT/$name.json" > "$OUT/$name.txt" 2>/dev/null
    grep -E "with key / without key|replay / GET|raw two-row|loser p99 / single" "$OUT/$name.txt" \
        | sed "s/^/$name: /" || true
}

for db in sqlite ${PG:+postgres}; do
    args=()
    [ "$db" = postgres ] && args=(--database-url "$PG")
    bench "$db-claim-first" create ceiling --strategy claim-first --duration "$D" "${args[@]}"
    bench "$db-commit-time" create ceiling --strategy commit-time --duration "$D" "${args[@]}"
    bench "$db-no-lookup" create ceiling --strategy commit-time --no-lookup --duration "$D" "${args[@]}"
    bench "$db-replay" replay storm --duration "$D" "${args[@]}"
    bench "$db-replay-cache" replay --replay-cache 1s --duration "$D" "${args[@]}"
    bench "$db-lease" create replay storm --mode lease --duration "$D" "${args[@]}"
    bench "$db-lease-separate" create --mode lease --separate-completion --duration "$D" "${args[@]}"
    for c in 1 4 16 64; do
        bench "$db-c$c" create replay --concurrency "$c" --duration 3s "${args[@]}"
        bench "$db-lease-c$c" create --mode lease --concurrency "$c" --duration 3s "${args[@]}"
    done
done
if [ "${IDEMKEY_BENCH_PATTERNS:-1}" != 0 ]; then
    if [ -n "$PG" ]; then
        PGURL=$PG scripts/pgbench-atomic/run.sh 5 16 2 > "$OUT/pgbench-atomic.txt"
        PGURL=$PG scripts/pgbench-lease/run.sh 5 16 2 > "$OUT/pgbench-lease.txt"
    fi
    python3 scripts/pgbench-lease/sqlite.py 3000 2 > "$OUT/sqlite-lease.txt"
fi
uptime >> "$OUT/load.txt"
