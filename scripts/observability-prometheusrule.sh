#!/usr/bin/env bash
# Writes deploy/observability/ratelimitd-prometheusrule.yaml: the Prometheus Operator's
# PrometheusRule carrying the groups of deploy/observability/ratelimitd-alerts.yaml unchanged.
# Edit the rules file, then run this; tests/observability.rs fails while the two differ.
set -euo pipefail

cd "$(dirname "$0")/.."

rules=deploy/observability/ratelimitd-alerts.yaml
out=deploy/observability/ratelimitd-prometheusrule.yaml
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
