#!/usr/bin/env bash
# Server CPU per request of two kvcm-api binaries, side by side (docs/benchmarks.md: "One
# reference count per request"). Both serve one namespace on one Valkey cluster; a 128-block
# prompt is written once, then `ab` sends the same getCacheLocation (QT_PREFIX_MATCH, all hits)
# to each binary in turn, alternating per round; a binary's CPU is the utime+stime delta of
# /proc/PID/stat over its run, divided by the requests.
#
# Usage: loadtest/cpu/per_request.sh OLD_BINARY NEW_BINARY [ROUNDS]
# Environment: VALKEY (default redis://127.0.0.1:7661), REQUESTS (40000), CONCURRENCY (32),
# PORT_BASE (18000: old on +1/+2, new on +11/+12), PROFILE (a path: `perf record -g` of the new
# binary during its first round, written there; that round's figures include perf's own cost;
# needs perf). Needs ab (apache2-utils), curl, python3.
set -euo pipefail
old=$1 new=$2 rounds=${3:-6}
requests=${REQUESTS:-40000} concurrency=${CONCURRENCY:-32} base=${PORT_BASE:-18000}
command -v ab >/dev/null || { echo "needs ab (apt-get install apache2-utils)" >&2; exit 1; }
if [ -n "${PROFILE:-}" ]; then command -v perf >/dev/null || { echo "PROFILE needs perf (apt-get install linux-perf)" >&2; exit 1; }; fi
work=$(mktemp -d)
export KVCM_VALKEY_URL=${VALKEY:-redis://127.0.0.1:7661} KVCM_NAMESPACE="cpu$$" KVCM_GRPC=false KVCM_LOG_LEVEL=warn
KVCM_META_PORT=$((base + 1)) KVCM_ADMIN_PORT=$((base + 2)) "$old" >"$work/old.out" 2>"$work/old.err" &
old_pid=$!
KVCM_META_PORT=$((base + 11)) KVCM_ADMIN_PORT=$((base + 12)) "$new" >"$work/new.out" 2>"$work/new.err" &
new_pid=$!
trap 'kill $old_pid $new_pid 2>/dev/null; rm -rf "$work"' EXIT
for port in $((base + 1)) $((base + 11)); do
  for _ in $(seq 100); do curl -sf "localhost:$port/api/healthy" >/dev/null 2>&1 && break; sleep 0.1; done
done
meta=localhost:$((base + 1)) admin=localhost:$((base + 2))
curl -sf "$admin/api/addStorage" -d "{\"storage\": {\"global_unique_name\": \"nfs_01\",
  \"nfs\": {\"root_path\": \"$work/nfs/\", \"key_count_per_file\": 1}}}" >/dev/null
curl -sf "$admin/api/createInstanceGroup" -d '{"instance_group": {"name": "g", "storage_candidates": ["nfs_01"],
  "quota": {"capacity": 107374182400}, "version": 1}}' >/dev/null
curl -sf "$meta/api/registerInstance" -d '{"instance_group": "g", "instance_id": "i", "block_size": 16,
  "location_spec_infos": [{"name": "tp0", "size": 1024}], "model_deployment": {"model_name": "m", "dtype": "bf16"}}' >/dev/null
keys=$(seq 1001 1128 | paste -sd,)
session=$(curl -sf "$meta/api/startWriteCache" -d "{\"instance_id\": \"i\", \"block_keys\": [$keys]}" |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["write_session_id"])')
curl -sf "$meta/api/finishWriteCache" -d "{\"instance_id\": \"i\", \"write_session_id\": \"$session\",
  \"success_blocks\": {\"offset\": 128}}" >/dev/null
echo "{\"instance_id\": \"i\", \"query_type\": \"QT_PREFIX_MATCH\", \"block_keys\": [$keys]}" >"$work/body"
hits=$(curl -sf "localhost:$((base + 11))/api/getCacheLocation" -d @"$work/body" | python3 -c 'import json, sys; print(len(json.load(sys.stdin)["locations"]))')
[ "$hits" = 128 ] || { echo "expected 128 hits, got $hits" >&2; exit 1; }
ticks=$(getconf CLK_TCK)
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
for round in $(seq "$rounds"); do
  for side in old new; do
    if [ $side = old ]; then pid=$old_pid port=$((base + 1)); else pid=$new_pid port=$((base + 11)); fi
    before=$(cpu $pid)
    perf_pid=
    if [ -n "${PROFILE:-}" ] && [ "$round" = 1 ] && [ $side = new ]; then
      perf record -F 2000 -g -p "$pid" -o "$PROFILE" >/dev/null 2>&1 &
      perf_pid=$!
    fi
    ab -q -k -c "$concurrency" -n "$requests" -p "$work/body" -T application/json \
      "http://127.0.0.1:$port/api/getCacheLocation" >"$work/ab.out" 2>&1
    after=$(cpu $pid)
    if [ -n "$perf_pid" ]; then kill -INT "$perf_pid" 2>/dev/null || true; wait "$perf_pid" || true; fi
    failed=$(awk '/Failed requests/ {print $3}' "$work/ab.out")
    rate=$(awk '/Requests per second/ {print $4}' "$work/ab.out")
    us=$(python3 -c "print(round(($after - $before) * 1e6 / $ticks / $requests, 2))")
    echo "round $round $side: $us us CPU per request, $rate requests/s, $failed failed"
  done
done
