#!/usr/bin/env bash
# redis-server's cost per ratelimitd decision, beside envoyproxy/ratelimit's INCRBY + EXPIRE
# pipeline, in one run on this machine.
#
#   scripts/redis-cpu-profile.sh > profile.md     # markdown on stdout, progress on stderr
#
# 1. CPU: one redis-server (no persistence), ratelimitd at its default settings (serving lanes,
#    pool, batching) on it, and the load of ratelimit-bench (CONNECTIONS HTTP/2 connections x
#    CONCURRENCY RPCs in flight, KEYS keys, closed loop) for each algorithm with 1 and 3
#    descriptors. redis-server CPU per decision (request) is its utime + stime over the measured
#    seconds (/proc/PID/stat, read by the bench's --store-pid) / requests; script calls are
#    INFO commandstats' FCALL and EVALSHA counts (zeroed before each cell, so counted over the
#    warmup too: decisions per call = every request sent / calls). Each cell runs once per way of
#    calling the scripts in CALLS: `fcall` (ratelimitd connected as the default user: the
#    Functions library, where the server has Functions) and `evalsha` (connected as an ACL user
#    without +function and +fcall, which ratelimitd serves with EVALSHA), one after the other on
#    the same redis-server, so the two compare within one run. Then the baseline on the same
#    redis-server: redis-benchmark -P 16 with BASELINE_CLIENTS clients, INCRBY on KEYS random keys
#    and EXPIRE on the same keys, BASELINE_REQUESTS each; per decision = the CPU of both runs /
#    BASELINE_REQUESTS (one INCRBY and one EXPIRE per descriptor, as upstream pipelines them).
# 2. Profile (PROFILE=1): the same, with redis-server under `valgrind --tool=callgrind
#    --instr-atstart=no`; per cell PROFILE_WARMUP requests, counting on, PROFILE_REQUESTS
#    requests, counting off, dump. Instruction counts are deterministic (the batches are not:
#    under valgrind redis-server is ~50x slower, so calls carry more requests than in part 1).
#    Instructions are grouped by where they go, from inclusive counts of redis-server's exported
#    functions (the binary is stripped: Lua's internals are attributed through lua_pcall):
#      read+parse     readQueryFromClient without the command run (RESP parsing, argv objects)
#      lua entry      evalGenericCommand / fcallCommand without luaCallFunction (script or
#                     function lookup, run context)
#      KEYS/ARGV      luaCallFunction without lua_pcall and reply building (arrays of Lua strings)
#      lua VM         lua_pcall without redis.call (the script's own work: parsing, arithmetic,
#                     string formatting and matching, tables, closures)
#      redis.call     scriptCall without the commands it runs (argv objects, lookup, ACL, flags)
#      GET/TIME       getCommand + timeCommand (key lookup, reply)
#      SET            setCommand (incl. setExpire/removeExpire: PX vs KEEPTTL) and other writes
#      reply          addReply* under luaCallFunction (the script's flat reply)
#      write          writeToClient / handleClientsWithPendingWrites (socket write, user side)
#      other          the rest (event loop, cron, expiry, allocator)
#    Kernel time (syscalls) is not in callgrind's counts; part 1's CPU includes it.
#
# Environment (defaults in brackets):
#   DURATION [5]  WARMUP [1]  CONNECTIONS [4]  CONCURRENCY [16]  KEYS [10000]
#   ALGORITHMS ["fixed_window sliding_window_log sliding_window_counter token_bucket gcra"]
#   DESCRIPTORS_LIST ["1 3"]  BASELINE_REQUESTS [1000000]  BASELINE_CLIENTS [50]
#   PROFILE [1]  PROFILE_REQUESTS [4000]  PROFILE_WARMUP [1000]
#   OPEN_LOOP_RATE [5000] (0 skips): the p99 at this rate, open loop, gcra, 1 descriptor
#   SERVER_ARGS [""]: extra flags for ratelimitd serve (e.g. "--threads 1")
#   CALLS ["fcall evalsha"]: the ways of calling the scripts measured (`fcall` is skipped, with a
#     note, on a server without Functions)
#   REDIS_SERVER [redis-server]: the server binary (e.g. Valkey's valkey-server; redis-cli and
#     redis-benchmark stay Debian's, which speak to it alike)
#   CARGO_BUILD [1] (0: use target/release as built)  BIN [target/release]
#   KEEP [0] (1: keep the work folder, callgrind dumps included, and say where)
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)
DURATION=${DURATION:-5}
WARMUP=${WARMUP:-1}
CONNECTIONS=${CONNECTIONS:-4}
CONCURRENCY=${CONCURRENCY:-16}
KEYS=${KEYS:-10000}
ALGORITHMS=${ALGORITHMS:-"fixed_window sliding_window_log sliding_window_counter token_bucket gcra"}
DESCRIPTORS_LIST=${DESCRIPTORS_LIST:-"1 3"}
BASELINE_REQUESTS=${BASELINE_REQUESTS:-1000000}
BASELINE_CLIENTS=${BASELINE_CLIENTS:-50}
PROFILE=${PROFILE:-1}
PROFILE_REQUESTS=${PROFILE_REQUESTS:-4000}
PROFILE_WARMUP=${PROFILE_WARMUP:-1000}
CALLS=${CALLS:-"fcall evalsha"}
REDIS_SERVER=${REDIS_SERVER:-redis-server}
OPEN_LOOP_RATE=${OPEN_LOOP_RATE:-5000}
SERVER_ARGS=${SERVER_ARGS:-}
CARGO_BUILD=${CARGO_BUILD:-1}
KEEP=${KEEP:-0}
BIN=${BIN:-$ROOT/target/release}

log() { printf '[redis-cpu] %s\n' "$*" >&2; }

for tool in "$REDIS_SERVER" redis-cli redis-benchmark python3; do
  command -v "$tool" >/dev/null || { log "$tool not found"; exit 1; }
done
if [ "$PROFILE" = 1 ]; then
  for tool in valgrind callgrind_control callgrind_annotate; do
    command -v "$tool" >/dev/null || { log "$tool not found (apt-get install valgrind)"; exit 1; }
  done
fi
if [ "$CARGO_BUILD" = 1 ]; then
  log "cargo build --release --workspace --bins"
  cargo build --release --workspace --bins --quiet >&2
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/redis-cpu-profile.XXXXXX")
PIDS=()
cleanup() {
  local pid
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  if [ "$KEEP" = 1 ]; then log "kept $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

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

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
cli() { redis-cli -p "$REDIS_PORT" "$@"; }

# start_redis [wrapper...]: redis-server on a free port (REDIS_PORT, REDIS_PID).
start_redis() {
  REDIS_PORT=$(free_port)
  "$@" "$REDIS_SERVER" --bind 127.0.0.1 --port "$REDIS_PORT" --save "" --appendonly no \
    --dir "$WORK" --logfile "$WORK/redis.log" &
  REDIS_PID=$!
  PIDS+=("$REDIS_PID")
  for _ in $(seq 1 600); do
    if cli PING 2>/dev/null | grep -q PONG; then
      # The user ratelimitd connects as for `evalsha`: everything but FUNCTION and FCALL (a user
      # refused only FUNCTION LOAD still calls a library another user loaded).
      cli ACL SETUSER evalsha on '>evalsha' '~*' '&*' +@all -function -fcall -fcall_ro >/dev/null
      return 0
    fi
    sleep 0.1
  done
  log "redis-server did not answer"; exit 1
}

# The URL ratelimitd connects with to call the scripts as $1 (fcall or evalsha) says.
redis_url() {
  case "$1" in
    fcall) echo "redis://127.0.0.1:$REDIS_PORT" ;;
    evalsha) echo "redis://evalsha:evalsha@127.0.0.1:$REDIS_PORT" ;;
  esac
}

has_functions() { cli FUNCTION LIST >/dev/null 2>&1 && ! cli FUNCTION LIST 2>&1 | grep -q ERR; }

stop_redis() {
  cli SHUTDOWN NOSAVE >/dev/null 2>&1 || kill "$REDIS_PID" 2>/dev/null || true
  wait "$REDIS_PID" 2>/dev/null || true
}

start_ratelimitd() { # start_ratelimitd CALLS
  : >"$WORK/ratelimitd.log"
  # shellcheck disable=SC2086
  "$BIN/ratelimitd" serve --config "$WORK/bench.yaml" --grpc-addr 127.0.0.1:0 \
    --http-addr 127.0.0.1:0 --redis-url "$(redis_url "$1")" $SERVER_ARGS \
    >"$WORK/ratelimitd.log" 2>&1 &
  SERVER_PID=$!
  PIDS+=("$SERVER_PID")
  for _ in $(seq 1 600); do
    SERVER_ADDR=$(sed -n 's/.*grpc_addr=\([0-9.:]*\).*/\1/p' "$WORK/ratelimitd.log" | head -n 1)
    [ -n "$SERVER_ADDR" ] && return 0
    kill -0 "$SERVER_PID" 2>/dev/null || break
    sleep 0.1
  done
  log "ratelimitd did not start:"; cat "$WORK/ratelimitd.log" >&2; exit 1
}

stop_ratelimitd() {
  kill "$SERVER_PID" 2>/dev/null || true
  wait "$SERVER_PID" 2>/dev/null || true
}

# Script calls since the last CONFIG RESETSTAT: FCALL and EVALSHA together.
script_calls() {
  cli INFO commandstats | tr -d '\r' |
    sed -n 's/^cmdstat_\(evalsha\|fcall\):calls=\([0-9]*\),.*/\2/p' |
    awk '{ total += $1 } END { print total + 0 }'
}

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# ---------------------------------------------------------------------------------------------
# 1. CPU per decision

CPU_RESULTS="$WORK/cpu.jsonl"
: >"$CPU_RESULTS"
start_redis
SERVER_VERSION=$(cli INFO server | tr -d '\r' | sed -n 's/^\(redis_version\|valkey_version\|server_name\):/\1 /p' | tr '\n' ' ')
MODES=""
for calls in $CALLS; do
  if [ "$calls" = fcall ] && ! has_functions; then
    log "no Functions on this server: fcall skipped"
    continue
  fi
  MODES="$MODES $calls"
done
OPEN_LOOP=""
for calls in $MODES; do
  start_ratelimitd "$calls"
  log "redis-server $REDIS_PID on $REDIS_PORT, ratelimitd $SERVER_PID on $SERVER_ADDR ($calls)"
  for algorithm in $ALGORITHMS; do
    for descriptors in $DESCRIPTORS_LIST; do
      cli CONFIG RESETSTAT >/dev/null
      log "cpu: $calls, $algorithm, $descriptors descriptor(s)"
      line=$("$BIN/ratelimit-bench" --addr "$SERVER_ADDR" --connections "$CONNECTIONS" \
        --concurrency "$CONCURRENCY" --key "$algorithm" --keys "$KEYS" \
        --descriptors "$descriptors" --duration "${DURATION}s" --warmup "${WARMUP}s" \
        --server-pid "$SERVER_PID" --store-pid "$REDIS_PID" --json)
      printf '%s\t%s\t%s\t%s\t%s\n' "$calls" "$algorithm" "$descriptors" "$(script_calls)" "$line" \
        >>"$CPU_RESULTS"
    done
  done
  if [ "$OPEN_LOOP_RATE" != 0 ] && [ -z "$OPEN_LOOP" ]; then
    log "open loop: $calls, gcra, 1 descriptor, $OPEN_LOOP_RATE/s"
    OPEN_LOOP="$calls	$("$BIN/ratelimit-bench" --addr "$SERVER_ADDR" --connections "$CONNECTIONS" \
      --concurrency "$CONCURRENCY" --key gcra --keys "$KEYS" --descriptors 1 \
      --duration "${DURATION}s" --warmup "${WARMUP}s" --rate "$OPEN_LOOP_RATE" \
      --server-pid "$SERVER_PID" --store-pid "$REDIS_PID" --json)"
  fi
  stop_ratelimitd
done

BASELINE="$WORK/baseline.tsv"
: >"$BASELINE"
for command in "INCRBY rl:__rand_int__ 1" "EXPIRE rl:__rand_int__ 60"; do
  log "baseline: $command, -P 16, $BASELINE_CLIENTS clients"
  before=$(cpu_ticks "$REDIS_PID")
  start=$(date +%s.%N)
  # shellcheck disable=SC2086
  redis-benchmark -p "$REDIS_PORT" -P 16 -c "$BASELINE_CLIENTS" -n "$BASELINE_REQUESTS" \
    -r "$KEYS" -q $command >/dev/null
  end=$(date +%s.%N)
  after=$(cpu_ticks "$REDIS_PID")
  printf '%s\t%s\t%s\n' "${command%% *}" "$((after - before))" \
    "$(python3 -c "print($end - $start)")" >>"$BASELINE"
done
stop_redis

# ---------------------------------------------------------------------------------------------
# 2. Profile

PROFILE_RESULTS="$WORK/profile.tsv"
: >"$PROFILE_RESULTS"
if [ "$PROFILE" = 1 ]; then
  start_redis valgrind --tool=callgrind --instr-atstart=no \
    --callgrind-out-file="$WORK/callgrind.%p" -q
  log "profile: redis-server under callgrind ($REDIS_PID)"
  cell=0
  profile_cell() { # profile_cell NAME SETUP... : one dump of the load that SETUP runs
    local name=$1
    shift
    "$@" "$PROFILE_WARMUP" >/dev/null
    cli CONFIG RESETSTAT >/dev/null
    callgrind_control -z "$REDIS_PID" >/dev/null
    callgrind_control -i on "$REDIS_PID" >/dev/null
    "$@" "$PROFILE_REQUESTS" >/dev/null
    callgrind_control -i off "$REDIS_PID" >/dev/null
    local calls
    calls=$(script_calls)
    callgrind_control -d "$REDIS_PID" >/dev/null
    cell=$((cell + 1))
    local dump
    dump=$(ls -t "$WORK"/callgrind.* | head -n 1)
    cp "$dump" "$WORK/cell-$cell.out"
    printf '%s\t%s\t%s\t%s\n' "$name" "$PROFILE_REQUESTS" "$calls" "$WORK/cell-$cell.out" \
      >>"$PROFILE_RESULTS"
  }
  ratelimitd_load() { # ratelimitd_load ALGORITHM DESCRIPTORS REQUESTS
    "$BIN/ratelimit-bench" --addr "$SERVER_ADDR" --connections "$CONNECTIONS" \
      --concurrency "$CONCURRENCY" --key "$1" --keys "$KEYS" --descriptors "$2" \
      --requests "$3" --warmup 0s --timeout 60s --json
  }
  baseline_load() { # baseline_load REQUESTS: INCRBY + EXPIRE, REQUESTS each
    redis-benchmark -p "$REDIS_PORT" -P 16 -c "$BASELINE_CLIENTS" -n "$1" -r "$KEYS" -q \
      INCRBY rl:__rand_int__ 1 >/dev/null
    redis-benchmark -p "$REDIS_PORT" -P 16 -c "$BASELINE_CLIENTS" -n "$1" -r "$KEYS" -q \
      EXPIRE rl:__rand_int__ 60 >/dev/null
  }
  for calls in $MODES; do
    start_ratelimitd "$calls"
    for algorithm in $ALGORITHMS; do
      for descriptors in $DESCRIPTORS_LIST; do
        log "profile: $calls, $algorithm, $descriptors descriptor(s)"
        profile_cell "$calls $algorithm/$descriptors" ratelimitd_load "$algorithm" "$descriptors"
      done
    done
    stop_ratelimitd
  done
  log "profile: INCRBY + EXPIRE pipeline"
  profile_cell "INCRBY+EXPIRE/1" baseline_load
  stop_redis
fi

# ---------------------------------------------------------------------------------------------
# Report

cpu_model=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
echo "### redis-server per decision: $(date -u +%Y-%m-%d), ratelimitd $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(nproc) CPUs (${cpu_model:-unknown CPU}), $SERVER_VERSION($("$REDIS_SERVER" --version | grep -o 'malloc=[a-z0-9.-]*'))"
echo
echo "Command: \`scripts/redis-cpu-profile.sh\` (DURATION=$DURATION WARMUP=$WARMUP CONNECTIONS=$CONNECTIONS CONCURRENCY=$CONCURRENCY KEYS=$KEYS SERVER_ARGS='$SERVER_ARGS' CALLS='$CALLS' REDIS_SERVER=$(basename "$REDIS_SERVER"))"
echo
python3 - "$CPU_RESULTS" "$BASELINE" "$BASELINE_REQUESTS" "$PROFILE_RESULTS" "$OPEN_LOOP" "$BASELINE_CLIENTS" <<'PY'
import json, re, subprocess, sys
from collections import defaultdict

cpu_path, baseline_path, baseline_requests, profile_path, open_loop, clients = sys.argv[1:7]
baseline_requests = int(baseline_requests)
ticks_us = 1e6 / 100  # /proc/PID/stat counts in USER_HZ (100 on Linux)

base = {}
for line in open(baseline_path):
    command, ticks, seconds = line.split('\t')
    base[command] = (int(ticks) * ticks_us / baseline_requests, baseline_requests / float(seconds))
baseline_us = sum(v[0] for v in base.values())

print('| client of the same redis-server | calls | descriptors | redis-server CPU µs / decision | x baseline | decisions / script call | redis-server µs / call | decisions/s | ratelimitd CPU µs / decision | p99 ms |')
print('|---|---|---:|---:|---:|---:|---:|---:|---:|---:|')
per_decision = {}
for line in open(cpu_path):
    mode, algorithm, descriptors, calls, payload = line.rstrip('\n').split('\t', 4)
    r = json.loads(payload)
    store = r['store_cpu_us_per_request']
    sent = r['requests'] + r['warmup_requests']
    calls = int(calls)
    per_call = sent / calls if calls else float('nan')
    us_call = store * per_call
    per_decision[(mode, algorithm, descriptors)] = store
    print(f"| ratelimitd {algorithm} | {mode.upper()} | {descriptors} | {store:.2f} | {store / baseline_us:.2f} | {per_call:.1f} | {us_call:.1f} | {r['throughput_rps']:.0f} | {r['server_cpu_us_per_request']:.1f} | {r['latency_us']['p99'] / 1000:.2f} |")
print(f"| INCRBY + EXPIRE pipelined (redis-benchmark -P 16, {clients} clients) | — | 1 | {baseline_us:.2f} | 1.00 | — | — | INCRBY {base['INCRBY'][1]:.0f}/s, EXPIRE {base['EXPIRE'][1]:.0f}/s | — | — |")
print()
pairs = [(k[1], k[2]) for k in per_decision if k[0] == 'fcall' and ('evalsha', k[1], k[2]) in per_decision]
if pairs:
    print('| algorithm | descriptors | FCALL µs / decision | EVALSHA µs / decision | FCALL against EVALSHA |')
    print('|---|---:|---:|---:|---:|')
    for algorithm, descriptors in pairs:
        f, e = per_decision[('fcall', algorithm, descriptors)], per_decision[('evalsha', algorithm, descriptors)]
        print(f"| {algorithm} | {descriptors} | {f:.2f} | {e:.2f} | {100 * (f - e) / e:+.1f} % |")
    print()
if open_loop:
    open_mode, open_loop = open_loop.split('\t', 1)
    r = json.loads(open_loop)
    l = r['latency_us']
    print(f"Open loop, {open_mode.upper()}, gcra, 1 descriptor, {r['rate']:.0f}/s: p50 {l['p50']/1000:.2f} ms, p99 {l['p99']/1000:.2f} ms, p99.9 {l['p999']/1000:.2f} ms; redis-server {r['store_cpu_us_per_request']:.1f} µs / decision; errors {r['errors']}.")
    print()

rows = [l.rstrip('\n').split('\t') for l in open(profile_path)]
if not rows:
    sys.exit(0)

def inclusive(path):
    out = subprocess.run(['callgrind_annotate', '--inclusive=yes', '--threshold=100', path],
                         capture_output=True, text=True, check=True).stdout
    incl, total = defaultdict(int), 0
    for line in out.splitlines():
        m = re.match(r'^\s*([\d,]+)\s+\(\s*[\d.]+%\)\s+(?:\S+:)?(\S+?)(?:\s|$)', line)
        if m and 'PROGRAM TOTALS' not in line:
            incl[m.group(2).split(':')[-1]] += int(m.group(1).replace(',', ''))
        m = re.match(r'^\s*([\d,]+)\s+\(100.0%\)\s+PROGRAM TOTALS', line)
        if m:
            total = int(m.group(1).replace(',', ''))
    return incl, total

def commands(i, under_scripts):
    """Inclusive instructions of the commands redis.call ran, reads and writes apart (a helper
    that commands share, such as incrDecrCommand under INCRBY and DECRBY, is not counted again)."""
    top = {'processCommand', 'lookupCommand', 'lookupCommandOrOriginal', 'evalCommand', 'evalShaCommand', 'evalRoCommand', 'evalShaRoCommand', 'fcallCommand', 'fcallroCommand', 'functionLoadCommand', 'scriptCommand',
           'incrDecrCommand', 'infoCommand', 'configCommand', 'configSetCommand',
           'configResetStatCommand', 'pingCommand', 'commandCommand', 'helloCommand',
           'clientCommand', 'clientSetNameCommand'}
    reads = {'getCommand', 'timeCommand', 'zcardCommand', 'zrangeCommand', 'zrangeGenericCommand',
             'zcountCommand', 'hgetCommand', 'hmgetCommand', 'hgetallCommand', 'pttlCommand',
             'ttlCommand', 'existsCommand', 'mgetCommand', 'zscoreCommand'}
    r = w = 0
    if not under_scripts:
        return 0, 0
    for f, v in i.items():
        if f.endswith('Command') and f not in top and not f.endswith('GenericCommand'):
            if f in reads:
                r += v
            else:
                w += v
    return r, w

GROUPS = ['read+parse', 'dispatch', 'lua entry', 'KEYS/ARGV+reply', 'lua VM', 'redis.call',
          'read cmds', 'write cmds', 'INCRBY/EXPIRE', 'write', 'other']
def groups(path):
    i, total = inclusive(path)
    scripted = i['scriptCall'] > 0
    reads, writes = commands(i, scripted)
    # INCRBY and EXPIRE sent as commands (the baseline); under scripts they are write cmds.
    direct = 0 if scripted else i['incrbyCommand'] + i['expireCommand']
    g = {
        'read+parse': i['readQueryFromClient'] - i['call'],
        'dispatch': i['call'] - i['evalGenericCommand'] - i['fcallCommand'] - direct,
        'lua entry': i['evalGenericCommand'] + i['fcallCommand'] - i['luaCallFunction'],
        'KEYS/ARGV+reply': i['luaCallFunction'] - i['lua_pcall'],
        'lua VM': i['lua_pcall'] - i['scriptCall'],
        'redis.call': i['scriptCall'] - reads - writes,
        'read cmds': reads,
        'write cmds': writes,
        'INCRBY/EXPIRE': direct,
        'write': i['writeToClient'],
    }
    g['other'] = total - i['readQueryFromClient'] - i['writeToClient']
    return g, total, i

print('#### Where redis-server\'s instructions go (callgrind; instructions per decision)')
print()
print('| load | decisions / call | total / decision | / call | ' + ' | '.join(GROUPS) + ' |')
print('|---|---:|---:|---:|' + '---:|' * len(GROUPS))
cache = []
for name, requests, calls, path in rows:
    g, total, i = groups(path)
    cache.append(i)
    n = int(requests)
    c = int(calls) or n
    print(f"| {name} | {n / c:.1f} | {total / n:,.0f} | {total / c:,.0f} | " + ' | '.join(f"{g[k] / n:,.0f}" for k in GROUPS) + ' |')
print()
print('Inclusive instructions per decision of the functions the groups are made of:')
print()
KEY_FUNCS = ['readQueryFromClient', 'processCommand', 'call', 'evalGenericCommand', 'fcallCommand', 'luaCallFunction', 'lua_pcall', 'scriptCall', 'getCommand', 'timeCommand', 'setCommand', 'setExpire', 'removeExpire', 'lookupKeyRead', 'lookupKeyWrite', 'createStringObject', 'lookupCommand', 'ACLCheckAllPerm', 'alsoPropagate', 'incrbyCommand', 'expireCommand', 'handleClientsWithPendingWrites', 'addReplyBulk', 'addReplyLongLong', 'addReplyArrayLen', 'lua_gc', 'zmalloc', 'zfree', 'sdsnewlen']
print('| function | ' + ' | '.join(r[0] for r in rows) + ' |')
print('|---|' + '---:|' * len(rows))
for f in KEY_FUNCS:
    print(f'| {f} | ' + ' | '.join(f"{cache[k][f] / int(rows[k][1]):,.0f}" for k in range(len(rows))) + ' |')
PY
