# Name filters of the integration tests (tests/it, one crate: a test is named `module::test`):
# the part scripts/test.sh and scripts/test-fast.sh share. Sourced, not run. libtest runs what a
# filter matches and skips what a `--skip` matches, both by substring, and says nothing of a
# filter that matches no test: a renamed module or test would drop out of a run unnoticed.

# it_filters_match FILTER...
#   Exits 1 unless each FILTER (`module::` or `module::test`) is part of some test's name. The
#   listing builds the binary as the whole workspace's build does (--workspace), not a variant.
it_filters_match() {
    local listed filter
    listed="$(cargo test --quiet --workspace --test it -- --list)"
    for filter in "$@"; do
        if ! grep -qF -- "$filter" <<<"$listed"; then
            echo "scripts: no test of tests/it is named like $filter" >&2
            exit 1
        fi
    done
}
