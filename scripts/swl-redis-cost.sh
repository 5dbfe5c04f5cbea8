#!/usr/bin/env bash
# The Redis side of a sliding-window-log decision on a full key: redis-server's own µs per
# EVALSHA of the request script (INFO commandstats), and of each command the script calls, on a
# key holding N hits (default 100 000, a limit of N per hour, used up) against one holding a
# single hit. Starts its own redis-server on a free port; needs redis-server and redis-cli.
#
#   scripts/swl-redis-cost.sh            # N = 100000, 2000 calls per case
#   N=1000000 CALLS=500 scripts/swl-redis-cost.sh
set -euo pipefail
cd "$(dirname "$0")/.."

N="${N:-100000}"
CALLS="${CALLS:-2000}"
W=3600000000
STEP=$((W / N))
T0=1700000000000000

dir="$(mktemp -d)"
port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
redis-server --port "$port" --save '' --appendonly no --dir "$dir" --daemonize no >"$dir/redis.log" 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null; wait "$server" 2>/dev/null; rm -rf "$dir"' EXIT
cli() { redis-cli -p "$port" "$@"; }
for _ in $(seq 50); do cli PING >/dev/null 2>&1 && break; sleep 0.1; done

# The chunk as src/store/redis/scripts/request.rs builds it (`SOURCE`): these files in this order, joined by
# newlines.
for f in common fixed_window sliding_window_log sliding_window_counter token_bucket gcra rates request; do
    cat "lua/$f.lua"
    echo
done >"$dir/script.lua"
head -c -1 "$dir/script.lua" >"$dir/request.lua"
sha="$(cli SCRIPT LOAD "$(cat "$dir/request.lua")")"

# A key as the script writes it: one member "<ts>:<seq>" per hit, score ts.
fill() {
    local key="$1" hits="$2"
    awk -v key="$key" -v n="$hits" -v t0="$T0" -v step="$STEP" 'BEGIN {
        line = "ZADD " key
        for (i = 1; i <= n; i++) {
            ts = sprintf("%.0f", t0 + i * step)
            line = line " " ts " " ts ":0"
            if (i % 1000 == 0 || i == n) { print line; line = "ZADD " key }
        }
    }' | cli >/dev/null
}

# CALLS decisions of 1 hit on `key` at the pinned instants first, first + step, ...
measure() {
    local name="$1" key="$2" first="$3" step="$4"
    cli CONFIG RESETSTAT >/dev/null
    awk -v sha="$sha" -v key="$key" -v n="$CALLS" -v first="$first" -v step="$step" \
        -v limit="$N" -v w="$W" 'BEGIN {
        for (i = 0; i < n; i++) {
            printf "EVALSHA %s 1 %s 1 1 %d %d %d %d 1 %.0f 1 1 0\n", sha, key, limit, w, limit, \
                w / limit, first + i * step
        }
    }' | cli >"$dir/replies"
    local admitted
    admitted="$(awk 'NR % 4 == 2 && $0 == "1"' "$dir/replies" | wc -l)"
    echo "== $name: $CALLS calls, $admitted admitted"
    cli INFO commandstats | tr -d '\r' | grep -E '^cmdstat_(evalsha|z|pexpire)' |
        sed -E 's/^cmdstat_([a-z]+):calls=([0-9]+),usec=[0-9]+,usec_per_call=([0-9.]+).*/   \1: \2 calls, \3 µs per call/'
}

fill "rl1:{full}:sliding_window_log:$W:full" "$N"
fill "rl1:{one}:sliding_window_log:$W:one" 1
echo "keys: full holds $(cli ZCARD "rl1:{full}:sliding_window_log:$W:full") hits, one holds 1"
last=$((T0 + N * STEP))
measure "full key of $N, denied" "rl1:{full}:sliding_window_log:$W:full" $((last + 1)) 0
measure "full key of $N, at the limit (the oldest hit leaves before each call)" \
    "rl1:{full}:sliding_window_log:$W:full" $((last + STEP)) "$STEP"
measure "key of 1 hit, admitted" "rl1:{one}:sliding_window_log:$W:one" $((last + 1)) 0
