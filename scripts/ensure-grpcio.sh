#!/usr/bin/env bash
# Installs the gRPC core client (Python grpcio) that tests/it/grpc_uds_clients.rs runs, idempotently,
# and prints the path of its interpreter.
#
# grpcio is gRPC core (the C library under the Python, C++, Ruby and PHP clients) with a Python
# binding; it comes from PyPI with grpcio-health-checking, into a virtualenv under target/ so
# nothing outside the work tree changes. A second run finds the right versions in place and only
# prints the path.
#
# stdout: the absolute path of the venv's python (and nothing else); progress goes to stderr.
#   GRPCIO_VERSION  the grpcio and grpcio-health-checking version (default 1.85.1)
#   GRPCIO_VENV     where the virtualenv lives (default <repo>/target/grpcio-venv)
#   PYTHON          the interpreter that creates the virtualenv (default python3)
# The tests find it through GRPCIO_PYTHON, else at target/grpcio-venv/bin/python.
set -euo pipefail

version="${GRPCIO_VERSION:-1.85.1}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=lib/venv.sh
source "$root/scripts/lib/venv.sh"
venv="${GRPCIO_VENV:-$root/target/grpcio-venv}"
venv_python="$venv/bin/python"
python="${PYTHON:-python3}"

installed_version() {
    "$venv_python" -c 'import grpc, grpc_health.v1; print(grpc.__version__)' 2>/dev/null || true
}

if [[ -x "$venv_python" && "$(installed_version)" == "$version" ]]; then
    echo "$venv_python"
    exit 0
fi

venv_install ensure-grpcio "$venv" "$python" \
    "grpcio==$version" "grpcio-health-checking==$version"

got="$(installed_version)"
if [[ "$got" != "$version" ]]; then
    echo "ensure-grpcio: $venv has grpcio '${got:-none}', expected $version" >&2
    exit 1
fi
echo "$venv_python"
