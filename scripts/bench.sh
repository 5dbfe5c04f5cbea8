#!/usr/bin/env bash
# scripts/bench.sh: ratelimitd's benchmark matrix and its ceilings, in one run on this machine.
#
#   scripts/bench.sh > bench.md          # the markdown tables on stdout, progress on stderr
#
# Starts what it needs: builds --release; a redis-server on a free loopback port; ratelimitd with a
# bench configuration (below) on the memory store, then on Redis; rls-ceiling. Then it runs
#   1. the matrix store (memory, redis) x algorithm (5) x keys (1 hot, 100000) x descriptors (1, 3);
#   2. the ceilings: (a) transport: rls-ceiling, a default tonic server answering a constant OK,
#      under the same load; (b) Redis: redis-benchmark calling the same request script with
#      EVALSHA, same keys and arguments, at the same concurrency, without pipelining;
#   3. open-loop runs at half of the peak throughput (memory, redis; gcra, 100k keys, 1 descriptor)
#      and the transport ceiling at the memory store's rate (CPU per request at equal load), and on
#      Redis the time of one request on an idle server (1 connection, 1 RPC in flight; 1 and 3
#      descriptors) and, for comparison, the matrix load again with redis-server pinned to CPU 1
#      alone and ratelimitd with the load generator on CPU 0 (gcra, 100k keys, 1 and 3 descriptors);
#   4. the memory store's footprint: RSS growth per key over FOOTPRINT_KEYS keys, and release;
#   5. after the matrix, beside its single-server Redis runs, Redis Cluster: for each M in
#      CLUSTER_MASTERS_LIST, M cluster-enabled redis-servers (no replicas, no persistence) on free
#      loopback ports, every slot assigned (redis-cli --cluster create for 3 or more; by hand for
#      fewer, which it refuses), ratelimitd --redis-cluster with REDIS_RUN_THREADS threads, and
#      the matrix load for gcra and fixed_window (those in ALGORITHMS), 100000 keys, 1 and 3
#      descriptors (those in DESCRIPTORS_LIST); per cell, the CPU of every master summed and each
#      master's EVALSHA calls (INFO commandstats, zeroed with CONFIG RESETSTAT before each
#      attempt, so counted over the warmup too: the report divides them by every request sent,
#      warmup included);
# and prints the tables (ratelimit-bench report) with every figure and ratio.
#
# Load: CONNECTIONS HTTP/2 connections x CONCURRENCY RPCs in flight each (the Redis ceiling runs
# CONNECTIONS x CONCURRENCY redis-benchmark clients). Memory-store and transport-ceiling runs pin
# the server to CPU 0 and the load generator to CPU 1 (taskset), so server CPU per request is
# measured without the two fighting over a core; Redis runs are not pinned (three processes), and
# ratelimitd gets REDIS_RUN_THREADS serving threads: redis-server and the load generator use about
# one of the two CPUs, and more serving threads than free CPUs only add context switches
# (measured on 2 CPUs: 1 thread 67-72k req/s, p99 at half peak ~1.0 ms; 2 threads 57-63k, 1.2-2 ms).
#
# Bench configuration (domain `bench`, one key-only rule per algorithm, keyed by its name; every
# value has its own counter): 1 000 000 per second for fixed_window, sliding_window_counter,
# token_bucket and gcra (never reached here: all requests are OK); 1 000 per second for
# sliding_window_log, whose state holds one entry per admitted request: with a hot key most of its
# requests are OVER_LIMIT (the log stays at 1 000 entries), with 100k keys all are OK.
# Descriptor i of a request is `<algorithm>=d<i>-<r>`, r uniform in 0..keys: with 1 key, 3
# descriptors are 3 distinct hot counters.
#
# Environment (defaults in brackets):
#   DURATION [3] measured seconds per cell    WARMUP [1] seconds of load before measuring
#   CONNECTIONS [2]   CONCURRENCY [16]        STORES ["memory redis"]
#   ALGORITHMS ["fixed_window sliding_window_log sliding_window_counter token_bucket gcra"]
#   KEYS_LIST ["1 100000"]   DESCRIPTORS_LIST ["1 3"]
#   CEILINGS [1]   HALF_PEAK [1]   FOOTPRINT_KEYS [1000000] (0 skips)
#   REDIS_RUN_THREADS [1]: ratelimitd's --threads in the Redis runs (one server and cluster)
#   CLUSTER [1]: 0 skips the Redis Cluster runs   CLUSTER_MASTERS_LIST ["1 3"]: their masters
#   RESULTS [a temporary file]: where the JSON lines go (kept; its path is printed on stderr)
#   CARGO_BUILD [1]: 0 uses the binaries already built
#   BIN [target/release]: where ratelimitd, ratelimit-bench and rls-ceiling are
#   REPEAT [1]: runs per cell, the least disturbed is kept (on a machine shared with other work):
#     in closed loop the one with the highest throughput, in open loop (every attempt meets the
#     offered rate) the one with the lowest p99; the Redis ceiling likewise by throughput. The
#     descriptor counts of one row take turns within each round (1, 3, 1, 3, ...), so that both
#     meet the same phases of the machine. Every attempt is logged on stderr
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)

DURATION=${DURATION:-3}
WARMUP=${WARMUP:-1}
CONNECTIONS=${CONNECTIONS:-2}
CONCURRENCY=${CONCURRENCY:-16}
STORES=${STORES:-"memory redis"}
ALGORITHMS=${ALGORITHMS:-"fixed_window sliding_window_log sliding_window_counter token_bucket gcra"}
KEYS_LIST=${KEYS_LIST:-"1 100000"}
DESCRIPTORS_LIST=${DESCRIPTORS_LIST:-"1 3"}
CEILINGS=${CEILINGS:-1}
HALF_PEAK=${HALF_PEAK:-1}
FOOTPRINT_KEYS=${FOOTPRINT_KEYS:-1000000}
CARGO_BUILD=${CARGO_BUILD:-1}
REPEAT=${REPEAT:-1}
REDIS_RUN_THREADS=${REDIS_RUN_THREADS:-1}
CLUSTER=${CLUSTER:-1}
CLUSTER_MASTERS_LIST=${CLUSTER_MASTERS_LIST:-"1 3"}
IN_FLIGHT=$((CONNECTIONS * CONCURRENCY))

log() { printf '[bench] %s\n' "$*" >&2; }

# ---------------------------------------------------------------------------------------------
# Tools

need_apt=()
command -v redis-server >/dev/null 2>&1 || need_apt+=(redis-server)
{ command -v redis-cli >/dev/null 2>&1 && command -v redis-benchmark >/dev/null 2>&1; } ||
  need_apt+=(redis-tools)
command -v taskset >/dev/null 2>&1 || need_apt+=(util-linux)
if ((${#need_apt[@]})); then
  log "installing ${need_apt[*]} (apt-get)"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >&2
fi

if [ "$CARGO_BUILD" = 1 ]; then
  log "cargo build --release --workspace --bins"
  cargo build --release --workspace --bins --quiet >&2
fi
BIN=${BIN:-$ROOT/target/release}
for b in ratelimitd ratelimit-bench rls-ceiling; do
  [ -x "$BIN/$b" ] || { log "missing $BIN/$b"; exit 1; }
done

# Pinning: server on CPU 0, load generator on CPU 1 (only with at least 2 CPUs).
CPUS=$(nproc)
if [ "$CPUS" -ge 2 ]; then
  PIN_SERVER=(taskset -c 0)
  PIN_CLIENT=(taskset -c 1)
else
  PIN_SERVER=()
  PIN_CLIENT=()
fi

# Other work on the machine skews every figure: say so.
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
if awk -v l="${LOAD_START%% *}" 'BEGIN { exit !(l > 0.5) }'; then
  log "WARNING: load average $LOAD_START before starting: other processes will skew the figures"
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/ratelimitd-bench.XXXXXX")
RESULTS=${RESULTS:-$WORK/results.jsonl}
: >"$RESULTS"
PIDS=()
cleanup() {
  local pid
  for pid in "${PIDS[@]}"; do
    kill "$pid" 2>/dev/null || true
  done
  for pid in "${PIDS[@]}"; do
    wait "$pid" 2>/dev/null || true
  done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------------------------------------
# Processes

# Waits for `grpc_addr=IP:PORT` in a log file; prints IP:PORT.
wait_for_addr() {
  local logfile=$1 pid=$2 i addr
  for i in $(seq 1 200); do
    addr=$(sed -n 's/.*grpc_addr=\([0-9.:]*\).*/\1/p' "$logfile" | head -n 1)
    if [ -n "$addr" ]; then
      echo "$addr"
      return 0
    fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  log "no grpc_addr in $logfile:"
  cat "$logfile" >&2
  return 1
}

start_redis() {
  local try port
  for try in 1 2 3 4 5 6 7 8; do
    port=$((20000 + RANDOM % 40000))
    redis-server --bind 127.0.0.1 --port "$port" --save "" --appendonly no \
      --dir "$WORK" --logfile "$WORK/redis.log" &
    REDIS_PID=$!
    for _ in $(seq 1 100); do
      if redis-cli -p "$port" ping 2>/dev/null | grep -q PONG; then
        PIDS+=("$REDIS_PID")
        REDIS_PORT=$port
        return 0
      fi
      kill -0 "$REDIS_PID" 2>/dev/null || break
      sleep 0.05
    done
    kill "$REDIS_PID" 2>/dev/null || true
    wait "$REDIS_PID" 2>/dev/null || true
  done
  log "could not start redis-server"
  return 1
}

port_free() { # port_free PORT: nothing listens on 127.0.0.1:PORT
  ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# start_cluster_node: one cluster-enabled redis-server on a free loopback port at most 55535
# whose cluster bus port (port + 10000) is free too; appends to CLUSTER_PORTS and CLUSTER_PIDS.
start_cluster_node() {
  local try port pid
  for try in 1 2 3 4 5 6 7 8; do
    # RANDOM stops at 32767: two of them reach every port of 20000..55535.
    port=$((20000 + (RANDOM * 32768 + RANDOM) % 35536))
    if ! port_free "$port" || ! port_free $((port + 10000)); then
      continue
    fi
    # A node reads its cluster state back from this file: a port met before must start empty.
    rm -f "$WORK/nodes-$port.conf"
    redis-server --cluster-enabled yes --cluster-config-file "nodes-$port.conf" \
      --cluster-node-timeout 2000 --save "" --appendonly no --bind 127.0.0.1 --port "$port" \
      --dir "$WORK" --logfile "$WORK/redis-cluster-$port.log" &
    pid=$!
    for _ in $(seq 1 100); do
      if redis-cli -p "$port" ping 2>/dev/null | grep -q PONG; then
        PIDS+=("$pid")
        CLUSTER_PORTS+=("$port")
        CLUSTER_PIDS+=("$pid")
        return 0
      fi
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.05
    done
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  log "could not start a cluster node"
  return 1
}

assign_slots() { # assign_slots PORT FIRST LAST: the node at PORT owns slots FIRST..LAST
  local reply slots
  reply=$(redis-cli -p "$1" cluster addslotsrange "$2" "$3")
  if [ "$reply" != OK ]; then
    # Before Redis 7.0 there is no ADDSLOTSRANGE: every slot named.
    mapfile -t slots < <(seq "$2" "$3")
    reply=$(redis-cli -p "$1" cluster addslots "${slots[@]}")
  fi
  if [ "$reply" != OK ]; then
    log "cluster addslots $2..$3 on port $1: $reply"
    return 1
  fi
}

# start_cluster M: a Redis Cluster of M masters, no replicas, every slot assigned; returns once
# every node says cluster_state:ok (at most 10 s). Sets CLUSTER_PORTS, CLUSTER_PIDS and
# CLUSTER_SEEDS (every node's HOST:PORT, comma-separated).
start_cluster() {
  local masters=$1 i port ok nodes=()
  CLUSTER_PORTS=()
  CLUSTER_PIDS=()
  for i in $(seq 1 "$masters"); do
    start_cluster_node
  done
  for port in "${CLUSTER_PORTS[@]}"; do
    nodes+=("127.0.0.1:$port")
  done
  if [ "$masters" -ge 3 ]; then
    if ! redis-cli --cluster create "${nodes[@]}" --cluster-replicas 0 --cluster-yes \
      >"$WORK/cluster-create-$masters.log" 2>&1; then
      log "redis-cli --cluster create failed:"
      cat "$WORK/cluster-create-$masters.log" >&2
      return 1
    fi
  else
    # redis-cli --cluster create refuses fewer than 3 masters: an even split of the slots, and
    # every node met by the first.
    for i in $(seq 0 $((masters - 1))); do
      assign_slots "${CLUSTER_PORTS[$i]}" $((16384 * i / masters)) \
        $((16384 * (i + 1) / masters - 1))
      if [ "$i" -gt 0 ]; then
        redis-cli -p "${CLUSTER_PORTS[0]}" cluster meet 127.0.0.1 "${CLUSTER_PORTS[$i]}" >/dev/null
      fi
    done
  fi
  for _ in $(seq 1 200); do
    ok=1
    for port in "${CLUSTER_PORTS[@]}"; do
      if ! redis-cli -p "$port" cluster info 2>/dev/null | grep -q '^cluster_state:ok'; then
        ok=0
        break
      fi
    done
    [ "$ok" = 0 ] || break
    sleep 0.05
  done
  if [ "$ok" = 0 ]; then
    log "the cluster of ${CLUSTER_PORTS[*]} is not ok after 10 s:"
    redis-cli -p "$port" cluster info >&2 || true
    return 1
  fi
  CLUSTER_SEEDS=$(IFS=,; echo "${nodes[*]}")
}

stop_cluster() {
  local pid
  for pid in "${CLUSTER_PIDS[@]}"; do
    kill "$pid" 2>/dev/null || true
  done
  for pid in "${CLUSTER_PIDS[@]}"; do
    wait "$pid" 2>/dev/null || true
  done
}

# start_server NAME CMD...: starts a server that logs grpc_addr=; sets SERVER_PID and SERVER_ADDR.
start_server() {
  local name=$1
  shift
  "$@" >"$WORK/$name.log" 2>&1 &
  SERVER_PID=$!
  PIDS+=("$SERVER_PID")
  SERVER_ADDR=$(wait_for_addr "$WORK/$name.log" "$SERVER_PID")
}

stop_server() {
  kill "$SERVER_PID" 2>/dev/null || true
  wait "$SERVER_PID" 2>/dev/null || true
}

cat >"$WORK/bench.yaml" <<'YAML'
domain: bench
descriptors:
  - key: fixed_window
    rate_limit: {unit: second, requests_per_unit: 1000000, algorithm: fixed_window}
  - key: sliding_window_log
    rate_limit: {unit: second, requests_per_unit: 1000, algorithm: sliding_window_log}
  - key: sliding_window_counter
    rate_limit: {unit: second, requests_per_unit: 1000000, algorithm: sliding_window_counter}
  - key: token_bucket
    rate_limit: {unit: second, requests_per_unit: 1000000, algorithm: token_bucket}
  - key: gcra
    rate_limit: {unit: second, requests_per_unit: 1000000, algorithm: gcra}
YAML

# The limit of each rule above (requests per second; window 1 s; burst = limit).
limit_of() {
  case $1 in
    sliding_window_log) echo 1000 ;;
    *) echo 1000000 ;;
  esac
}

code_of() {
  case $1 in
    fixed_window) echo 0 ;;
    sliding_window_log) echo 1 ;;
    sliding_window_counter) echo 2 ;;
    token_bucket) echo 3 ;;
    gcra) echo 4 ;;
  esac
}

# load pin|nopin|beside KIND STORE ALGORITHM KEYS COUNTS [extra ratelimit-bench args...]
# Runs ratelimit-bench against SERVER_ADDR REPEAT times for each descriptor count in COUNTS ("1" or
# "1 3"), the counts taking turns within each round so that they meet the same phases of a shared
# machine (their ratio is a target); appends each count's kept JSON line to RESULTS and echoes them,
# one per line, in COUNTS' order. pin: the load generator on CPU 1 (the server is on CPU 0);
# beside: on CPU 0, beside the server. An empty ALGORITHM (ceilings) sends the gcra rule's
# descriptors.
load() {
  local pin=$1 kind=$2 store=$3 algorithm=$4 keys=$5 counts=$6
  shift 6
  local client=() key=${algorithm:-gcra} line score attempt descriptors
  local -A best=() best_score=()
  local open_loop=0
  [[ " $* " == *" --rate "* ]] && open_loop=1
  [ "$pin" = pin ] && client=("${PIN_CLIENT[@]}")
  [ "$pin" = beside ] && client=("${PIN_SERVER[@]}")
  for attempt in $(seq 1 "$REPEAT"); do
    for descriptors in $counts; do
      [ "$store" = redis ] && redis_flush
      [ "$store" = cluster ] && cluster_reset
      line=$("${client[@]}" "$BIN/ratelimit-bench" --addr "$SERVER_ADDR" \
        --connections "$CONNECTIONS" --concurrency "$CONCURRENCY" \
        --domain bench --key "$key" --keys "$keys" --descriptors "$descriptors" \
        --duration "${DURATION}s" --warmup "${WARMUP}s" --server-pid "$SERVER_PID" \
        --tag "kind=$kind" --tag "store=$store" --tag "algorithm=$algorithm" \
        --tag "attempts=$REPEAT" --json "$@")
      # Each master's script calls of this attempt, into its JSON line (before the closing brace).
      if [ "$store" = cluster ]; then
        line="${line%\}},\"evalsha_calls\":[$(evalsha_calls)]}"
      fi
      # The least disturbed attempt: closed loop, the highest throughput; open loop (the offered
      # rate is met by every attempt), the lowest p99.
      if [ "$open_loop" = 1 ]; then
        score=-$(p99_of "$line")
      else
        score=$(field throughput_rps "$line")
      fi
      [ "$REPEAT" -gt 1 ] && summary "  attempt $attempt of $REPEAT, desc=$descriptors" "$line"
      if exceeds "$score" "${best_score[$descriptors]:-}"; then
        best[$descriptors]=$line
        best_score[$descriptors]=$score
      fi
    done
  done
  for descriptors in $counts; do
    echo "${best[$descriptors]}" >>"$RESULTS"
    echo "${best[$descriptors]}"
  done
}

field() { # field NAME JSON: a top-level number of a compact JSON object
  sed -n "s/.*\"$1\":\([-0-9.e+]*\).*/\1/p" <<<"$2" | head -n 1
}

exceeds() { # exceeds A B: A > B as numbers, or B is empty (nothing kept yet)
  [ -z "$2" ] || awk -v a="$1" -v b="$2" 'BEGIN { exit !(a > b) }'
}

p99_of() { # p99_of JSON: the p99 latency (µs) of a ratelimit-bench JSON line
  sed -n 's/.*"p99":\([0-9.]*\).*/\1/p' <<<"$1"
}

summary() { # one progress line on stderr
  local line=$2
  log "$1: $(field throughput_rps "$line" | cut -d. -f1) req/s, p99 $(p99_of "$line" | cut -d. -f1) µs, server $(field server_cpu_us_per_request "$line") µs/req, errors $(field errors "$line")"
}

redis_flush() { redis-cli -p "$REDIS_PORT" flushall >/dev/null; }

cluster_reset() { # before an attempt: every master empty, its command counts zero
  local port
  for port in "${CLUSTER_PORTS[@]}"; do
    redis-cli -p "$port" flushall >/dev/null
    redis-cli -p "$port" config resetstat >/dev/null
  done
}

evalsha_calls() { # each master's EVALSHA calls since cluster_reset, comma-separated
  local port calls counts=()
  for port in "${CLUSTER_PORTS[@]}"; do
    calls=$(redis-cli -p "$port" info commandstats |
      sed -n 's/^cmdstat_evalsha:calls=\([0-9]*\).*/\1/p')
    counts+=("${calls:-0}")
  done
  (
    IFS=,
    echo "${counts[*]}"
  )
}

cpu_ticks() { # utime + stime of a pid, in clock ticks
  cut -d')' -f2 "/proc/$1/stat" | awk '{print $12 + $13}'
}

declare -A PEAK=()

# ---------------------------------------------------------------------------------------------
# 1. The matrix

if [[ " $STORES " == *" redis "* ]] || [ "$CEILINGS" = 1 ]; then
  start_redis
  log "redis-server $(redis-server --version | awk '{print $3}') on port $REDIS_PORT (pid $REDIS_PID)"
fi

for store in $STORES; do
  case $store in
    memory)
      start_server ratelimitd-memory "${PIN_SERVER[@]}" "$BIN/ratelimitd" serve \
        --config "$WORK/bench.yaml" --grpc-addr 127.0.0.1:0 --http-addr 127.0.0.1:0
      pin=pin
      store_pid=()
      ;;
    redis)
      start_server ratelimitd-redis "$BIN/ratelimitd" serve --config "$WORK/bench.yaml" \
        --grpc-addr 127.0.0.1:0 --http-addr 127.0.0.1:0 --threads "$REDIS_RUN_THREADS" \
        --redis-url "redis://127.0.0.1:$REDIS_PORT"
      pin=nopin
      store_pid=(--store-pid "$REDIS_PID")
      ;;
    *)
      log "unknown store $store"
      exit 1
      ;;
  esac
  log "ratelimitd ($store store) on $SERVER_ADDR (pid $SERVER_PID)"
  for algorithm in $ALGORITHMS; do
    for keys in $KEYS_LIST; do
      lines=$(load "$pin" matrix "$store" "$algorithm" "$keys" "$DESCRIPTORS_LIST" "${store_pid[@]}")
      while IFS= read -r line; do
        descriptors=$(field descriptors "$line")
        PEAK[$store/$algorithm/$keys/$descriptors]=$(field throughput_rps "$line")
        summary "$store $algorithm keys=$keys desc=$descriptors" "$line"
      done <<<"$lines"
    done
  done
  if [ "$HALF_PEAK" = 1 ] && [[ " $ALGORITHMS " == *" gcra "* ]] &&
    [[ " $KEYS_LIST " == *" 100000 "* ]] && [[ " $DESCRIPTORS_LIST " == *" 1 "* ]]; then
    peak=${PEAK[$store/gcra/100000/1]}
    rate=$(awk -v p="$peak" 'BEGIN { printf "%d", p / 2 }')
    line=$(load "$pin" half_peak "$store" gcra 100000 1 --rate "$rate" "${store_pid[@]}")
    summary "$store gcra keys=100000 desc=1 at half peak ($rate req/s)" "$line"
  fi
  # The time of one request on an idle server: one connection, one RPC in flight.
  if [ "$store" = redis ] && [[ " $ALGORITHMS " == *" gcra "* ]] &&
    [[ " $KEYS_LIST " == *" 100000 "* ]]; then
    lines=$(CONNECTIONS=1 CONCURRENCY=1 load "$pin" unloaded "$store" gcra 100000 \
      "$DESCRIPTORS_LIST" "${store_pid[@]}")
    while IFS= read -r line; do
      summary "$store gcra keys=100000 desc=$(field descriptors "$line") unloaded" "$line"
    done <<<"$lines"
  fi
  # Beside the matrix, not instead of it: redis-server on a CPU of its own (as on a host of its
  # own in production), ratelimitd and the load generator on the other, same load.
  if [ "$store" = redis ] && [ "$CPUS" -ge 2 ] && [[ " $ALGORITHMS " == *" gcra "* ]] &&
    [[ " $KEYS_LIST " == *" 100000 "* ]]; then
    taskset -p -c 1 "$REDIS_PID" >/dev/null
    taskset -a -p -c 0 "$SERVER_PID" >/dev/null
    lines=$(load beside redis_own_cpu "$store" gcra 100000 "$DESCRIPTORS_LIST" "${store_pid[@]}")
    while IFS= read -r line; do
      summary "$store gcra keys=100000 desc=$(field descriptors "$line"), redis-server on CPU 1 alone" "$line"
    done <<<"$lines"
    taskset -p -c "0-$((CPUS - 1))" "$REDIS_PID" >/dev/null
  fi
  stop_server
done

# ---------------------------------------------------------------------------------------------
# 1b. Redis Cluster, beside the single server: the same load, counters spread over M masters.

cluster_algorithms=()
for algorithm in gcra fixed_window; do
  if [[ " $ALGORITHMS " == *" $algorithm "* ]]; then
    cluster_algorithms+=("$algorithm")
  fi
done
cluster_descriptors=""
for descriptors in 1 3; do
  if [[ " $DESCRIPTORS_LIST " == *" $descriptors "* ]]; then
    cluster_descriptors+=" $descriptors"
  fi
done
if [ "$CLUSTER" = 1 ] && [ "${#cluster_algorithms[@]}" -gt 0 ] && [ -n "$cluster_descriptors" ]; then
  for masters in $CLUSTER_MASTERS_LIST; do
    start_cluster "$masters"
    log "redis cluster of $masters master(s) on ports ${CLUSTER_PORTS[*]} (pids ${CLUSTER_PIDS[*]})"
    start_server "ratelimitd-cluster-$masters" "$BIN/ratelimitd" serve \
      --config "$WORK/bench.yaml" --grpc-addr 127.0.0.1:0 --http-addr 127.0.0.1:0 \
      --threads "$REDIS_RUN_THREADS" --redis-cluster "$CLUSTER_SEEDS"
    log "ratelimitd (redis cluster store) on $SERVER_ADDR (pid $SERVER_PID)"
    store_pid=()
    for pid in "${CLUSTER_PIDS[@]}"; do
      store_pid+=(--store-pid "$pid")
    done
    for algorithm in "${cluster_algorithms[@]}"; do
      lines=$(load nopin cluster cluster "$algorithm" 100000 "$cluster_descriptors" \
        --tag "masters=$masters" "${store_pid[@]}")
      while IFS= read -r line; do
        calls=$(sed -n 's/.*"evalsha_calls":\[\([0-9,]*\)\].*/\1/p' <<<"$line")
        summary "cluster masters=$masters $algorithm keys=100000 desc=$(field descriptors "$line"), EVALSHA calls per master $calls" "$line"
      done <<<"$lines"
    done
    stop_server
    stop_cluster
  done
fi

# ---------------------------------------------------------------------------------------------
# 2. Ceilings

if [ "$CEILINGS" = 1 ]; then
  # (a) Transport: rls-ceiling under the same load, pinned like the memory store.
  start_server rls-ceiling "${PIN_SERVER[@]}" "$BIN/rls-ceiling" --grpc-addr 127.0.0.1:0
  log "rls-ceiling on $SERVER_ADDR (pid $SERVER_PID)"
  lines=$(load pin transport_ceiling ceiling "" 100000 "$DESCRIPTORS_LIST")
  while IFS= read -r line; do
    descriptors=$(field descriptors "$line")
    PEAK[ceiling/$descriptors]=$(field throughput_rps "$line")
    summary "transport ceiling desc=$descriptors" "$line"
  done <<<"$lines"
  # The same offered load as the memory store's half-peak run (CPU per request falls as load
  # rises, since more responses share each syscall: compare at equal load), else half its own.
  if [ "$HALF_PEAK" = 1 ] && [ -n "${PEAK[ceiling/1]:-}" ]; then
    peak=${PEAK[memory/gcra/100000/1]:-${PEAK[ceiling/1]}}
    rate=$(awk -v p="$peak" 'BEGIN { printf "%d", p / 2 }')
    line=$(load pin half_peak transport "" 100000 1 --rate "$rate")
    summary "transport ceiling desc=1 open loop at $rate req/s" "$line"
  fi
  stop_server

  # (b) Redis: the store's script, loaded exactly as src/store/redis/scripts/request.rs assembles it
  # (common.lua, the five algorithms, rates.lua, request.lua, joined with one newline), called
  # with EVALSHA.
  {
    cat lua/common.lua
    printf '\n'
    cat lua/fixed_window.lua
    printf '\n'
    cat lua/sliding_window_log.lua
    printf '\n'
    cat lua/sliding_window_counter.lua
    printf '\n'
    cat lua/token_bucket.lua
    printf '\n'
    cat lua/gcra.lua
    printf '\n'
    cat lua/rates.lua
    printf '\n'
    cat lua/request.lua
  } >"$WORK/script.lua"
  scripts_before=$(redis-cli -p "$REDIS_PORT" info memory | sed -n 's/^number_of_cached_scripts:\([0-9]*\).*/\1/p')
  SHA=$(redis-cli -p "$REDIS_PORT" -x script load <"$WORK/script.lua" | tr -d '\r')
  scripts_after=$(redis-cli -p "$REDIS_PORT" info memory | sed -n 's/^number_of_cached_scripts:\([0-9]*\).*/\1/p')
  if [[ " $STORES " == *" redis "* ]] && [ "$scripts_before" != "$scripts_after" ]; then
    log "WARNING: the script assembled here differs from the one ratelimitd loaded ($SHA)"
  fi
  log "request script sha1 $SHA"
  for algorithm in $ALGORITHMS; do
    limit=$(limit_of "$algorithm")
    code=$(code_of "$algorithm")
    interval=$(((1000000 + limit - 1) / limit))
    for keys in $KEYS_LIST; do
      for descriptors in $DESCRIPTORS_LIST; do
        # Keys as the store writes them: rl1:{tag}:<algorithm>:<window_us>:bench:<key>=d<i>-<r>.
        random=()
        value=0
        if [ "$keys" -gt 1 ]; then
          random=(-r "$keys")
          value=__rand_int__
        fi
        cmd=(EVALSHA "$SHA" "$descriptors")
        for i in $(seq 0 $((descriptors - 1))); do
          cmd+=("rl1:{00000000000000$(printf '%02d' "$i")}:$algorithm:1000000:bench:$algorithm=d$i-$value")
        done
        # One request per call: the rate table (one rate: code, L, W, B, T), then the request: its
        # check count, '-' (Redis time), then per check its rate (1), hits (1) and shadow (0).
        cmd+=(1 "$code" "$limit" 1000000 "$limit" "$interval" "$descriptors" -)
        for i in $(seq 1 "$descriptors"); do
          cmd+=(1 1 0)
        done
        redis_flush
        # A short run (also the warmup) sizes the measured one to about DURATION seconds.
        probe=$(redis-benchmark -p "$REDIS_PORT" -c "$IN_FLIGHT" -n 20000 "${random[@]}" --csv \
          "${cmd[@]}" | tail -n 1 | tr -d '"')
        probe_rps=$(awk -F, '{print $(NF-6)}' <<<"$probe")
        requests=$(awk -v r="$probe_rps" -v d="$DURATION" 'BEGIN { n = int(r * d); if (n < 20000) n = 20000; print n }')
        best_rps=""
        for attempt in $(seq 1 "$REPEAT"); do
          redis_flush
          t0=$(cpu_ticks "$REDIS_PID")
          out=$(redis-benchmark -p "$REDIS_PORT" -c "$IN_FLIGHT" -n "$requests" "${random[@]}" \
            --csv "${cmd[@]}" | tail -n 1 | tr -d '"')
          t1=$(cpu_ticks "$REDIS_PID")
          rps=$(awk -F, '{print $(NF-6)}' <<<"$out")
          if exceeds "$rps" "$best_rps"; then
            csv=$out
            before=$t0
            after=$t1
            best_rps=$rps
          fi
        done
        line=$(awk -F, -v alg="$algorithm" -v keys="$keys" -v desc="$descriptors" \
          -v n="$requests" -v c="$IN_FLIGHT" -v t0="$before" -v t1="$after" \
          -v hz="$(getconf CLK_TCK)" '{
            rps = $(NF-6); p50 = $(NF-3); p99 = $(NF-1);
            cpu = (t1 - t0) * 1000000 / hz / n;
            printf "{\"tags\":{\"kind\":\"redis_ceiling\",\"store\":\"redis\",\"algorithm\":\"%s\"},\"keys\":%d,\"descriptors\":%d,\"in_flight\":%d,\"requests\":%d,\"throughput_rps\":%s,\"latency_us\":{\"p50\":%.1f,\"p99\":%.1f},\"store_cpu_us_per_request\":%.2f}\n",
              alg, keys, desc, c, n, rps, p50 * 1000, p99 * 1000, cpu
          }' <<<"$csv")
        echo "$line" >>"$RESULTS"
        log "redis ceiling $algorithm keys=$keys desc=$descriptors: $(field throughput_rps "$line" | cut -d. -f1) req/s, redis $(field store_cpu_us_per_request "$line") µs/req"
      done
    done
  done
fi

# ---------------------------------------------------------------------------------------------
# 3. Memory-store footprint

if [ "$FOOTPRINT_KEYS" -gt 0 ]; then
  for algorithm in fixed_window sliding_window_counter token_bucket gcra; do
    line=$("$BIN/ratelimit-bench" footprint --keys "$FOOTPRINT_KEYS" --algorithm "$algorithm" --json)
    echo "$line" >>"$RESULTS"
    log "footprint $algorithm: $(field bytes_per_key "$line") bytes/key"
  done
fi

# ---------------------------------------------------------------------------------------------
# Report

log "results: $RESULTS"
cpu_model=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
echo "### Benchmark: $(date -u +%Y-%m-%d) on ${CPUS} CPUs (${cpu_model:-unknown CPU}), ratelimitd $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
echo
echo "\`DURATION=$DURATION WARMUP=$WARMUP CONNECTIONS=$CONNECTIONS CONCURRENCY=$CONCURRENCY scripts/bench.sh\`:" \
  "$CONNECTIONS HTTP/2 connections x $CONCURRENCY RPCs in flight ($IN_FLIGHT), closed loop," \
  "${DURATION} s measured per cell after ${WARMUP} s warmup; memory store and transport ceiling" \
  "pinned (server CPU 0, load generator CPU 1); redis-server $(redis-server --version | awk '{print $3}' | sed 's/v=//')." \
  "Load average before the run: $LOAD_START."
echo
"$BIN/ratelimit-bench" report "$RESULTS"
