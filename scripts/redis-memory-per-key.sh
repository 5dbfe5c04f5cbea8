#!/usr/bin/env bash
# Redis memory per tracked key, by algorithm: ratelimitd (default settings) on its own
# redis-server, KEYS requests of 1 descriptor each on distinct counters (a value drawn from 10^12,
# so collisions are a handful; DBSIZE counts the keys written), rules per hour so no key expires
# during the run: 1 000 000 for the window algorithms, 10 for token_bucket and gcra (whose keys
# live only until the bucket is full again: 6 minutes after 1 hit of 10 per hour). Per algorithm: FLUSHALL, the requests, then
#   INFO memory     (used_memory after - before) / keys: what the keyspace costs, dict and expiry
#                   entries included
#   MEMORY USAGE    of 100 sampled keys (SAMPLES 0): the key's value and its dict entry alone
#   the value as stored (one sample, and its OBJECT ENCODING)
#
#   scripts/redis-memory-per-key.sh > memory.md    # markdown on stdout, progress on stderr
#   KEYS [100000]  ALGORITHMS [all five]  CARGO_BUILD [1]  BIN [target/release]
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)
KEYS=${KEYS:-100000}
ALGORITHMS=${ALGORITHMS:-"fixed_window sliding_window_log sliding_window_counter token_bucket gcra"}
CARGO_BUILD=${CARGO_BUILD:-1}
BIN=${BIN:-$ROOT/target/release}

log() { printf '[redis-memory] %s\n' "$*" >&2; }
if [ "$CARGO_BUILD" = 1 ]; then
  cargo build --release --workspace --bins --quiet >&2
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/redis-memory.XXXXXX")
PIDS=()
cleanup() {
  local pid
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

{
  echo "domain: memory"
  echo "descriptors:"
  for algorithm in $ALGORITHMS; do
    case $algorithm in
      token_bucket | gcra) limit=10 ;;
      *) limit=1000000 ;;
    esac
    echo "  - key: $algorithm"
    echo "    rate_limit: {unit: hour, requests_per_unit: $limit, algorithm: $algorithm}"
  done
} >"$WORK/memory.yaml"

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
redis-server --bind 127.0.0.1 --port "$port" --save "" --appendonly no --dir "$WORK" \
  --logfile "$WORK/redis.log" &
PIDS+=($!)
cli() { redis-cli -p "$port" "$@"; }
for _ in $(seq 1 100); do cli PING 2>/dev/null | grep -q PONG && break; sleep 0.1; done

"$BIN/ratelimitd" serve --config "$WORK/memory.yaml" --grpc-addr 127.0.0.1:0 \
  --http-addr 127.0.0.1:0 --redis-url "redis://127.0.0.1:$port" >"$WORK/ratelimitd.log" 2>&1 &
PIDS+=($!)
addr=""
for _ in $(seq 1 300); do
  addr=$(sed -n 's/.*grpc_addr=\([0-9.:]*\).*/\1/p' "$WORK/ratelimitd.log" | head -n 1)
  [ -n "$addr" ] && break
  sleep 0.1
done
[ -n "$addr" ] || { log "ratelimitd did not start"; cat "$WORK/ratelimitd.log" >&2; exit 1; }

used_memory() { cli INFO memory | tr -d '\r' | sed -n 's/^used_memory:\([0-9]*\)$/\1/p'; }

echo "### Redis memory per key: $(date -u +%Y-%m-%d), ratelimitd $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(redis-server --version | cut -d' ' -f3)"
echo
echo "Command: \`scripts/redis-memory-per-key.sh\` (KEYS=$KEYS)"
echo
echo "| algorithm | keys | INFO used_memory bytes / key | MEMORY USAGE bytes / key (mean of 100) | encoding | a value as stored |"
echo "|---|---:|---:|---:|---|---|"
for algorithm in $ALGORITHMS; do
  log "$algorithm: $KEYS requests on distinct counters"
  cli FLUSHALL >/dev/null
  before=$(used_memory)
  "$BIN/ratelimit-bench" --addr "$addr" --domain memory \
    --descriptor "$algorithm=m{r}" --keys 1000000000000 --requests "$KEYS" --warmup 0s \
    --json >/dev/null
  after=$(used_memory)
  keys=$(cli DBSIZE)
  total=0
  sampled=0
  sample=""
  for _ in $(seq 1 100); do
    key=$(cli RANDOMKEY)
    [ -n "$key" ] || continue
    sample=$key
    total=$((total + $(cli MEMORY USAGE "$key" SAMPLES 0)))
    sampled=$((sampled + 1))
  done
  encoding=$(cli OBJECT ENCODING "$sample")
  case $(cli TYPE "$sample") in
    string) value=$(cli GET "$sample") ;;
    zset) value="zset: $(cli ZRANGE "$sample" 0 -1 WITHSCORES | paste -sd' ')" ;;
    *) value="?" ;;
  esac
  python3 -c "import sys; k=int(sys.argv[2]); print(f'| {sys.argv[1]} | {k} | {(int(sys.argv[4]) - int(sys.argv[3])) / k:.0f} | {int(sys.argv[5]) / int(sys.argv[6]):.0f} | {sys.argv[7]} | \`{sys.argv[8]}\` (key \`{sys.argv[9]}\`) |')" \
    "$algorithm" "$keys" "$before" "$after" "$total" "$sampled" "$encoding" "$value" "$sample"
done
