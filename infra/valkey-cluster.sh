#!/usr/bin/env bash
# Local Valkey cluster on loopback for development and tests.
#
#   infra/valkey-cluster.sh start   [--base-port P] [--primaries N] [--replicas R] [--dir DIR]
#   infra/valkey-cluster.sh stop    [--base-port P] [--primaries N] [--replicas R] [--dir DIR]
#   infra/valkey-cluster.sh status  [--base-port P] ...
#
# Nodes listen on base-port .. base-port + primaries*(1+replicas) - 1 (default 7001..7003).
# `start` is idempotent: a cluster that is already up and healthy is left alone; nodes that are
# running but not yet joined are (re)created. It waits for cluster_state:ok and prints the seed
# address (redis://127.0.0.1:P). Environment: KVCM_VALKEY_BASE_PORT, KVCM_VALKEY_PRIMARIES,
# KVCM_VALKEY_REPLICAS, KVCM_VALKEY_DIR.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

cmd="${1:-}"; shift || true
base="${KVCM_VALKEY_BASE_PORT:-7001}"
primaries="${KVCM_VALKEY_PRIMARIES:-3}"
replicas="${KVCM_VALKEY_REPLICAS:-0}"
dir="${KVCM_VALKEY_DIR:-}"
while [ $# -gt 0 ]; do
  case "$1" in
    --base-port) base="$2"; shift 2 ;;
    --primaries) primaries="$2"; shift 2 ;;
    --replicas) replicas="$2"; shift 2 ;;
    --dir) dir="$2"; shift 2 ;;
    *) die "unknown option $1 (see the header of $0)" ;;
  esac
done
[[ "$base" =~ ^[0-9]+$ ]] || die "--base-port must be a number, got '$base'"
[[ "$primaries" =~ ^[0-9]+$ && "$primaries" -ge 3 ]] || die "--primaries must be >= 3 (cluster mode), got '$primaries'"
[[ "$replicas" =~ ^[0-9]+$ ]] || die "--replicas must be a number, got '$replicas'"
dir="${dir:-$KVCM_HOME/valkey/$base}"
count=$((primaries * (1 + replicas)))
ports=(); for ((i = 0; i < count; i++)); do ports+=($((base + i))); done

cli() { "$VALKEY_BIN/valkey-cli" "$@"; }
alive() { cli -p "$1" ping 2>/dev/null | grep -q PONG; }
cluster_ok() { cli -p "$base" cluster info 2>/dev/null | grep -q 'cluster_state:ok' \
  && [ "$(cli -p "$base" cluster info | awk -F: '/cluster_known_nodes/{print $2}' | tr -d '\r')" = "$count" ]; }

start() {
  "$(dirname "$0")/install-valkey.sh" >/dev/null
  if cluster_ok; then log "cluster on $base already up"; echo "redis://127.0.0.1:$base"; return; fi
  mkdir -p "$dir"; dir="$(cd "$dir" && pwd)"
  for p in "${ports[@]}"; do
    if alive "$p"; then
      # A half-formed cluster from an earlier run: reset it so `cluster create` can proceed.
      cli -p "$p" flushall >/dev/null 2>&1 || true
      cli -p "$p" cluster reset hard >/dev/null
      continue
    fi
    mkdir -p "$dir/$p"; rm -f "$dir/$p/nodes.conf"
    "$VALKEY_BIN/valkey-server" --port "$p" --bind 127.0.0.1 --cluster-enabled yes \
      --cluster-config-file "$dir/$p/nodes.conf" --dir "$dir/$p" --save "" --appendonly no \
      --daemonize yes --logfile "$dir/$p/valkey.log" --pidfile "$dir/$p/valkey.pid" \
      --cluster-node-timeout 3000 </dev/null >/dev/null 2>&1 || die "valkey-server on port $p did not start (see $dir/$p/valkey.log)"
  done
  for p in "${ports[@]}"; do
    for _ in $(seq 1 100); do alive "$p" && break; sleep 0.05; done
    alive "$p" || die "valkey-server on port $p does not answer PING (see $dir/$p/valkey.log)"
  done
  addrs=(); for p in "${ports[@]}"; do addrs+=("127.0.0.1:$p"); done
  cli --cluster create "${addrs[@]}" --cluster-replicas "$replicas" --cluster-yes >"$dir/create.log" 2>&1 \
    || die "cluster create failed (see $dir/create.log)"
  for _ in $(seq 1 200); do cluster_ok && break; sleep 0.05; done
  cluster_ok || die "cluster on $base did not reach cluster_state:ok within 10 s"
  log "cluster up: ${#ports[@]} nodes on ports ${ports[0]}..${ports[-1]} ($primaries primaries, $replicas replicas each)"
  echo "redis://127.0.0.1:$base"
}

stop() {
  for p in "${ports[@]}"; do
    if alive "$p"; then cli -p "$p" shutdown nosave >/dev/null 2>&1 || true; fi
  done
  for p in "${ports[@]}"; do
    for _ in $(seq 1 100); do alive "$p" || break; sleep 0.05; done
    alive "$p" && die "valkey-server on port $p did not stop"
  done
  log "cluster on $base stopped"
}

status() {
  if cluster_ok; then echo "ok: redis://127.0.0.1:$base ($count nodes)"; else echo "down"; exit 1; fi
}

case "$cmd" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) die "usage: $0 start|stop|status [--base-port P] [--primaries N] [--replicas R] [--dir DIR]" ;;
esac
