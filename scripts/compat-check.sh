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
# - DIR/later: the files of envoyproxy/ratelimit's later features, all supported now: metadata,
#   share_threshold (with `*` anywhere in a wildcard), merging one domain across files
#   (MERGE_DOMAIN_CONFIG, ratelimitd's --merge-domain-config) and refusing a duplicate domain
#   without it. Each file named in LATER_SUPPORTED below must load alone; merge_domain_key1.yaml
#   and merge_domain_key2.yaml (with duplicate_domain.yaml, the same domain again) must be refused
#   together, with an error naming both files, and load together with --merge-domain-config. A
#   later/ file not in LATER_SUPPORTED is reported as loaded or rejected, never failing the script.
# Then it runs the ignored tests of tests/it/compat_upstream.rs with RATELIMITD_COMPAT_DIR=DIR: each
# invalid file's line and reason, and each valid file served by the real binary on free ports and
# queried over gRPC, giving the limits envoyproxy/ratelimit gives. Last, DIR/settings.tsv (the
# environment variables of envoyproxy/ratelimit) must list exactly the variables ratelimitd reads
# (src/envoyproxy_env/mod.rs) and docs/migration.md answers.
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

# later/ files whose feature ratelimitd supports: each must load alone.
LATER_SUPPORTED=(duplicate_domain.yaml merge_domain_key1.yaml merge_domain_key2.yaml metadata.yaml
    share_threshold.yaml)

supported() {
    local name
    for name in "${LATER_SUPPORTED[@]}"; do
        [ "$name" = "$1" ] && return 0
    done
    return 1
}

later_required=0
later_loaded=0
later_other=0
if [ -d "$dir/later" ]; then
    echo "==> ratelimitd check: $dir/later (supported features must load)"
    for file in "$dir"/later/*.yaml "$dir"/later/*.yml; do
        name="${file##*/}"
        status=0
        output="$("$bin" check --config "$file" 2>&1)" || status=$?
        if supported "$name"; then
            later_required=$((later_required + 1))
            if [ "$status" -eq 0 ]; then
                later_loaded=$((later_loaded + 1))
                echo "  ok   later/$name: $output"
            else
                failures=$((failures + 1))
                echo "  FAIL later/$name: exit $status"
                printf '%s\n' "$output" | sed 's/^/         /'
            fi
        else
            later_other=$((later_other + 1))
            if [ "$status" -eq 0 ]; then
                echo "  loads    later/$name (not required): $output"
            else
                echo "  rejected later/$name (not required):"
                printf '%s\n' "$output" | sed "s|^$dir/|           |"
            fi
        fi
    done

    one="$dir/later/merge_domain_key1.yaml"
    two="$dir/later/merge_domain_key2.yaml"
    if [ -f "$one" ] && [ -f "$two" ]; then
        parts=(--config "$one" --config "$two")
        if [ -f "$dir/later/duplicate_domain.yaml" ]; then
            parts+=(--config "$dir/later/duplicate_domain.yaml")
        fi
        echo "==> ratelimitd check: one domain in several later/ files"
        status=0
        output="$("$bin" check "${parts[@]}" 2>&1)" || status=$?
        if [ "$status" -eq 1 ] && [[ $output == *"$two:"*"$one:"* ]]; then
            echo "  ok   refused without --merge-domain-config: ${output%%$'\n'*}"
        else
            failures=$((failures + 1))
            echo "  FAIL without --merge-domain-config: exit $status, expected 1 naming $one and $two"
            printf '%s\n' "$output" | sed 's/^/         /'
        fi
        status=0
        output="$("$bin" check --merge-domain-config "${parts[@]}" 2>&1)" || status=$?
        if [ "$status" -eq 0 ]; then
            echo "  ok   merged with --merge-domain-config: $output"
        else
            failures=$((failures + 1))
            echo "  FAIL with --merge-domain-config: exit $status"
            printf '%s\n' "$output" | sed 's/^/         /'
        fi
    fi
fi

echo "==> RATELIMITD_COMPAT_DIR=$dir cargo test --test it -- compat_upstream:: --ignored"
serving="passed"
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
if RATELIMITD_COMPAT_DIR="$dir" cargo test --test it -- compat_upstream:: --ignored 2>&1 | tee "$log"; then
    serving="passed ($(grep -Eo '[0-9]+ passed' "$log" | tail -n 1))"
else
    serving="FAILED"
    failures=$((failures + 1))
fi

# settings.tsv: every variable upstream reads must be one ratelimitd knows
# (src/envoyproxy_env/mod.rs VARIABLES) and has a row in docs/migration.md.
settings="no settings.tsv"
if [ -f "$dir/settings.tsv" ]; then
    echo "==> $dir/settings.tsv against src/envoyproxy_env/mod.rs and docs/migration.md"
    expected="$(grep -v '^#' "$dir/settings.tsv" | cut -f1 | sed '/^$/d' | sort)"
    known="$(sed -n '/^pub const VARIABLES/,/^];/p' src/envoyproxy_env/mod.rs | grep -Eo '"[A-Z0-9_]+"' | tr -d '"' | sort)"
    documented="$(grep -Eo '^\| `[A-Z0-9_]+`' docs/migration.md | grep -Eo '[A-Z0-9_]+' | sort)"
    settings_failures=0
    for list in known documented; do
        difference="$(diff <(printf '%s\n' "$expected") <(printf '%s\n' "${!list}") || true)"
        if [ -n "$difference" ]; then
            echo "  FAIL settings.tsv differs from the $list variables:"
            printf '%s\n' "$difference" | sed 's/^/         /'
            settings_failures=$((settings_failures + 1))
        fi
    done
    failures=$((failures + settings_failures))
    settings="settings.tsv: $(printf '%s\n' "$expected" | wc -l) variables, each known and documented"
    [ "$settings_failures" -eq 0 ] || settings="settings.tsv: FAILED"
fi

later="no later/ directory"
if [ -d "$dir/later" ]; then
    later="later/: $later_loaded of $later_required supported files load, merged and refused as upstream"
    if [ "$later_other" -gt 0 ]; then
        later="$later, $later_other other file(s) reported"
    fi
fi
echo
echo "compat-check: $valid valid accepted, $invalid invalid rejected with file:line," \
    "serving checks $serving; $later; $settings"
if [ "$failures" -gt 0 ]; then
    echo "compat-check: $failures check(s) FAILED against $dir" >&2
    exit 1
fi
echo "compat-check: all checks passed against $dir"
