#!/usr/bin/env bash
# Soak: a mixed load on two ratelimitd release binaries, one on the memory store and one on
# Redis, for SOAK_SECONDS (default 600), while the configuration is rewritten every
# RELOAD_SECONDS (default 3) and redis-server is restarted twice (at 1/3 and 2/3 of the run,
# SHUTDOWN SAVE and a restart from the dump, so counters survive and over-admission stays
# checkable). Reports, per server: RSS and open descriptors at the start of the load and at its
# end (and their peaks), request counts and errors, configuration reloads, and admitted-vs-limit
# per window from the client side (scripts/soak_check.py: zero over-admission is the bar).
# Not part of scripts/test.sh.
#
#   scripts/soak.sh                       # 10 minutes
#   SOAK_SECONDS=120 scripts/soak.sh      # a short check
#   RATE=2000 CARGO_BUILD=0 scripts/soak.sh
#
# RATE: requests per second of each load generator (two per server, open loop).
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)

SOAK_SECONDS=${SOAK_SECONDS:-600}
RELOAD_SECONDS=${RELOAD_SECONDS:-3}
RATE=${RATE:-1500}
CARGO_BUILD=${CARGO_BUILD:-1}
BIN=${BIN:-$ROOT/target/release}

log() { printf '[soak] %s\n' "$*" >&2; }

for tool in redis-server redis-cli python3 curl; do
  command -v "$tool" >/dev/null 2>&1 || { log "missing $tool"; exit 1; }
done
if [ "$CARGO_BUILD" = 1 ]; then
  log "cargo build --release --workspace --bins"
  cargo build --release --workspace --bins --quiet
fi
for b in ratelimitd ratelimit-bench; do
  [ -x "$BIN/$b" ] || { log "missing $BIN/$b"; exit 1; }
done

WORK=$(mktemp -d "${TMPDIR:-/tmp}/ratelimitd-soak.XXXXXX")
PIDS=()
REDIS_PID=
cleanup() {
  local pid
  for pid in "${PIDS[@]}" $REDIS_PID; do
    kill "$pid" 2>/dev/null || true
  done
  for pid in "${PIDS[@]}" $REDIS_PID; do
    wait "$pid" 2>/dev/null || true
  done
}
trap cleanup EXIT
trap 'exit 130' INT TERM
log "work directory $WORK"

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

REDIS_PORT=$(free_port)
start_redis() {
  redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save "" --appendonly no \
    --dir "$WORK" --dbfilename soak.rdb --logfile "$WORK/redis.log" &
  REDIS_PID=$!
  for _ in $(seq 1 100); do
    redis-cli -p "$REDIS_PORT" ping 2>/dev/null | grep -q PONG && return 0
    sleep 0.05
  done
  log "redis-server did not start"
  return 1
}

# The rules the load and the checker use. The checked rules (check_*) never change; a reload
# alternates the others between two variants.
write_config() {
  local variant=$1 limit=12
  [ "$variant" = 1 ] && limit=14
  cat >"$WORK/config/soak.yaml.tmp" <<YAML
domain: soak
descriptors:
  - key: fixed_window
    rate_limit: {unit: second, requests_per_unit: $limit, algorithm: fixed_window}
  - key: sliding_window_log
    rate_limit: {unit: second, requests_per_unit: $limit, unit_multiplier: 2, algorithm: sliding_window_log}
  - key: sliding_window_counter
    rate_limit: {unit: second, requests_per_unit: $limit, algorithm: sliding_window_counter}
  - key: token_bucket
    rate_limit: {unit: second, requests_per_unit: $limit, algorithm: token_bucket, burst: 20}
  - key: gcra
    rate_limit: {unit: second, requests_per_unit: $limit, algorithm: gcra, burst: 5}
  - key: hot
    rate_limit: {unit: second, requests_per_unit: 200, algorithm: gcra}
  - key: check_fw
    rate_limit: {unit: second, requests_per_unit: 10, algorithm: fixed_window}
  - key: check_fw_minute
    rate_limit: {unit: minute, requests_per_unit: 50, algorithm: fixed_window}
  - key: check_swl
    rate_limit: {unit: second, requests_per_unit: 20, unit_multiplier: 2, algorithm: sliding_window_log}
YAML
  if [ "$variant" = 1 ]; then
    cat >>"$WORK/config/soak.yaml.tmp" <<'YAML'
  - key: extra
    value: only_in_variant_1
    rate_limit: {unit: minute, requests_per_unit: 7}
YAML
  fi
  mv "$WORK/config/soak.yaml.tmp" "$WORK/config/soak.yaml"
}
mkdir -p "$WORK/config"
write_config 0

# start_server NAME ARGS...: sets ADDR_<NAME> (gRPC), HTTP_<NAME> and PID_<NAME>.
start_server() {
  local name=$1 addr="" http=""
  shift
  "$BIN/ratelimitd" serve --config "$WORK/config" --grpc-addr 127.0.0.1:0 \
    --http-addr 127.0.0.1:0 --reload-interval 1s "$@" >"$WORK/$name.log" 2>&1 &
  local pid=$!
  PIDS+=("$pid")
  for _ in $(seq 1 200); do
    addr=$(sed -n 's/.*grpc_addr=\([0-9.:]*\).*/\1/p' "$WORK/$name.log" | head -n 1)
    http=$(sed -n 's/.*http_addr=\([0-9.:]*\).*/\1/p' "$WORK/$name.log" | head -n 1)
    [ -n "$addr" ] && [ -n "$http" ] && break
    sleep 0.05
  done
  [ -n "$addr" ] || { log "$name did not start:"; cat "$WORK/$name.log" >&2; exit 1; }
  printf -v "ADDR_$name" '%s' "$addr"
  printf -v "HTTP_$name" '%s' "$http"
  printf -v "PID_$name" '%s' "$pid"
}

start_redis
start_server memory
start_server redis --redis-url "redis://127.0.0.1:$REDIS_PORT"
log "memory: grpc $ADDR_memory http $HTTP_memory (pid $PID_memory)"
log "redis:  grpc $ADDR_redis http $HTTP_redis (pid $PID_redis), redis-server :$REDIS_PORT"

sample() {
  local pid=$1
  printf '%s %s' "$(awk '/^VmRSS/ {print $2}' "/proc/$pid/status")" "$(ls "/proc/$pid/fd" | wc -l)"
}
sleep 1
IDLE_memory=$(sample "$PID_memory")
IDLE_redis=$(sample "$PID_redis")

# The load: per server, requests of all five algorithms at once over 100 counters each (about
# 15 requests per counter and second at the default RATE, around the limits of 12-14, so some are
# denied), and single-descriptor requests on one hot counter; open loop at RATE each.
for name in memory redis; do
  addr_var="ADDR_$name"
  "$BIN/ratelimit-bench" load --addr "${!addr_var}" --domain soak --rate "$RATE" \
    --connections 2 --concurrency 32 --keys 100 --warmup 0s --duration "${SOAK_SECONDS}s" \
    --timeout 2s --json --label "$name mixed" \
    --descriptor 'fixed_window=k{r}' --descriptor 'sliding_window_log=k{r}' \
    --descriptor 'sliding_window_counter=k{r}' --descriptor 'token_bucket=k{r}' \
    --descriptor 'gcra=k{r}' >"$WORK/load-$name-mixed.json" 2>"$WORK/load-$name-mixed.err" &
  PIDS+=("$!")
  "$BIN/ratelimit-bench" load --addr "${!addr_var}" --domain soak --rate "$RATE" \
    --connections 1 --concurrency 16 --keys 1 --warmup 0s --duration "${SOAK_SECONDS}s" \
    --timeout 2s --json --label "$name hot" --key hot \
    >"$WORK/load-$name-hot.json" 2>"$WORK/load-$name-hot.err" &
  PIDS+=("$!")
done
python3 scripts/soak_check.py --seconds "$SOAK_SECONDS" \
  --target "memory=$HTTP_memory" --target "redis=$HTTP_redis" \
  --check fixed_window:check_fw:10:1 --check fixed_window:check_fw_minute:50:60 \
  --check sliding_window_log:check_swl:20:2 >"$WORK/check.jsonl" 2>"$WORK/check.err" &
CHECK_PID=$!
PIDS+=("$CHECK_PID")

sleep 2
START_memory=$(sample "$PID_memory")
START_redis=$(sample "$PID_redis")
START_redis_server=$(sample "$REDIS_PID")
PEAK_memory=0
PEAK_redis=0
: >"$WORK/samples.txt"

started=$(date +%s)
next_reload=$((started + RELOAD_SECONDS))
restarts=0
restart_at=("$((started + SOAK_SECONDS / 3))" "$((started + 2 * SOAK_SECONDS / 3))")
variant=0
reloads_written=0
END_memory=$START_memory
END_redis=$START_redis
while kill -0 "$CHECK_PID" 2>/dev/null; do
  now=$(date +%s)
  if [ "$now" -ge "$next_reload" ]; then
    variant=$((1 - variant))
    write_config "$variant"
    reloads_written=$((reloads_written + 1))
    next_reload=$((now + RELOAD_SECONDS))
  fi
  if [ "$restarts" -lt 2 ] && [ "$now" -ge "${restart_at[$restarts]}" ]; then
    log "restarting redis-server ($((restarts + 1)) of 2)"
    redis-cli -p "$REDIS_PORT" SHUTDOWN SAVE >/dev/null 2>&1 || true
    wait "$REDIS_PID" 2>/dev/null || true
    sleep 1
    start_redis
    restarts=$((restarts + 1))
  fi
  for name in memory redis; do
    pid_var="PID_$name"
    read -r rss fds <<<"$(sample "${!pid_var}")"
    echo "$now $name $rss $fds" >>"$WORK/samples.txt"
    peak_var="PEAK_$name"
    [ "$rss" -gt "${!peak_var}" ] && printf -v "PEAK_$name" '%s' "$rss"
    printf -v "END_$name" '%s %s' "$rss" "$fds"
  done
  sleep 1
done
END_redis_server=$(sample "$REDIS_PID")
for pid in "${PIDS[@]}"; do
  [ "$pid" = "$PID_memory" ] || [ "$pid" = "$PID_redis" ] || wait "$pid" 2>/dev/null || true
done
sleep 2
AFTER_memory=$(sample "$PID_memory")
AFTER_redis=$(sample "$PID_redis")

metric() {
  curl -s "http://$1/metrics" | awk -v name="$2" '$1 == name {print $2}' | head -n 1
}

echo "== soak: ${SOAK_SECONDS}s, config rewritten $reloads_written times, redis-server restarted $restarts times"
for name in memory redis; do
  start_var="START_$name"
  end_var="END_$name"
  peak_var="PEAK_$name"
  http_var="HTTP_$name"
  pid_var="PID_$name"
  idle_var="IDLE_$name"
  after_var="AFTER_$name"
  read -r rss_idle fds_idle <<<"${!idle_var}"
  read -r rss0 fds0 <<<"${!start_var}"
  read -r rss1 fds1 <<<"${!end_var}"
  read -r rss_after fds_after <<<"${!after_var}"
  fd_peak=$(awk -v n="$name" '$2 == n && $4 > m {m = $4} END {print m + 0}' "$WORK/samples.txt")
  echo "-- $name store (ratelimitd pid ${!pid_var})"
  echo "   RSS: idle ${rss_idle} kB; under load: start ${rss0} kB, end ${rss1} kB, peak ${!peak_var} kB; after ${rss_after} kB"
  echo "   open descriptors: idle $fds_idle; under load: start $fds0, end $fds1, peak $fd_peak; after $fds_after"
  echo "   reloads: ok $(metric "${!http_var}" 'ratelimitd_config_reloads_total{result="success"}'), failed $(metric "${!http_var}" 'ratelimitd_config_reloads_total{result="failure"}')"
  for kind in mixed hot; do
    python3 - "$WORK/load-$name-$kind.json" <<'PY'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except (OSError, ValueError) as e:
    print(f"   load {sys.argv[1]}: no report ({e})")
    sys.exit(0)
print(f"   load {r['label']}: {r['requests']} requests ({r['throughput_rps']:.0f}/s), ok {r['ok']}, "
      f"over_limit {r['over_limit']}, errors {r['errors']} {r['error_kinds'] or ''}, "
      f"p99 {r['latency_us'].get('p99', '?')} µs, max {r['latency_us'].get('max', '?')} µs")
PY
  done
done
if [ -n "$START_redis_server" ]; then
  read -r rss0 fds0 <<<"$START_redis_server"
  read -r rss1 fds1 <<<"$END_redis_server"
  echo "-- redis-server: RSS ${rss0} kB at the start (first process), ${rss1} kB at the end (after $restarts restarts)"
fi
echo "-- admitted vs limit (client side, scripts/soak_check.py)"
python3 - "$WORK/check.jsonl" <<'PY'
import json, sys
bad = 0
for line in open(sys.argv[1]):
    r = json.loads(line)
    head = (f"   {r['server']:6} {r['algorithm']:18} {r['key']:16} limit {r['limit']}/{r['window_s']:g}s: "
            f"{r['requests']} requests, ok {r['ok']}, over_limit {r['over_limit']}, errors {r['errors']}"
            f"{' ' + json.dumps(r['error_kinds']) if r['error_kinds'] else ''}, "
            f"reconnects {r['reconnects']}")
    if r["algorithm"] == "fixed_window":
        print(head + f"; {r['windows']} windows, {r['windows_at_limit']} reached the limit, max ok "
              f"{r['max_ok_per_window']}; over-admitted windows: {r['over_admitted_windows_certain']} "
              f"certain, {r['over_admitted_windows_possible'] - r['over_admitted_windows_certain']} "
              f"only if boundary-straddling answers count in both windows")
        bad += r["over_admitted_windows_certain"]
    else:
        print(head + f"; runs of L+1 OKs within W: {r['over_admitted_runs_certain']} certain, "
              f"{r['over_admitted_runs_possible'] - r['over_admitted_runs_certain']} within the "
              f"client's timing uncertainty")
        bad += r["over_admitted_runs_certain"]
print(f"   over-admission: {'NONE' if bad == 0 else bad}")
sys.exit(1 if bad else 0)
PY
