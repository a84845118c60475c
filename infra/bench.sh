#!/usr/bin/env bash
# `make bench`: the whole benchmark set, briefly (~10 min on 2 cores after the build), on a local
# cluster it starts, with release builds; a summary in .kvcm/bench/summary.{md,json}.
#
#   1. throughput (BENCH_RUNS times): saturation of 128-block prefix reads, direct vs HTTP, then
#      an open-loop run at 50% of the HTTP rate (p50/p99 at half of saturation), then two-phase
#      write sessions/s;
#   2. latency (BENCH_LATENCY_RUNS times): serial prefix match at 100 / 1k / 5k / 20k blocks;
#   3. breakdown: a serial read's time layer by layer (HMGET on the node, through the cluster
#      client, the data plane, HTTP), and peer: kvcm vs Mooncake store master, serial, 128 and
#      1,024 keys, alternating rounds;
#   4. memory per block; engine-reported cache tiers (reportEvent adds, getHostCacheState, memory
#      per reported block) next to Tair's published figures;
#   5. kvcm-replay --setup of the shared trace against a kvcm-api + kvcm-worker (processes), next
#      to the optimizer's prediction.
#
# Environment: BENCH_VALKEY_PORT (7661: cluster 7661..7663; the Mooncake master, kvcm-api and
# kvcm-worker of the run use BENCH_VALKEY_PORT+50..+62), BENCH_RUNS (5 throughput runs: issue 10 asks the HTTP/direct ratio as a median of 5),
# BENCH_LATENCY_RUNS (5), BENCH_SECONDS (5, per throughput phase), BENCH_PROMPTS (8192 prompts of
# 128 blocks = 1M blocks for throughput, as in docs/benchmarks.md), BENCH_BLOCKS (262144, memory),
# BENCH_TRACE (tests/data/traces/mooncake_synthetic_trace.jsonl), BENCH_SPEEDUP (10),
# BENCH_SKIP_BUILD=1, BENCH_VALKEY_MALLOC (jemalloc: the cluster's nodes run with jemalloc
# preloaded, as Valkey's default build allocates; libc: the wheel's own build, as the tests run it).
# The summary names the allocator the run used.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
port="${BENCH_VALKEY_PORT:-7661}"
runs="${BENCH_RUNS:-5}"
lat_runs="${BENCH_LATENCY_RUNS:-5}"
secs="${BENCH_SECONDS:-5}"
prompts="${BENCH_PROMPTS:-8192}"
blocks="${BENCH_BLOCKS:-262144}"
trace="${BENCH_TRACE:-$KVCM_ROOT/tests/data/traces/mooncake_synthetic_trace.jsonl}"
speedup="${BENCH_SPEEDUP:-10}"
out="$KVCM_HOME/bench"
bin="$KVCM_ROOT/target/release"
[ -f "$trace" ] || die "the trace $trace is missing (BENCH_TRACE)"
mkdir -p "$out"

"$KVCM_ROOT/infra/install-valkey.sh" >/dev/null
MC="$("$KVCM_ROOT/infra/install-mooncake.sh")"
if [ -z "${BENCH_SKIP_BUILD:-}" ]; then
  log "building release binaries"
  cargo build --release -p kvcm-api -p kvcm-worker -p kvcm-loadtest -p kvcm-replay >&2
fi

pids=()
cleanup() {
  trap - INT TERM EXIT
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  "$KVCM_ROOT/infra/valkey-cluster.sh" stop --base-port "$port" --dir "$out/valkey" >/dev/null 2>&1 || true
}
trap cleanup EXIT
trap 'cleanup; exit 1' INT TERM

malloc="${BENCH_VALKEY_MALLOC:-jemalloc}"
preload=()
case "$malloc" in
  jemalloc)
    je="$("$KVCM_ROOT/infra/install-jemalloc.sh")"
    [ -n "$je" ] || die "no jemalloc for the cluster (see above); BENCH_VALKEY_MALLOC=libc runs on the wheel's libc malloc"
    preload=(--preload "$je")
    ;;
  libc) ;;
  *) die "BENCH_VALKEY_MALLOC must be jemalloc or libc, not $malloc" ;;
esac
# A fresh cluster every run: one left by an interrupted run may hold its data, or run on the
# other allocator.
"$KVCM_ROOT/infra/valkey-cluster.sh" stop --base-port "$port" --dir "$out/valkey" >/dev/null 2>&1 || true
url="$("$KVCM_ROOT/infra/valkey-cluster.sh" start --base-port "$port" --dir "$out/valkey" "${preload[@]}")"
records="$out/records.jsonl"
: >"$records"
log="$out/bench.log"
: >"$log"
meta_info() {
  printf '{"bench":"machine","date":"%s","cpus":%s,"cpu":"%s","mem_gib":%s,"load_start":"%s","runs":%s,"valkey_malloc":"%s"}\n' \
    "$(date -u +%Y-%m-%dT%H:%MZ)" "$(nproc)" "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)" \
    "$(awk '/MemTotal/ {printf "%.0f", $2/1048576}' /proc/meminfo)" "$(cut -d' ' -f1-3 /proc/loadavg)" "$runs" "$malloc" >>"$records"
}
meta_info
bench() { "$bin/kvcm-bench" --valkey "$url" --record "$records" "$@" | tee -a "$log" >&2; }

# Alternate the two so that machine noise spreads over both.
for i in $(seq $((runs > lat_runs ? runs : lat_runs))); do
  if [ "$i" -le "$runs" ]; then
    log "throughput run $i/$runs"
    bench throughput --concurrency 64 --seconds "$secs" --prompts "$prompts" --open-loop-fraction 0.5
  fi
  if [ "$i" -le "$lat_runs" ]; then
    log "latency run $i/$lat_runs"
    bench latency --requests 300
  fi
done

log "breakdown: where a serial prefix read's time goes"
bench breakdown --sizes 128,1024,20000 --rounds 3 --requests 200

log "peer: kvcm vs Mooncake store master"
mc_port=$((port + 50))
LD_LIBRARY_PATH="$MC/mooncake_transfer_engine_non_cuda.libs:$MC/mooncake:$MC/cudart" \
  "$MC/mooncake/mooncake_master" --rpc_port="$mc_port" --metrics_port=$((mc_port + 1)) >"$out/mooncake-master.log" 2>&1 &
mc_pid=$!
pids+=("$mc_pid")
sleep 1
kill -0 "$mc_pid" 2>/dev/null || die "mooncake_master did not start: $(tail -5 "$out/mooncake-master.log")"
# The Mooncake client's glog lines go to peer.stderr, the results to the log and the terminal.
LD_LIBRARY_PATH="$MC/mooncake_transfer_engine_non_cuda.libs:$MC/mooncake:$MC/cudart" PYTHONPATH="$MC" \
  "$bin/kvcm-bench" --valkey "$url" --record "$records" peer --sizes 128,1024 --rounds 9 --requests 200 \
  --mooncake-master "127.0.0.1:$mc_port" --script "$KVCM_ROOT/loadtest/peer/mooncake_peer.py" 2>"$out/peer.stderr" \
  | tee -a "$log" >&2 || die "kvcm-bench peer failed: $(tail -5 "$out/peer.stderr")"
kill -TERM "$mc_pid" 2>/dev/null || true

log "memory per block ($blocks blocks)"
bench memory --blocks "$blocks" --specs 1

log "engine-reported cache tiers: reportEvent adds, getHostCacheState (Tair's published figures beside them in docs/benchmarks.md)"
bench events --rounds 3 --requests 200

log "replay of $(basename "$trace") at 10% capacity, ${speedup}× speed-up, with a worker"
ns="bench-replay-$(date +%s)"
KVCM_VALKEY_URL="$url" KVCM_NAMESPACE="$ns" KVCM_META_PORT=$((port + 60)) KVCM_ADMIN_PORT=$((port + 61)) \
  KVCM_GRPC_META_PORT=$((port + 63)) KVCM_GRPC_ADMIN_PORT=$((port + 64)) \
  KVCM_LOG_LEVEL=warn "$bin/kvcm-api" >"$out/api.out" 2>"$out/api.log" &
pids+=($!)
KVCM_VALKEY_URL="$url" KVCM_NAMESPACE="$ns" KVCM_WORKER__METRICS_PORT=$((port + 62)) \
  KVCM_WORKER__RECLAIM_INTERVAL_MS=100 KVCM_LOG_LEVEL=warn "$bin/kvcm-worker" >"$out/worker.out" 2>"$out/worker.log" &
pids+=($!)
for _ in $(seq 100); do
  grep -q listening "$out/api.out" 2>/dev/null && grep -q metrics= "$out/worker.out" 2>/dev/null && break
  sleep 0.1
done
grep -q listening "$out/api.out" || die "kvcm-api did not start: $(tail -5 "$out/api.log")"
rm -rf "$out/replay-data"
"$bin/kvcm-replay" --trace "$trace" --meta "http://127.0.0.1:$((port + 60))" --admin "http://127.0.0.1:$((port + 61))" \
  --setup --storage-root "$out/replay-data" --capacity-fraction 0.1 --policy lru --block-bytes 64 --write-bytes \
  --speedup "$speedup" --concurrency 16 --no-progress --json \
  --backpressure-metrics "http://127.0.0.1:$((port + 62))/metrics" --backpressure-over 0.05 >"$out/replay.json" \
  || die "kvcm-replay failed"
printf '{"bench":"replay","speedup":%s,"report":%s}\n' "$speedup" "$(tr -d '\n' <"$out/replay.json")" >>"$records"
rm -rf "$out/replay-data"
printf '{"bench":"machine_end","load_end":"%s"}\n' "$(cut -d' ' -f1-3 /proc/loadavg)" >>"$records"

python3 "$KVCM_ROOT/infra/bench-summary.py" "$records" "$out/summary.md" "$out/summary.json"
cat "$out/summary.md"
