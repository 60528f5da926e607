#!/usr/bin/env bash
# The figures of BENCHMARKS.md's "Lease mode, records in Redis" section, in one run: lease mode
# with the records in Redis (IDEMKEY_BENCH_REDIS_URL, default redis://127.0.0.1:6379) against
# lease mode with the records in the database, notes on SQLite and (with IDEMKEY_BENCH_PG_URL)
# PostgreSQL, and replays with the Redis records' replay cache off.
#
#   scripts/bench-redis.sh [OUT_DIR]     # default: target/bench-redis
#
# Needs a release build (cargo build --release -p idemkey-cli -p idemkey-bench). Each run's JSON and table go to
# OUT_DIR; the load average before and after goes to OUT_DIR/load.txt.
#
# With IDEMKEY_BENCH_VALKEY=/path/to/valkey-server, also the cost of --records-wait-fsync: a
# Valkey of the script's own (append-only file, appendfsync everysec, in OUT_DIR) with the wait
# off, on, off, on (notes on SQLite).
set -euo pipefail

# The bench starts the idemkey binary that IDEMKEY_BIN names.
export IDEMKEY_BIN=${IDEMKEY_BIN:-target/release/idemkey}
BENCH=${IDEMKEY_BENCH_BIN:-target/release/idemkey-bench}
OUT=${1:-target/bench-redis}
PG=${IDEMKEY_BENCH_PG_URL:-}
REDIS=${IDEMKEY_BENCH_REDIS_URL:-redis://127.0.0.1:6379}
D=${IDEMKEY_BENCH_DURATION:-6s}
mkdir -p "$OUT"
uptime > "$OUT/load.txt"

bench() {
    local name=$1
    shift
    "$BENCH" "$@" --json "$OUT/$name.json" > "$OUT/$name.txt" 2>/dev/null
    grep -E "with key / without key|replay / GET|loser p99 / single" "$OUT/$name.txt" \
        | sed "s/^/$name: /" || true
}

for db in sqlite ${PG:+postgres}; do
    args=()
    [ "$db" = postgres ] && args=(--database-url "$PG")
    bench "$db-lease-db" create replay storm --mode lease --duration "$D" "${args[@]}"
    bench "$db-lease-redis" create replay storm --mode lease --records-url "$REDIS" --duration "$D" "${args[@]}"
    # The replay cache (on by default with Redis records) off: replays ask Redis each time.
    bench "$db-lease-redis-nocache" replay --mode lease --records-url "$REDIS" --no-replay-cache --duration "$D" "${args[@]}"
done

if [ -n "${IDEMKEY_BENCH_VALKEY:-}" ]; then
    port=46391
    "$IDEMKEY_BENCH_VALKEY" --port $port --bind 127.0.0.1 --save '' --appendonly yes \
        --appendfsync everysec --dir "$OUT" --daemonize yes --logfile "$OUT/valkey.log"
    trap 'redis-cli -p '$port' shutdown nosave >/dev/null 2>&1 || true' EXIT
    for _ in $(seq 1 50); do redis-cli -p $port ping >/dev/null 2>&1 && break; sleep 0.1; done
    valkey="redis://127.0.0.1:$port"
    for i in 1 2; do
        bench "valkey-fsync-off-$i" create replay --mode lease --records-url "$valkey" --duration "$D"
        bench "valkey-fsync-on-$i" create replay --mode lease --records-url "$valkey" --records-wait-fsync --duration "$D"
    done
fi
uptime >> "$OUT/load.txt"
