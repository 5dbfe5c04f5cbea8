#!/usr/bin/env bash
# What one scrape of /metrics costs, in instructions: ratelimitd (release build) under callgrind
# with RULES rules configured (each a series of the five per-rule families: 5000, the default
# --metrics-max-rule-series, shows them all), counting on only while SCRAPES scrapes are made
# one after the other. Instructions per scrape = every thread's instructions over that span /
# SCRAPES (the HTTP server's share included). Instruction counts do not depend on the machine's
# load.
#
# stdout: one line: rules, scrapes, bytes of a scrape, rule series, instructions per scrape.
#   RULES [5000]  SCRAPES [10]  BIN [target/release/ratelimitd]
#   SAVE: a file to keep the last scrape's text in
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN=${BIN:-$root/target/release/ratelimitd}
RULES=${RULES:-5000}
SCRAPES=${SCRAPES:-10}
WORK=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$WORK"' EXIT

for tool in valgrind callgrind_control callgrind_annotate curl; do
  command -v "$tool" >/dev/null || { echo "bench-scrape-callgrind: $tool not found" >&2; exit 1; }
done

{
  echo "domain: scrape"
  echo "descriptors:"
  for i in $(seq 1 "$RULES"); do
    echo "  - key: k$i"
    echo "    rate_limit: {unit: second, requests_per_unit: 100}"
  done
} >"$WORK/rules.yaml"

valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$WORK/out" \
  --log-file="$WORK/valgrind.log" \
  "$BIN" serve --config "$WORK/rules.yaml" --grpc-addr 127.0.0.1:0 --http-addr 127.0.0.1:0 \
  >"$WORK/log" 2>&1 &
pid=$!
http=
for _ in $(seq 1 1200); do
  http=$(sed -n 's/.*http_addr=\([0-9.:]*\).*/\1/p' "$WORK/log" | head -n 1)
  [ -n "$http" ] && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.05
done
[ -n "$http" ] || { echo "bench-scrape-callgrind: no http_addr in the log:" >&2; cat "$WORK/log" >&2; exit 1; }

curl -sf "http://$http/metrics" -o "$WORK/scrape.txt"
callgrind_control -i on "$pid" >/dev/null
for _ in $(seq 1 "$SCRAPES"); do
  curl -sf "http://$http/metrics" -o "$WORK/scrape.txt"
done
callgrind_control -i off "$pid" >/dev/null
kill -TERM "$pid"
wait "$pid" || true
pid=

total=$(callgrind_annotate "$WORK/out" | sed -n 's/^\([0-9,]*\) .*PROGRAM TOTALS.*/\1/p' | tr -d ,)
echo "rules=$RULES scrapes=$SCRAPES bytes=$(wc -c <"$WORK/scrape.txt")" \
  "rule_series=$(grep -c '^ratelimitd_total_hits_total{' "$WORK/scrape.txt")" \
  "instructions_per_scrape=$((total / SCRAPES))"
if [ -n "${SAVE:-}" ]; then cp "$WORK/scrape.txt" "$SAVE"; fi
