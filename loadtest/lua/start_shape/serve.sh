#!/usr/bin/env bash
# Starts one kvcm-api (BINARY, default target/release/kvcm-api) on ports 18301/18302 against the
# cluster at 127.0.0.1:7661 (infra/valkey-cluster.sh start --base-port 7661), with a group, an
# instance "i" and a stored 128-block prompt; its pid goes to /tmp/kvcm-start-shape/api.pid. Used by start_shape.py.
# Usage: loadtest/lua/start_shape/serve.sh [BINARY]
set -euo pipefail
bin=${1:-target/release/kvcm-api}
dir=/tmp/kvcm-start-shape; mkdir -p $dir
export KVCM_VALKEY_URL=redis://127.0.0.1:7661 KVCM_NAMESPACE="shape$$" KVCM_GRPC=false KVCM_LOG_LEVEL=warn
KVCM_META_PORT=18301 KVCM_ADMIN_PORT=18302 setsid "$bin" > $dir/api.out 2> $dir/api.err &
echo $! > $dir/api.pid
for _ in $(seq 100); do curl -sf localhost:18301/api/healthy >/dev/null 2>&1 && break; sleep 0.1; done
meta=localhost:18301 admin=localhost:18302
curl -sf "$admin/api/addStorage" -d "{\"storage\": {\"global_unique_name\": \"nfs_01\", \"nfs\": {\"root_path\": \"/tmp/kvcm-start-shape/\", \"key_count_per_file\": 1}}}" >/dev/null
curl -sf "$admin/api/createInstanceGroup" -d '{"instance_group": {"name": "g", "storage_candidates": ["nfs_01"], "quota": {"capacity": 107374182400}, "version": 1}}' >/dev/null
curl -sf "$meta/api/registerInstance" -d '{"instance_group": "g", "instance_id": "i", "block_size": 16, "location_spec_infos": [{"name": "tp0", "size": 1024}], "model_deployment": {"model_name": "m", "dtype": "bf16"}}' >/dev/null
keys=$(seq 1001 1128 | paste -sd,)
session=$(curl -sf "$meta/api/startWriteCache" -d "{\"instance_id\": \"i\", \"block_keys\": [$keys]}" | python3 -c 'import json, sys; print(json.load(sys.stdin)["write_session_id"])')
curl -sf "$meta/api/finishWriteCache" -d "{\"instance_id\": \"i\", \"write_session_id\": \"$session\", \"success_blocks\": {\"offset\": 128}}" >/dev/null
echo "{\"instance_id\": \"i\", \"query_type\": \"QT_PREFIX_MATCH\", \"block_keys\": [$keys]}" > $dir/body
curl -sf localhost:18301/api/getCacheLocation -d @$dir/body | head -c 300; echo
