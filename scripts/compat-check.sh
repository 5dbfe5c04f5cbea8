#!/usr/bin/env bash
# Checks ratelimitd against envoyproxy/ratelimit's own configuration fixtures. They are not part of
# the repository and this script is not part of the test command (scripts/test.sh), which checks the
# repository's own counterparts in tests/fixtures/compat/ instead.
#
#   scripts/compat-check.sh [DIR]
#
# DIR holds the fixtures' valid/, invalid/ and (optionally) later/ directories; by default
# ../shared/compat/envoyproxy-ratelimit, relative to the repository root. A DIR given on the command
# line is relative to the current directory. Exits 1 when DIR is missing or any check fails.
#
# It builds the debug binary (`cargo build --bin ratelimitd`; no release build), then runs
# `ratelimitd check --config FILE` on every *.yaml / *.yml file:
# - DIR/valid: it must exit 0;
# - DIR/invalid: it must exit 1 and print at least one `FILE:LINE:COLUMN: field: message` error
#   with LINE >= 1;
# - DIR/later: files whose semantics are future work (upstream's MERGE_DOMAIN_CONFIG, duplicate
#   domains across files, share_threshold, metadata) are checked one by one and reported as loaded
#   or rejected, never failing the script. Today every one loads alone except share_threshold.yaml,
#   whose `*` in the middle of a value is not a wildcard to ratelimitd.
# Then it runs the ignored tests of tests/compat_upstream.rs with RATELIMITD_COMPAT_DIR=DIR: each
# invalid file's line and reason, and each valid file served by the real binary on free ports and
# queried over gRPC, giving the limits envoyproxy/ratelimit gives.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"

if [ "$#" -gt 1 ]; then
    echo "usage: scripts/compat-check.sh [DIR]" >&2
    exit 2
fi
if [ "$#" -eq 1 ]; then
    dir="$1"
else
    dir="$root/../shared/compat/envoyproxy-ratelimit"
fi
if [ ! -d "$dir/valid" ] || [ ! -d "$dir/invalid" ]; then
    echo "compat-check: no envoyproxy/ratelimit fixtures in $dir (expected valid/ and invalid/ there)." >&2
    echo "compat-check: put them beside the checkout in ../shared/compat/envoyproxy-ratelimit, or pass DIR." >&2
    exit 1
fi
dir="$(cd "$dir" && pwd)"
cd "$root"

echo "==> cargo build --bin ratelimitd (debug)"
cargo build --bin ratelimitd
bin="${CARGO_TARGET_DIR:-target}/debug/ratelimitd"

shopt -s nullglob

# Whether the output $2 has an error line `$1:LINE:COLUMN: ...` with LINE >= 1.
has_position() {
    local line rest
    while IFS= read -r line; do
        [[ $line == "$1:"* ]] || continue
        rest="${line#"$1:"}"
        if [[ $rest =~ ^[1-9][0-9]*:[0-9]+:\  ]]; then
            return 0
        fi
    done <<<"$2"
    return 1
}

failures=0
valid=0
invalid=0

echo "==> ratelimitd check: $dir/valid (must pass)"
files=("$dir"/valid/*.yaml "$dir"/valid/*.yml)
if [ "${#files[@]}" -eq 0 ]; then
    echo "  FAIL no *.yaml or *.yml file in $dir/valid"
    failures=$((failures + 1))
fi
for file in "${files[@]}"; do
    status=0
    output="$("$bin" check --config "$file" 2>&1)" || status=$?
    if [ "$status" -eq 0 ]; then
        valid=$((valid + 1))
        echo "  ok   valid/${file##*/}: $output"
    else
        failures=$((failures + 1))
        echo "  FAIL valid/${file##*/}: exit $status"
        printf '%s\n' "$output" | sed 's/^/         /'
    fi
done

echo "==> ratelimitd check: $dir/invalid (must fail with file:line)"
files=("$dir"/invalid/*.yaml "$dir"/invalid/*.yml)
if [ "${#files[@]}" -eq 0 ]; then
    echo "  FAIL no *.yaml or *.yml file in $dir/invalid"
    failures=$((failures + 1))
fi
for file in "${files[@]}"; do
    status=0
    output="$("$bin" check --config "$file" 2>&1)" || status=$?
    if [ "$status" -eq 1 ] && has_position "$file" "$output"; then
        invalid=$((invalid + 1))
        first="$(printf '%s\n' "$output" | head -n 1)"
        echo "  ok   invalid/${file##*/}: ${first#"$dir/"}"
    else
        failures=$((failures + 1))
        echo "  FAIL invalid/${file##*/}: exit $status, expected 1 with a $file:LINE:COLUMN: error"
        printf '%s\n' "$output" | sed 's/^/         /'
    fi
done

later_total=0
later_loaded=0
if [ -d "$dir/later" ]; then
    echo "==> ratelimitd check: $dir/later (future work: reported, not required)"
    for file in "$dir"/later/*.yaml "$dir"/later/*.yml; do
        later_total=$((later_total + 1))
        status=0
        output="$("$bin" check --config "$file" 2>&1)" || status=$?
        if [ "$status" -eq 0 ]; then
            later_loaded=$((later_loaded + 1))
            echo "  loads    later/${file##*/}: $output"
        else
            echo "  rejected later/${file##*/}:"
            printf '%s\n' "$output" | sed "s|^$dir/|           |"
        fi
    done
fi

echo "==> RATELIMITD_COMPAT_DIR=$dir cargo test --test compat_upstream -- --ignored"
serving="passed"
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
if RATELIMITD_COMPAT_DIR="$dir" cargo test --test compat_upstream -- --ignored 2>&1 | tee "$log"; then
    serving="passed ($(grep -Eo '[0-9]+ passed' "$log" | tail -n 1))"
else
    serving="FAILED"
    failures=$((failures + 1))
fi

later="no later/ directory"
if [ -d "$dir/later" ]; then
    later="later/: $later_loaded of $later_total load (reported, not required)"
fi
echo
echo "compat-check: $valid valid accepted, $invalid invalid rejected with file:line," \
    "serving checks $serving; $later"
if [ "$failures" -gt 0 ]; then
    echo "compat-check: $failures check(s) FAILED against $dir" >&2
    exit 1
fi
echo "compat-check: all checks passed against $dir"
