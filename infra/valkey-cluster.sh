#!/usr/bin/env bash
# Local Valkey cluster on loopback for development and tests.
#
#   infra/valkey-cluster.sh start   [--base-port P] [--primaries N] [--replicas R] [--dir DIR]
#                                   [--tls [--mtls]] [--auth] [--preload LIB]
#   infra/valkey-cluster.sh stop    [--base-port P] [--primaries N] [--replicas R] [--dir DIR]
#   infra/valkey-cluster.sh status  [--base-port P] ...
#
# Nodes listen on base-port .. base-port + primaries*(1+replicas) - 1 (default 7001..7003).
# `start` is idempotent: a cluster that is already up and healthy is left alone; nodes that are
# running but not yet joined are (re)created. It waits for cluster_state:ok (and, with replicas,
# for every replica's first sync) and prints the seed address (redis://127.0.0.1:P; with
# replicas every node's, comma separated, as KVCM_VALKEY_URL takes them). Environment: KVCM_VALKEY_BASE_PORT, KVCM_VALKEY_PRIMARIES,
# KVCM_VALKEY_REPLICAS, KVCM_VALKEY_DIR, KVCM_VALKEY_PRELOAD (as --preload).
#
# --tls   Clients reach the cluster over TLS only, through stunnel (the Valkey wheel is built
#         without TLS): the TLS ports are base-port.., each node listens on loopback right after
#         them (base-port + count + i) and announces its TLS port (cluster-announce-port), so
#         CLUSTER SLOTS / NODES and MOVED redirects send clients to TLS ports. A throwaway CA, a
#         server certificate for 127.0.0.1 and localhost, a client certificate and an unrelated
#         second CA are made with openssl under DIR/tls/ (ca.pem, server.pem, client.pem + .key,
#         other-ca.pem). Prints rediss://127.0.0.1:P. No replicas: a replica would replicate
#         from its primary's announced port, which speaks TLS.
# --mtls  With --tls: the TLS ports require a client certificate signed by the CA.
# --auth  Nodes require AUTH: the default user's password (an AUTH token, as ElastiCache's) is in
#         DIR/secrets/token, and an ACL user `kvcm` has the password in DIR/secrets/kvcm.password
#         (made once, random). Passwords go to the nodes in a config file, never on a command line.
#
# --preload LIB  Nodes start with LD_PRELOAD=LIB (the shared library's absolute path), checked in
#         each node's memory map: `make bench` runs Valkey on jemalloc this way (the wheel is built
#         with libc malloc; infra/install-jemalloc.sh). Only valkey-server gets it.
#
# A cluster started with options is stopped with `stop --dir DIR` (the options are remembered in
# DIR/mode); `stop` also stops its stunnel. A `start` whose options differ from a running
# cluster's, or that finds a TLS cluster unhealthy, stops it and starts afresh.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

cmd="${1:-}"; shift || true
base="${KVCM_VALKEY_BASE_PORT:-7001}"
primaries="${KVCM_VALKEY_PRIMARIES:-3}"
replicas="${KVCM_VALKEY_REPLICAS:-0}"
dir="${KVCM_VALKEY_DIR:-}"
tls=0; mtls=0; auth=0; preload="${KVCM_VALKEY_PRELOAD:-}"
while [ $# -gt 0 ]; do
  case "$1" in
    --base-port) base="$2"; shift 2 ;;
    --primaries) primaries="$2"; shift 2 ;;
    --replicas) replicas="$2"; shift 2 ;;
    --dir) dir="$2"; shift 2 ;;
    --tls) tls=1; shift ;;
    --mtls) mtls=1; shift ;;
    --auth) auth=1; shift ;;
    --preload) preload="$2"; shift 2 ;;
    *) die "unknown option $1 (see the header of $0)" ;;
  esac
done
[[ "$base" =~ ^[0-9]+$ ]] || die "--base-port must be a number, got '$base'"
[[ "$primaries" =~ ^[0-9]+$ && "$primaries" -ge 3 ]] || die "--primaries must be >= 3 (cluster mode), got '$primaries'"
[[ "$replicas" =~ ^[0-9]+$ ]] || die "--replicas must be a number, got '$replicas'"
[ "$mtls" = 0 ] || [ "$tls" = 1 ] || die "--mtls needs --tls"
[ "$tls" = 0 ] || [ "$replicas" = 0 ] || die "--tls supports no replicas (they would replicate through the TLS ports)"
[ -z "$preload" ] || [[ "$preload" =~ ^/[A-Za-z0-9_./+-]+$ && -f "$preload" ]] \
  || die "--preload needs the absolute path of an existing library, got '$preload'"
dir="${dir:-$KVCM_HOME/valkey/$base}"
mode="tls=$tls mtls=$mtls auth=$auth${preload:+ preload=$preload}"
# `stop` and `status` of a cluster started with options use the options it was started with.
if [ "$cmd" != start ] && [ -f "$dir/mode" ]; then
  eval "$(cat "$dir/mode")"
  mode="tls=$tls mtls=$mtls auth=$auth${preload:+ preload=$preload}"
fi
count=$((primaries * (1 + replicas)))
# Client-facing ports (TLS ports with --tls) and the ports the nodes listen on.
ports=(); nodes=()
for ((i = 0; i < count; i++)); do
  ports+=($((base + i)))
  if [ "$tls" = 1 ]; then nodes+=($((base + count + i))); else nodes+=($((base + i))); fi
done
nbase="${nodes[0]}"
token_file="$dir/secrets/token"

cli() {
  if [ "$auth" = 1 ] && [ -f "$token_file" ]; then
    REDISCLI_AUTH="$(cat "$token_file")" "$VALKEY_BIN/valkey-cli" "$@"
  else
    "$VALKEY_BIN/valkey-cli" "$@"
  fi
}
alive() { cli -p "$1" ping 2>/dev/null | grep -q PONG; }
# Every replica's link to its primary is up (INFO replication: master_link_status:up).
replicas_synced() {
  local p info
  for p in "${nodes[@]}"; do
    info="$(cli -p "$p" info replication 2>/dev/null)"
    if grep -q '^role:slave' <<<"$info" && ! grep -q '^master_link_status:up' <<<"$info"; then return 1; fi
  done
}
# Anything listening on a port (a node with a password we do not know answers NOAUTH).
listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
cluster_ok() { cli -p "$nbase" cluster info 2>/dev/null | grep -q 'cluster_state:ok' \
  && [ "$(cli -p "$nbase" cluster info | awk -F: '/cluster_known_nodes/{print $2}' | tr -d '\r')" = "$count" ]; }

# ---- TLS: certificates, stunnel, announced ports ----

stunnel_bin() { command -v stunnel4 || command -v stunnel || die "stunnel is missing: run infra/deps.sh (apt-get install stunnel4)"; }
stunnel_alive() { [ -f "$dir/stunnel.pid" ] && kill -0 "$(cat "$dir/stunnel.pid")" 2>/dev/null; }

make_certs() {
  local t="$dir/tls"
  if [ -f "$t/other-ca.pem" ] && openssl x509 -checkend 86400 -noout -in "$t/server.pem" >/dev/null 2>&1 \
    && openssl x509 -checkend 86400 -noout -in "$t/client.pem" >/dev/null 2>&1; then
    return
  fi
  command -v openssl >/dev/null || die "openssl is missing: run infra/deps.sh (apt-get install openssl)"
  rm -rf "$t" && mkdir -p "$t" && chmod 700 "$t"
  local ec=(-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes)
  for ca in ca other-ca; do
    openssl req -x509 "${ec[@]}" -keyout "$t/$ca.key" -out "$t/$ca.pem" -days 30 -subj "/CN=kvcm test $ca" \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" >/dev/null 2>&1 \
      || die "openssl could not make the test CA $ca"
  done
  printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n' >"$t/server.ext"
  printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\n' >"$t/client.ext"
  for leaf in server client; do
    openssl req "${ec[@]}" -keyout "$t/$leaf.key" -out "$t/$leaf.csr" -subj "/CN=kvcm test $leaf" >/dev/null 2>&1 \
      && openssl x509 -req -in "$t/$leaf.csr" -CA "$t/ca.pem" -CAkey "$t/ca.key" -CAcreateserial -days 30 \
        -extfile "$t/$leaf.ext" -out "$t/$leaf.pem" >/dev/null 2>&1 \
      || die "openssl could not make the test $leaf certificate"
  done
  chmod 600 "$t"/*.key
}

start_stunnel() {
  local conf="$dir/stunnel.conf" t="$dir/tls"
  {
    echo "foreground = no"
    echo "pid = $dir/stunnel.pid"
    echo "output = $dir/stunnel.log"
    echo "debug = 4"
    for ((i = 0; i < count; i++)); do
      echo "[node-${ports[$i]}]"
      echo "accept = 127.0.0.1:${ports[$i]}"
      echo "connect = 127.0.0.1:${nodes[$i]}"
      echo "cert = $t/server.pem"
      echo "key = $t/server.key"
      echo "sslVersionMin = TLSv1.2"
      if [ "$mtls" = 1 ]; then echo "CAfile = $t/ca.pem"; echo "verifyChain = yes"; fi
    done
  } >"$conf"
  rm -f "$dir/stunnel.pid"
  "$(stunnel_bin)" "$conf" </dev/null >/dev/null 2>&1 || die "stunnel did not start (see $dir/stunnel.log)"
}

# AUTH + PING through the TLS port with openssl, verifying the server against the CA.
tls_ping() {
  local t="$dir/tls" args=(-quiet -connect "127.0.0.1:$1" -CAfile "$dir/tls/ca.pem" -verify_return_error)
  [ "$mtls" = 1 ] && args+=(-cert "$t/client.pem" -key "$t/client.key")
  local hello="PING"
  [ "$auth" = 1 ] && hello="AUTH $(cat "$token_file")"$'\r\n'"PING"
  printf '%s\r\nQUIT\r\n' "$hello" | timeout 5 openssl s_client "${args[@]}" 2>/dev/null | grep -q PONG
}

# Every node lists every node at its TLS port.
announced() {
  local n p
  for n in "${nodes[@]}"; do
    for p in "${ports[@]}"; do
      cli -p "$n" cluster nodes 2>/dev/null | grep -q " 127.0.0.1:$p@" || return 1
    done
  done
}

tls_ok() {
  stunnel_alive && announced || return 1
  local p; for p in "${ports[@]}"; do tls_ping "$p" || return 1; done
}

# ---- AUTH ----

make_secrets() {
  mkdir -p "$dir/secrets" && chmod 700 "$dir/secrets"
  [ -s "$token_file" ] || head -c 24 /dev/urandom | base64 | tr -d '/+=' >"$token_file"
  [ -s "$dir/secrets/kvcm.password" ] || head -c 24 /dev/urandom | base64 | tr -d '/+=' >"$dir/secrets/kvcm.password"
  chmod 600 "$dir/secrets"/*
}

# ---- start / stop ----

# Whether the process on node port $1 is the valkey-server this script started there.
own_node() {
  local pidfile="$dir/$1/valkey.pid" pid
  [ -f "$pidfile" ] || return 1
  pid="$(cat "$pidfile")"
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "valkey-server.*:$1\b"
}

# Stops our node on port $1: SHUTDOWN NOSAVE, else SIGTERM, else SIGKILL after 5 s.
stop_node() {
  local pid; pid="$(cat "$dir/$1/valkey.pid")"
  cli -p "$1" shutdown nosave >/dev/null 2>&1 || kill "$pid" 2>/dev/null || true
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
  if kill -0 "$pid" 2>/dev/null; then kill -9 "$pid" 2>/dev/null || true; sleep 0.2; fi
  listening "$1" && die "the node on port $1 (pid $pid) did not stop"
  rm -f "$dir/$1/valkey.pid"
}

start() {
  "$(dirname "$0")/install-valkey.sh" >/dev/null
  if [ -f "$dir/mode" ] && [ "$(cat "$dir/mode")" != "$mode" ]; then
    log "cluster on $base runs with other options ($(cat "$dir/mode")): restarting it with $mode"
    "$0" stop --dir "$dir" --base-port "$base" --primaries "$primaries" --replicas "$replicas" >/dev/null
  fi
  local url="redis://127.0.0.1:$base"
  [ "$tls" = 1 ] && url="rediss://127.0.0.1:$base"
  # With replicas, every node is a seed: a client (re)connecting after the first node's primary
  # was lost still finds the cluster.
  if [ "$replicas" -gt 0 ]; then
    url="$(for p in "${ports[@]}"; do printf 'redis://127.0.0.1:%s,' "$p"; done)"; url="${url%,}"
  fi
  if cluster_ok && { [ "$tls" = 0 ] || tls_ok; }; then log "cluster on $base already up"; echo "$url"; return; fi
  if [ "$tls" = 1 ]; then
    # A TLS cluster that is not wholly healthy is rebuilt from scratch: its nodes may announce
    # TLS ports, which `cluster create` cannot use.
    [ -f "$dir/mode" ] && "$0" stop --dir "$dir" --base-port "$base" --primaries "$primaries" >/dev/null 2>&1
    for p in "${ports[@]}" "${nodes[@]}"; do
      listening "$p" && die "port $p is taken by something else; choose another --base-port"
    done
  fi
  mkdir -p "$dir"; dir="$(cd "$dir" && pwd)"; token_file="$dir/secrets/token"
  echo "$mode" >"$dir/mode"
  [ "$auth" = 1 ] && make_secrets
  # Nodes of an earlier run that did not stop cleanly (a closed terminal, a killed shell), in a
  # cluster that is no longer whole: their pid files are in our directory, so they are ours to
  # stop and start afresh (resetting them in place fails once their cluster is down). Anything
  # else on a port is not ours to touch: refused before any node starts.
  for p in "${nodes[@]}"; do
    if listening "$p" && ! own_node "$p"; then
      die "port $p is taken by a process this script did not start (no live pid file in $dir/$p); stop it or choose another --base-port"
    fi
  done
  for p in "${nodes[@]}"; do
    if listening "$p"; then
      log "stopping node $p left over from an earlier run"
      stop_node "$p"
    fi
  done
  for p in "${nodes[@]}"; do
    mkdir -p "$dir/$p"; rm -f "$dir/$p/nodes.conf" "$dir/$p"/*.rdb "$dir/$p"/appendonly*.aof
    local conf="$dir/$p/valkey.conf"
    : >"$conf"; chmod 600 "$conf"
    if [ "$auth" = 1 ]; then
      echo "requirepass $(cat "$token_file")" >>"$conf"
      echo "user kvcm on >$(cat "$dir/secrets/kvcm.password") ~* &* +@all" >>"$conf"
    fi
    local pre=()
    [ -z "$preload" ] || pre=(env "LD_PRELOAD=$preload")
    "${pre[@]}" "$VALKEY_BIN/valkey-server" "$conf" --port "$p" --bind 127.0.0.1 --cluster-enabled yes \
      --cluster-config-file "$dir/$p/nodes.conf" --dir "$dir/$p" --save "" --appendonly no \
      --daemonize yes --logfile "$dir/$p/valkey.log" --pidfile "$dir/$p/valkey.pid" \
      --cluster-node-timeout 3000 --repl-diskless-sync-delay 0 </dev/null >/dev/null 2>&1 || die "valkey-server on port $p did not start (see $dir/$p/valkey.log)"
  done
  for p in "${nodes[@]}"; do
    for _ in $(seq 1 100); do alive "$p" && break; sleep 0.05; done
    alive "$p" || die "valkey-server on port $p does not answer PING (see $dir/$p/valkey.log)"
    if [ -n "$preload" ]; then
      grep -qF "$(readlink -f "$preload")" "/proc/$(cat "$dir/$p/valkey.pid")/maps" 2>/dev/null \
        || die "valkey-server on port $p did not load $preload"
    fi
  done
  addrs=(); for p in "${nodes[@]}"; do addrs+=("127.0.0.1:$p"); done
  cli --cluster create "${addrs[@]}" --cluster-replicas "$replicas" --cluster-yes >"$dir/create.log" 2>&1 \
    || die "cluster create failed (see $dir/create.log)"
  for _ in $(seq 1 200); do cluster_ok && break; sleep 0.05; done
  cluster_ok || die "cluster on $nbase did not reach cluster_state:ok within 10 s"
  # Replicas count only once they hold their primary's data: until their first sync completes
  # they cannot take over (a primary lost before then loses its slots) nor acknowledge WAIT.
  if [ "$replicas" -gt 0 ]; then
    for _ in $(seq 1 400); do replicas_synced && break; sleep 0.05; done
    replicas_synced || die "replicas did not finish their first sync within 20 s (see $dir/*/valkey.log)"
  fi
  if [ "$tls" = 1 ]; then
    make_certs
    start_stunnel
    for ((i = 0; i < count; i++)); do
      # Clients are told the TLS port; the bus port stays the node's own (it would otherwise be
      # derived from the announced port).
      cli -p "${nodes[$i]}" config set cluster-announce-bus-port $((nodes[i] + 10000)) >/dev/null
      cli -p "${nodes[$i]}" config set cluster-announce-port "${ports[$i]}" >/dev/null
    done
    for _ in $(seq 1 200); do tls_ok && break; sleep 0.05; done
    tls_ok || die "the TLS ports ${ports[0]}..${ports[-1]} do not serve the cluster within 10 s (see $dir/stunnel.log)"
    log "TLS through stunnel on ports ${ports[0]}..${ports[-1]}$([ "$mtls" = 1 ] && echo ', client certificates required'); certificates in $dir/tls"
  fi
  log "cluster up: ${#nodes[@]} nodes on ports ${nodes[0]}..${nodes[-1]} ($primaries primaries, $replicas replicas each)$([ "$auth" = 1 ] && echo "; AUTH token in $token_file")"
  echo "$url"
}

stop() {
  if stunnel_alive; then
    local pid; pid="$(cat "$dir/stunnel.pid")"
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
    kill -0 "$pid" 2>/dev/null && die "stunnel (pid $pid) did not stop"
  fi
  for p in "${nodes[@]}"; do
    if alive "$p"; then cli -p "$p" shutdown nosave >/dev/null 2>&1 || true; fi
  done
  for p in "${nodes[@]}"; do
    for _ in $(seq 1 100); do alive "$p" || break; sleep 0.05; done
    alive "$p" && die "valkey-server on port $p did not stop"
  done
  rm -f "$dir/mode"
  log "cluster on $base stopped"
}

status() {
  if cluster_ok && { [ "$tls" = 0 ] || tls_ok; }; then
    echo "ok: $([ "$tls" = 1 ] && echo rediss || echo redis)://127.0.0.1:$base ($count nodes; $mode)"
  else echo "down"; exit 1; fi
}

case "$cmd" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) die "usage: $0 start|stop|status [--base-port P] [--primaries N] [--replicas R] [--dir DIR] [--tls [--mtls]] [--auth]" ;;
esac
