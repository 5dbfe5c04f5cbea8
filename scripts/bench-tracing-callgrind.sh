#!/usr/bin/env bash
# What tracing costs, in instructions: ratelimitd under callgrind, memory store, the load of
# scripts/bench-tracing.sh, in four variants:
#   no-otel   a build without the `otel` cargo feature (no span code at all)
#   off       the default build, tracing off
#   on-0.01   --tracing --tracing-sampling-ratio 0.01
#   on-1      --tracing --tracing-sampling-ratio 1
# Each run: ratelimitd starts under `valgrind --tool=callgrind --instr-atstart=no`, WARMUP_REQUESTS
# are sent, counting is switched on (`callgrind_control -i on`), REQUESTS are sent, and ratelimitd
# is stopped with SIGTERM (so the traced variants' last export is counted too). Instructions per
# decision = every thread's instructions from the switch to the exit / requests answered; "handler"
# is the inclusive count of the ShouldRateLimit handler's future (not h2, prost or the exporter).
# Instruction counts do not depend on the machine's load, unlike the CPU time of bench-tracing.sh.
# The traced variants export OTLP HTTP/protobuf to a sink on this machine that answers 200.
#
# stdout: a markdown table (header: date, commit, machine, command); progress goes to stderr.
#   REPEAT [1]  REQUESTS [20000]  WARMUP_REQUESTS [3000]  CONNECTIONS [2]  CONCURRENCY [16]
#   KEYS [100000]  DESCRIPTORS [1]  VARIANTS ["no-otel off on-0.01 on-1"]
#   CARGO_BUILD [1] (0: use the binaries already built)
#   OTEL_BIN, NO_OTEL_BIN, BENCH_BIN: the binaries (default: target/release)
set -euo pipefail

REPEAT=${REPEAT:-1}
REQUESTS=${REQUESTS:-20000}
WARMUP_REQUESTS=${WARMUP_REQUESTS:-3000}
CONNECTIONS=${CONNECTIONS:-2}
CONCURRENCY=${CONCURRENCY:-16}
KEYS=${KEYS:-100000}
DESCRIPTORS=${DESCRIPTORS:-1}
VARIANTS=${VARIANTS:-"no-otel off on-0.01 on-1"}
CARGO_BUILD=${CARGO_BUILD:-1}

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="$root/target/release"
OTEL_BIN=${OTEL_BIN:-$BIN/ratelimitd}
NO_OTEL_BIN=${NO_OTEL_BIN:-$BIN/ratelimitd-no-otel}
BENCH_BIN=${BENCH_BIN:-$BIN/ratelimit-bench}
WORK=$(mktemp -d)
PIDS=()
trap 'for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done; rm -rf "$WORK"' EXIT

log() { echo "bench-tracing-callgrind: $*" >&2; }

for tool in valgrind callgrind_control callgrind_annotate; do
  command -v "$tool" >/dev/null || { log "$tool not found (apt-get install valgrind)"; exit 1; }
done

if [ "$CARGO_BUILD" = 1 ]; then
  log "building without the otel feature"
  (cd "$root" && cargo build --release --no-default-features --bin ratelimitd >&2)
  cp "$BIN/ratelimitd" "$NO_OTEL_BIN"
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
import http.server
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
  for _ in $(seq 1 1200); do
    addr=$(sed -n 's/.*grpc_addr=\([0-9.:]*\).*/\1/p' "$logfile" | head -n 1)
    if [ -n "$addr" ]; then echo "$addr"; return 0; fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  log "no grpc_addr in $logfile:"; cat "$logfile" >&2; return 1
}

load() {
  "$BENCH_BIN" --addr "$1" --connections "$CONNECTIONS" --concurrency "$CONCURRENCY" \
    --domain bench --key gcra --keys "$KEYS" --descriptors "$DESCRIPTORS" \
    --requests "$2" --warmup 0s --json
}

# run VARIANT N: one callgrind run; prints "instructions/decision service-instructions/decision".
run() {
  local variant=$1 n=$2 bin=$OTEL_BIN extra=()
  case $variant in
    no-otel) bin=$NO_OTEL_BIN ;;
    off) ;;
    on-0.01) extra=(--tracing --tracing-endpoint "$SINK" --tracing-sampling-ratio 0.01) ;;
    on-1) extra=(--tracing --tracing-endpoint "$SINK" --tracing-sampling-ratio 1) ;;
    *) log "unknown variant $variant"; return 1 ;;
  esac
  local out="$WORK/$variant.$n.callgrind"
  valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$out" \
    --log-file="$WORK/$variant.$n.valgrind" \
    "$bin" serve --config "$WORK/bench.yaml" --grpc-addr 127.0.0.1:0 --http-addr 127.0.0.1:0 \
    "${extra[@]}" >"$WORK/$variant.$n.log" 2>&1 &
  local pid=$!
  PIDS+=("$pid")
  local addr
  addr=$(wait_for_addr "$WORK/$variant.$n.log" "$pid")
  load "$addr" "$WARMUP_REQUESTS" >/dev/null
  callgrind_control -i on "$pid" >/dev/null
  local measured
  measured=$(load "$addr" "$REQUESTS")
  kill -TERM "$pid"
  wait "$pid" || true
  python3 - "$measured" "$out" <<'PY'
import json, re, subprocess, sys
report, out = json.loads(sys.argv[1]), sys.argv[2]
requests = report["requests"]
if report.get("errors", 0):
    sys.exit(f"{report['errors']} errors in the measured load")
text = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", out],
                      capture_output=True, text=True, check=True).stdout
total = int(re.search(r"^([\d,]+).*PROGRAM TOTALS", text, re.M).group(1).replace(",", ""))
service = 0
for line in text.splitlines():
    m = re.match(r"\s*([\d,]+) \(.*RateLimitService>::should_rate_limit::\{\{closure\}\}", line)
    if m:
        service = max(service, int(m.group(1).replace(",", "")))
print(total / requests, service / requests)
PY
}

declare -A IR=() SERVICE=()
for n in $(seq 1 "$REPEAT"); do
  for variant in $VARIANTS; do
    read -r ir service < <(run "$variant" "$n")
    log "run $n $variant: $ir instructions per decision, handler $service"
    IR[$variant]+="$ir "
    SERVICE[$variant]+="$service "
  done
done

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

commit=$(cd "$root" && git rev-parse --short HEAD)
cpu_model=$(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -n 1)
echo "**$(date -u +%Y-%m-%d) · ratelimitd $commit · $(nproc) vCPUs ($cpu_model) · \`REPEAT=$REPEAT scripts/bench-tracing-callgrind.sh\`**"
echo
echo "| variant | instructions per decision (median of $REPEAT) | ÷ no-otel | handler per decision | every run |"
echo "|---|---:|---:|---:|---|"
read -r first _ <<<"$VARIANTS"
base=$(echo "${IR[$first]}" | median)
for variant in $VARIANTS; do
  ir=$(echo "${IR[$variant]}" | median)
  service=$(echo "${SERVICE[$variant]}" | median)
  ratio=$(awk -v a="$ir" -v b="$base" 'BEGIN {printf "%.4f", a / b}')
  runs=$(for x in ${IR[$variant]}; do printf '%.0f ' "$x"; done)
  printf '| %s | %.0f | %s | %.0f | %s |\n' "$variant" "$ir" "$ratio" "$service" "${runs% }"
done
