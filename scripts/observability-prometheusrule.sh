#!/usr/bin/env bash
# Writes deploy/observability/ratelimitd-prometheusrule.yaml: the Prometheus Operator's
# PrometheusRule carrying the groups of deploy/observability/ratelimitd-alerts.yaml unchanged.
# Edit the rules file, then run this; tests/it/observability.rs fails while the two differ. With an
# argument, writes that file instead (the test compares it with the one in the repository).
set -euo pipefail

out="$(realpath -m "${1:-$(dirname "$0")/../deploy/observability/ratelimitd-prometheusrule.yaml}")"
cd "$(dirname "$0")/.."

rules=deploy/observability/ratelimitd-alerts.yaml
{
    cat <<'HEADER'
# The alerting rules of ratelimitd-alerts.yaml as a PrometheusRule for the Prometheus Operator,
# written by scripts/observability-prometheusrule.sh: edit ratelimitd-alerts.yaml and run it.
# Add the labels your Prometheus's ruleSelector asks for (kube-prometheus-stack: `release`).
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: ratelimitd
  labels:
    app.kubernetes.io/name: ratelimitd
spec:
HEADER
    sed -n '/^groups:/,$p' "$rules" | sed 's/^./  &/'
} >"$out"
