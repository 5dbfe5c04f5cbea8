#!/usr/bin/env bash
# The contributors' loop: formatting, the unit tests, and the integration tests that need only
# the binary and a local redis-server (with redis-cli and openssl): it downloads nothing. The
# modules of tests/it that run Envoy, kubectl and kubernetes-validate, gRPC core (grpcio),
# Prometheus and promtool, or Chromium are
# left out by name (below), never by a test that skips itself; scripts/test.sh, the full command,
# installs those tools and runs everything, lints and fuzzing included.
#
# Arguments go to the test binaries (`scripts/test-fast.sh redis_keys::` runs one module).
set -euo pipefail

cd "$(dirname "$0")/.."

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || missing+=(redis-tools)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
if [ "${#missing[@]}" -gt 0 ]; then
    echo "scripts/test-fast.sh: missing ${missing[*]} (apt-get install ${missing[*]})" >&2
    exit 1
fi

# The modules that need a tool scripts/test.sh downloads: Envoy (scripts/ensure-envoy.sh),
# kubectl and kubernetes-validate (scripts/ensure-kubernetes-tools.sh), grpcio
# (scripts/ensure-grpcio.sh), Prometheus and promtool (Debian's prometheus), a headless Chromium
# (Debian's chromium; the status page's other tests run here).
needs_downloads=(envoy_e2e:: envoy_tracing:: rlqs_envoy:: deploy_kubernetes:: grpc_uds_clients::
    observability:: status_page::in_a_real_chromium)

echo "==> cargo fmt --all -- --check"
cargo fmt --all -- --check

# shellcheck source=lib/it-filters.sh
source scripts/lib/it-filters.sh
it_filters_match "${needs_downloads[@]}"
skips=()
for module in "${needs_downloads[@]}"; do
    skips+=(--skip "$module")
done

# The benchmarks (criterion, run once each as tests) take no libtest arguments: a run of their own.
echo "==> cargo test --workspace --lib --bins --tests --examples -- ${skips[*]} $*"
cargo test --workspace --lib --bins --tests --examples -- "${skips[@]}" "$@"
if [ "$#" -eq 0 ]; then
    echo "==> cargo test --workspace --bench '*'"
    cargo test --workspace --bench '*'
fi
