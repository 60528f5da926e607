#!/usr/bin/env bash
# BENCHMARKS.md's MySQL and MariaDB figures in one run: keyed / key-less create through
# `idemkey serve` in atomic mode (commit-time, the default; without the lookup; claim-first)
# and lease mode (completion in the note's transaction, and separate), each followed in the
# same invocation by the same statements without HTTP (`idemkey-bench statements`), and the
# commit-time service against the raw two-row transaction (`ceiling`). Every side reports the
# server's and the machine's CPU time per request, and the MySQL server's statements,
# commits, redo log writes, fsyncs and CPU per request.
#
#   IDEMKEY_BENCH_MYSQL_URL=mysql://root@127.0.0.1:3306/test scripts/bench-mysql.sh [OUT_DIR]
#
# Each invocation makes a database of its own on that server (the user needs CREATE and
# DROP) and drops it at the end. Needs a release build (cargo build --release -p
# idemkey-cli -p idemkey-bench). Each run's JSON and table go to OUT_DIR (default target/bench-mysql); the
# load average before and after goes to OUT_DIR/load.txt.
set -euo pipefail

# The bench starts the idemkey binary that IDEMKEY_BIN names.
export IDEMKEY_BIN=${IDEMKEY_BIN:-target/release/idemkey}
BENCH=${IDEMKEY_BENCH_BIN:-target/release/idemkey-bench}
OUT=${1:-target/bench-mysql}
URL=${IDEMKEY_BENCH_MYSQL_URL:-mysql://root@127.0.0.1:3306/test}
D=${IDEMKEY_BENCH_DURATION:-5s}
mkdir -p "$OUT"
uptime > "$OUT/load.txt"

bench() {
    local name=$1
    shift
    "$BENCH" "$@" --database-url "$URL" --duration "$D" --json "$OUT/$name.json" \
        > "$OUT/$name.txt" 2>/dev/null
    grep -E "with key / without key|statements alone|raw two-row" "$OUT/$name.txt" \
        | sed "s/^/$name: /" || true
}

bench commit-time create statements ceiling
bench no-lookup create statements --no-lookup
bench claim-first create statements --strategy claim-first
bench lease create statements --mode lease
bench lease-separate create statements --mode lease --separate-completion
uptime >> "$OUT/load.txt"
