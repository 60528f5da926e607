#!/usr/bin/env bash
# Publishes the workspace's published packages, each after those it depends on:
# `scripts/publish.sh [--dry-run] [other cargo publish options]`.
#
# One `cargo publish` for them all, not one per package: cargo (1.90 and later) packages every
# one first and verifies each against the packaged forms of the others, whereas
# `cargo publish -p X` alone looks X's idemkey dependencies up in the registry, where their new
# version is not yet. Packages marked `publish = false` are left out, and no published package
# may need one. If a real publish stops part way, rerun `cargo publish -p ...` with the
# packages of the printed order that are not published yet.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v jq >/dev/null; then
    echo "publish.sh reads cargo metadata with jq: install jq" >&2
    exit 2
fi
metadata="$(cargo metadata --no-deps --format-version 1)"

# A published package's dependencies on workspace packages that its package keeps (every one
# but a dev-dependency without a version, which cargo leaves out), one per line:
# "package<TAB>dependency<TAB>published|unpublished".
workspace_dependencies() {
    jq -r '
        [.packages[] | select(.publish == []) | .name] as $unpublished
        | [.packages[] | .name] as $members
        | .packages[] | select(.publish != []) | .name as $package
        | .dependencies[]
        | select((.name | IN($members[])) and .name != $package)
        | select(.kind != "dev" or .req != "*")
        | [$package, .name, (if .name | IN($unpublished[]) then "unpublished" else "published" end)]
        | @tsv' <<<"$metadata"
}

dependencies="$(workspace_dependencies)"
needs_unpublished="$(awk -F '\t' '$3 == "unpublished" { print "  " $1 " needs " $2 }' <<<"$dependencies")"
if [ -n "$needs_unpublished" ]; then
    echo "published packages need unpublished ones (publish = false):" >&2
    echo "$needs_unpublished" >&2
    exit 1
fi

# Dependencies first: tsort orders the "dependency package" pairs (and fails on a cycle); the
# "p p" pairs name the packages that depend on no other.
sorted="$(
    {
        jq -r '.packages[] | select(.publish != []) | "\(.name) \(.name)"' <<<"$metadata"
        awk -F '\t' 'NF { print $2, $1 }' <<<"$dependencies"
    } | tsort
)"
mapfile -t order <<<"$sorted"
echo "publishing in this order: ${order[*]}"

packages=()
for package in "${order[@]}"; do packages+=(-p "$package"); done
cargo publish "${packages[@]}" "$@"
