#!/usr/bin/env bash
# `idemkey proxy`'s figures in one run: the three proxy workloads (a keyed create against a
# forwarded key-less one, a replay against a forwarded GET, a forwarded create against one
# straight to the API) with the proxy's records on SQLite (a fresh file), on PostgreSQL (with
# IDEMKEY_BENCH_PG_URL: a fresh schema, dropped at the end) and in Redis
# (IDEMKEY_BENCH_REDIS_URL, default redis://127.0.0.1:6379; unless it is empty). The bench starts
# the proxy and the API behind it itself: IDEMKEY_BENCH_UPSTREAMS (default
# memory,sqlite-normal,sqlite-full) chooses the APIs, each with a proxy of its own. Every side
# reports the proxy's and the machine's CPU time per request, and each workload the API's.
#
#   IDEMKEY_BENCH_PG_URL=postgres://postgres@127.0.0.1:5432/test scripts/bench-proxy.sh [OUT_DIR]
#
# Redis is shared, never flushed: each run's records are under a credential of its own and
# expire 10 minutes after it. Needs a release build (cargo build --release -p idemkey-cli -p idemkey-bench).
# Each run's JSON, table and errors go to OUT_DIR (default target/bench-proxy); the load
# average before and after goes to OUT_DIR/load.txt. IDEMKEY_BENCH_DURATION (default 5s) is
# each side's time.
set -euo pipefail

# The bench starts the idemkey binary that IDEMKEY_BIN names.
export IDEMKEY_BIN=${IDEMKEY_BIN:-target/release/idemkey}
BENCH=${IDEMKEY_BENCH_BIN:-target/release/idemkey-bench}
OUT=${1:-target/bench-proxy}
PG=${IDEMKEY_BENCH_PG_URL:-}
REDIS=${IDEMKEY_BENCH_REDIS_URL-redis://127.0.0.1:6379}
D=${IDEMKEY_BENCH_DURATION:-5s}
UPSTREAMS=${IDEMKEY_BENCH_UPSTREAMS:-memory,sqlite-normal,sqlite-full}
mkdir -p "$OUT"
uptime > "$OUT/load.txt"

bench() {
    local name=$1
    shift
    # A failed run is reported and the next one still runs.
    if ! "$BENCH" proxy-create proxy-replay proxy-direct proxy-store --duration "$D" \
        --upstream "$UPSTREAMS" "$@" \
        --json "$OUT/$name.json" > "$OUT/$name.txt" 2> "$OUT/$name.err"; then
        echo "$name: FAILED: $(tail -n 1 "$OUT/$name.err")"
        return 0
    fi
    grep -E "^│ proxy: " "$OUT/$name.txt" | sed "s/^/$name: /" || true
}

bench sqlite
[ -n "$PG" ] && bench postgres --database-url "$PG"
[ -n "$REDIS" ] && bench redis --database-url "$REDIS"
uptime >> "$OUT/load.txt"
