#!/usr/bin/env bash
# What tracing costs: ratelimitd's CPU per decision, memory store, in four variants:
#   no-otel   a build without the `otel` cargo feature (no span code at all)
#   off       the default build, tracing off
#   on-0.01   --tracing --tracing-sampling-ratio 0.01
#   on-1      --tracing --tracing-sampling-ratio 1
# The traced variants export over OTLP HTTP/protobuf to a sink on this machine that answers 200
# to every export (python3's http.server). Each round runs the four variants in turn, starting one
# further along each round (so they meet the same phases of a shared machine, and none always runs
# first); the table gives each variant's median over the rounds.
# The server is pinned to CPU 0 and the load generator to CPU 1, as the memory rows of bench.sh.
#
# stdout: a markdown table (header: date, commit, machine, command); progress goes to stderr.
#   ROUNDS [5]  DURATION [4] s measured  WARMUP [1] s  CONNECTIONS [2]  CONCURRENCY [16]
#   KEYS [100000]  DESCRIPTORS [1]  CARGO_BUILD [1] (0: use the binaries already built)
set -euo pipefail

ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-4}
WARMUP=${WARMUP:-1}
CONNECTIONS=${CONNECTIONS:-2}
CONCURRENCY=${CONCURRENCY:-16}
KEYS=${KEYS:-100000}
DESCRIPTORS=${DESCRIPTORS:-1}
CARGO_BUILD=${CARGO_BUILD:-1}

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="$root/target/release"
NO_OTEL="$BIN/ratelimitd-no-otel"
WORK=$(mktemp -d)
PIDS=()
trap 'for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done; rm -rf "$WORK"' EXIT

log() { echo "bench-tracing: $*" >&2; }

if [ "$CARGO_BUILD" = 1 ]; then
  log "building without the otel feature"
  (cd "$root" && cargo build --release --no-default-features --bin ratelimitd >&2)
  cp "$BIN/ratelimitd" "$NO_OTEL"
  log "building the default (otel) binaries"
  (cd "$root" && cargo build --release --workspace --bins >&2)
fi

cat >"$WORK/bench.yaml" <<'YAML'
domain: bench
descriptors:
  - key: gcra
    rate_limit: {unit: second, requests_per_unit: 1000000, algorithm: gcra}
YAML

# The OTLP/HTTP sink: 200 and an empty ExportTraceServiceResponse for every POST.
cat >"$WORK/sink.py" <<'PY'
import http.server, sys
class Sink(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()
    def log_message(self, *args):
        pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Sink)
print(server.server_address[1], flush=True)
server.serve_forever()
PY
python3 "$WORK/sink.py" >"$WORK/sink.port" &
PIDS+=($!)
for _ in $(seq 1 100); do [ -s "$WORK/sink.port" ] && break; sleep 0.05; done
SINK="http://127.0.0.1:$(cat "$WORK/sink.port")/v1/traces"
log "OTLP sink at $SINK"

wait_for_addr() {
  local logfile=$1 pid=$2 addr
  for _ in $(seq 1 200); do
    addr=$(sed -n 's/.*grpc_addr=\([0-9.:]*\).*/\1/p' "$logfile" | head -n 1)
    if [ -n "$addr" ]; then echo "$addr"; return 0; fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  log "no grpc_addr in $logfile:"; cat "$logfile" >&2; return 1
}

# run VARIANT: one measured run; prints "server CPU µs/req  req/s".
run() {
  local variant=$1 bin="$BIN/ratelimitd" extra=()
  case $variant in
    no-otel) bin=$NO_OTEL ;;
    off) ;;
    on-0.01) extra=(--tracing --tracing-endpoint "$SINK" --tracing-sampling-ratio 0.01) ;;
    on-1) extra=(--tracing --tracing-endpoint "$SINK" --tracing-sampling-ratio 1) ;;
  esac
  taskset -c 0 "$bin" serve --config "$WORK/bench.yaml" --grpc-addr 127.0.0.1:0 \
    --http-addr 127.0.0.1:0 "${extra[@]}" >"$WORK/$variant.log" 2>&1 &
  local pid=$!
  PIDS+=("$pid")
  local addr
  addr=$(wait_for_addr "$WORK/$variant.log" "$pid")
  local line
  line=$(taskset -c 1 "$BIN/ratelimit-bench" --addr "$addr" --connections "$CONNECTIONS" \
    --concurrency "$CONCURRENCY" --domain bench --key gcra --keys "$KEYS" \
    --descriptors "$DESCRIPTORS" --duration "${DURATION}s" --warmup "${WARMUP}s" \
    --server-pid "$pid" --json)
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print(d["server_cpu_us_per_request"], d["throughput_rps"])' "$line"
}

VARIANTS="no-otel off on-0.01 on-1"
declare -A CPU=() RPS=()
read -r -a order <<<"$VARIANTS"
for round in $(seq 1 "$ROUNDS"); do
  for step in 0 1 2 3; do
    variant=${order[$(((round + step) % 4))]}
    read -r cpu rps < <(run "$variant")
    log "round $round $variant: $cpu µs/req, $rps req/s"
    CPU[$variant]+="$cpu "
    RPS[$variant]+="$rps "
  done
done

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

commit=$(cd "$root" && git rev-parse --short HEAD)
cpu_model=$(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -n 1)
echo "**$(date -u +%Y-%m-%d) · ratelimitd $commit · $(nproc) vCPUs ($cpu_model) · \`ROUNDS=$ROUNDS scripts/bench-tracing.sh\`**"
echo
echo "| variant | server CPU µs/req (median of $ROUNDS) | ÷ no-otel | req/s (median) | every round, µs/req |"
echo "|---|---:|---:|---:|---|"
base=$(echo "${CPU[no-otel]}" | median)
for variant in $VARIANTS; do
  cpu=$(echo "${CPU[$variant]}" | median)
  rps=$(echo "${RPS[$variant]}" | median)
  ratio=$(awk -v a="$cpu" -v b="$base" 'BEGIN {printf "%.3f", a / b}')
  printf '| %s | %.2f | %s | %.0f | %s |\n' "$variant" "$cpu" "$ratio" "$rps" "${CPU[$variant]% }"
done
