#!/usr/bin/env bash
# Keyed against key-less creates of the notes service on axum (`idemkey serve`) and on
# actix-web (`idemkey-actix-notes serve`), alternated, on SQLite and PostgreSQL, in both
# modes: BENCHMARKS.md, "Front ends". Build first:
#   cargo build --release -p idemkey-cli -p idemkey-bench -p idemkey-actix-notes
# `scripts/bench-front-ends.sh [ROUNDS] [POSTGRES_URL]`
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-target}/release"
rounds="${1:-2}"
pg="${2:-postgres://postgres@127.0.0.1:5432/test}"
for round in $(seq 1 "$rounds"); do
    for db in sqlite postgres; do
        url=()
        [ "$db" = postgres ] && url=(--database-url "$pg")
        for mode in lease atomic; do
            for front in idemkey idemkey-actix-notes; do
                echo "=== round $round, $db, $mode mode, $front ($(cut -d' ' -f1-3 /proc/loadavg))"
                "$target/idemkey-bench" create --mode "$mode" --duration 5s "${url[@]}" \
                    --idemkey "$target/$front" | grep -E 'create|ratio'
            done
        done
    done
done
