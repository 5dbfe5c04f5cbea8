#!/usr/bin/env bash
# One hot key decided by several ratelimitd replicas: exact and leased consistency on one
# redis-server, beside the same replicas each on its own memory store, in one run.
#
#   scripts/lease-bench.sh > leases.md     # markdown on stdout, progress on stderr
#
# For each algorithm and each load (`under`: the replicas together offer half the limit;
# `10x`: ten times it), REPLICAS replicas (`--threads 1`) each take RATE requests per second,
# open loop, from a ratelimit-bench of their own (1 connection, 16 in flight, one descriptor, one
# key), for DURATION seconds after WARMUP. The limit is per second. Reported per cell:
#   decisions/s    every replica's answered requests per second, summed
#   admitted/s     the OK answers per second, summed; `vs exact` is leased over exact, same load
#   calls/dec      script calls (INFO commandstats FCALL + EVALSHA, reset before each cell, so
#                  the warmup counts too) per request sent (warmup included)
#   redis µs/dec   redis-server CPU (utime + stime over the cell) per request sent
#   ratelimitd µs/dec  the replicas' CPU per request (each measured by its bench), mean
#
# Environment (defaults in brackets): REPLICAS [3]  RATE [4000]  DURATION [5]  WARMUP [1]
#   ALGORITHMS ["fixed_window sliding_window_counter token_bucket gcra"]  LOADS ["under 10x"]
#   CARGO_BUILD [1] (0: use target/release as built)  REDIS_SERVER [redis-server]
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)
REPLICAS=${REPLICAS:-3}
RATE=${RATE:-4000}
DURATION=${DURATION:-5}
WARMUP=${WARMUP:-1}
ALGORITHMS=${ALGORITHMS:-"fixed_window sliding_window_counter token_bucket gcra"}
LOADS=${LOADS:-"under 10x"}
CARGO_BUILD=${CARGO_BUILD:-1}
REDIS_SERVER=${REDIS_SERVER:-redis-server}
BIN=$ROOT/target/release

log() { printf '[lease-bench] %s\n' "$*" >&2; }

for tool in "$REDIS_SERVER" redis-cli python3; do
  command -v "$tool" >/dev/null || { log "$tool is needed"; exit 1; }
done
if [ "$CARGO_BUILD" = 1 ]; then
  log "cargo build --release"
  cargo build --release --quiet -p ratelimitd --bin ratelimitd >&2
  cargo build --release --quiet -p ratelimitd-bench --bin ratelimit-bench >&2
fi

WORK=$(mktemp -d)
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

REDIS_PORT=$(free_port)
"$REDIS_SERVER" --bind 127.0.0.1 --port "$REDIS_PORT" --save "" --appendonly no --dir "$WORK" \
  --logfile "$WORK/redis.log" &
REDIS_PID=$!
PIDS+=("$REDIS_PID")
cli() { redis-cli -p "$REDIS_PORT" "$@"; }
for _ in $(seq 1 100); do cli PING 2>/dev/null | grep -q PONG && break; sleep 0.1; done

script_calls() {
  cli INFO commandstats | tr -d '\r' |
    sed -n 's/^cmdstat_\(evalsha\|fcall\):calls=\([0-9]*\),.*/\2/p' |
    awk '{ total += $1 } END { print total + 0 }'
}

# run_cell ALGORITHM LIMIT MODE: prints one JSON line of the cell's figures.
run_cell() {
  local algorithm=$1 limit=$2 mode=$3
  cat >"$WORK/bench.yaml" <<YAML
domain: bench
descriptors:
  - key: hot
    rate_limit: {unit: second, requests_per_unit: $limit, algorithm: $algorithm}
YAML
  local store=()
  case "$mode" in
    exact) store=(--redis-url "redis://127.0.0.1:$REDIS_PORT") ;;
    leased) store=(--redis-url "redis://127.0.0.1:$REDIS_PORT" --consistency leased) ;;
  esac
  cli FLUSHALL >/dev/null
  local servers=() addrs=()
  for r in $(seq 1 "$REPLICAS"); do
    "$BIN/ratelimitd" serve --config "$WORK/bench.yaml" --grpc-addr 127.0.0.1:0 \
      --http-addr 127.0.0.1:0 --threads 1 "${store[@]}" >"$WORK/replica-$r.log" 2>&1 &
    servers+=("$!")
    PIDS+=("$!")
  done
  for r in $(seq 1 "$REPLICAS"); do
    local addr=""
    for _ in $(seq 1 100); do
      addr=$(sed -n 's/.*grpc_addr=\([0-9.:]*\).*/\1/p' "$WORK/replica-$r.log" | head -n 1)
      [ -n "$addr" ] && break
      sleep 0.1
    done
    [ -n "$addr" ] || { log "replica $r did not start:"; cat "$WORK/replica-$r.log" >&2; exit 1; }
    addrs+=("$addr")
  done
  cli CONFIG RESETSTAT >/dev/null
  local redis_before
  redis_before=$(cpu_ticks "$REDIS_PID")
  local benches=()
  for r in $(seq 1 "$REPLICAS"); do
    "$BIN/ratelimit-bench" --addr "${addrs[$((r - 1))]}" --rate "$RATE" --connections 1 \
      --concurrency 16 --threads 1 --key hot --keys 1 --duration "${DURATION}s" \
      --warmup "${WARMUP}s" --server-pid "${servers[$((r - 1))]}" --json \
      >"$WORK/bench-$r.json" &
    benches+=("$!")
  done
  for pid in "${benches[@]}"; do wait "$pid"; done
  local redis_after calls
  redis_after=$(cpu_ticks "$REDIS_PID")
  calls=$(script_calls)
  for pid in "${servers[@]}"; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
  python3 - "$WORK" "$REPLICAS" "$algorithm" "$limit" "$mode" "$calls" \
    "$((redis_after - redis_before))" "$(getconf CLK_TCK)" <<'PY'
import json, sys
work, replicas, algorithm, limit, mode, calls, ticks, hz = sys.argv[1:]
runs = [json.load(open(f"{work}/bench-{r}.json")) for r in range(1, int(replicas) + 1)]
sent = sum(r["requests"] + r["warmup_requests"] for r in runs)
print(json.dumps({
    "algorithm": algorithm, "limit": int(limit), "mode": mode,
    "decisions_per_s": sum(r["requests"] / r["elapsed_s"] for r in runs),
    "admitted_per_s": sum(r["ok"] / r["elapsed_s"] for r in runs),
    "errors": sum(r["errors"] for r in runs),
    "calls_per_decision": int(calls) / sent,
    "redis_us_per_decision": int(ticks) * 1e6 / int(hz) / sent,
    "ratelimitd_us_per_decision":
        sum(r["server_cpu_us_per_request"] for r in runs) / len(runs),
    "p99_us": max(r["latency_us"]["p99"] for r in runs),
}))
PY
}

RESULTS="$WORK/results.jsonl"
: >"$RESULTS"
for algorithm in $ALGORITHMS; do
  for load in $LOADS; do
    total=$((REPLICAS * RATE))
    case "$load" in
      under) limit=$((2 * total)) ;;
      10x) limit=$((total / 10)) ;;
      *) log "unknown load $load"; exit 1 ;;
    esac
    for mode in memory exact leased; do
      log "$algorithm, $load (limit $limit/s), $mode"
      run_cell "$algorithm" "$limit" "$mode" | sed "s/^{/{\"load\": \"$load\", /" >>"$RESULTS"
    done
  done
done

python3 - "$RESULTS" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
exact = {(r["algorithm"], r["load"]): r for r in rows if r["mode"] == "exact"}
memory = {(r["algorithm"], r["load"]): r for r in rows if r["mode"] == "memory"}
print("| algorithm | load | limit/s | store | decisions/s | admitted/s | vs exact | calls/dec "
      "| redis µs/dec | ratelimitd µs/dec | vs memory | p99 ms | errors |")
print("|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for r in rows:
    key = (r["algorithm"], r["load"])
    vs_exact = r["admitted_per_s"] / max(exact[key]["admitted_per_s"], 1e-9)
    vs_memory = r["ratelimitd_us_per_decision"] / max(memory[key]["ratelimitd_us_per_decision"], 1e-9)
    redis = "—" if r["mode"] == "memory" else f'{r["redis_us_per_decision"]:.2f}'
    calls = "—" if r["mode"] == "memory" else f'{r["calls_per_decision"]:.4f}'
    print(f'| {r["algorithm"]} | {r["load"]} | {r["limit"]} | {r["mode"]} '
          f'| {r["decisions_per_s"]:.0f} | {r["admitted_per_s"]:.0f} | {vs_exact:.3f} | {calls} '
          f'| {redis} | {r["ratelimitd_us_per_decision"]:.1f} | {vs_memory:.2f} '
          f'| {r["p99_us"] / 1000:.2f} | {r["errors"]} |')
PY
