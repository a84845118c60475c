#!/usr/bin/env bash
# `make run`: a local kvcm on an embedded default configuration.
#
# Starts a 3-primary Valkey cluster (ports KVCM_VALKEY_BASE_PORT.., default 7001..7003), then
# kvcm-api and kvcm-worker with a startup config that creates a `file` storage `local_file` under
# .kvcm/data/local_file/ and an instance group `default`, prints the URLs and serves in the
# foreground. Ctrl-C / SIGTERM stops every process and the cluster.
#
# Overrides: KVCM_META_PORT (6382), KVCM_ADMIN_PORT (6492), KVCM_GRPC_META_PORT (6381),
# KVCM_GRPC_ADMIN_PORT (6491), KVCM_GRPC (true), KVCM_VALKEY_URL (use an existing
# cluster instead of starting one), KVCM_VALKEY_BASE_PORT, KVCM_VALKEY_REPLICAS (replicas per
# primary, e.g. 2 to try failovers with KVCM_DURABILITY=replica_ack), any other KVCM_* config key.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
profile="${KVCM_PROFILE:-release}"
bin="$KVCM_ROOT/target/$profile"

started_cluster=""
pids=()
pidfile="$KVCM_HOME/run.pids"
cleanup() {
  trap - INT TERM EXIT
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -f "$pidfile"
  if [ -n "$started_cluster" ]; then "$KVCM_ROOT/infra/valkey-cluster.sh" stop >/dev/null 2>&1 || true; fi
  log "stopped"
}
trap cleanup EXIT
trap 'cleanup; exit 0' INT TERM

# kvcm processes of an earlier run that did not stop cleanly (a killed shell leaves them
# running, holding the ports): ours if their executable is this checkout's binary.
if [ -f "$pidfile" ]; then
  while read -r p; do
    exe="$(readlink "/proc/$p/exe" 2>/dev/null || true)"
    case "$exe" in
      "$KVCM_ROOT"/target/*/kvcm-api | "$KVCM_ROOT"/target/*/kvcm-worker)
        log "stopping $(basename "$exe") (pid $p) left over from an earlier run"
        kill -TERM "$p" 2>/dev/null || true
        for _ in $(seq 1 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.05; done
        kill -9 "$p" 2>/dev/null || true ;;
    esac
  done <"$pidfile"
  rm -f "$pidfile"
fi

if [ -z "${KVCM_VALKEY_URL:-}" ]; then
  KVCM_VALKEY_URL="$("$KVCM_ROOT/infra/valkey-cluster.sh" start)"
  started_cluster=1
  export KVCM_VALKEY_URL
fi

data="$KVCM_HOME/data/local_file"
mkdir -p "$data"
startup="${KVCM_STARTUP_CONFIG:-$KVCM_HOME/startup.json}"
if [ -z "${KVCM_STARTUP_CONFIG:-}" ]; then
  cat >"$startup" <<JSON
{
  "storage_config": { "type": "file", "global_unique_name": "local_file",
                      "storage_spec": { "root_path": "$data/", "key_count_per_file": 1 } },
  "instance_group": { "name": "default", "storage_candidates": ["local_file"],
                      "quota": { "capacity": 10737418240,
                                 "quota_config": [ { "storage_type": "file", "capacity": 10737418240 } ] },
                      "cache_config": { "reclaim_strategy": { "reclaim_policy": 1,
                                          "trigger_strategy": { "used_percentage": 0.8 },
                                          "delay_before_delete_ms": 1000 } } }
}
JSON
fi
export KVCM_STARTUP_CONFIG="$startup"

"$bin/kvcm-api" &
pids+=($!)
log "kvcm-api pid ${pids[-1]}; Valkey at $KVCM_VALKEY_URL; data under $data"
"$bin/kvcm-worker" &
pids+=($!)
log "kvcm-worker pid ${pids[-1]}; metrics on http://127.0.0.1:${KVCM_WORKER__METRICS_PORT:-6592}/metrics"
log "meta plane:  http://127.0.0.1:${KVCM_META_PORT:-6382}   admin plane: http://127.0.0.1:${KVCM_ADMIN_PORT:-6492}   metrics: http://127.0.0.1:${KVCM_ADMIN_PORT:-6492}/metrics"
log "gRPC (Tair's services): MetaService 127.0.0.1:${KVCM_GRPC_META_PORT:-6381}   AdminService 127.0.0.1:${KVCM_GRPC_ADMIN_PORT:-6491}"
printf '%s\n' "${pids[@]}" >"$pidfile"
log "press Ctrl-C to stop"
# Serve until any process exits or we are signalled.
wait -n "${pids[@]}"
