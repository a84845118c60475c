#!/usr/bin/env bash
# Fuzzes a real kvcm stack: Schemathesis against the OpenAPI description of both planes, then the
# hand-written hostile cases (tests/fuzz/hostile.py). Every request is checked against kvcm's
# invariants (tests/fuzz/kvcm_fuzz.py): no 5xx, the Tair header on every reply, and no change to
# the Valkey namespace from any rejected request.
#
#   tests/fuzz/run.sh [--examples N] [--hostile-rounds R] [--min-requests M]
#
#   --examples N        Schemathesis test cases per operation and phase (default 40)
#   --hostile-rounds R  rounds of the hostile cases (default 2)
#   --min-requests M    fail unless at least M requests were checked (default 0)
#
# Uses the cluster in KVCM_TEST_VALKEY_URL (make test and make fuzz start one), or starts its own
# on ports 7351.. and stops it at the end. Runs the debug kvcm-api (overflow checks on), which
# `cargo build --bins` builds. Writes its reports under .kvcm/fuzz/.
source "$(dirname "${BASH_SOURCE[0]}")/../../infra/lib.sh"

examples=40 rounds=2 min_requests=0
while [ $# -gt 0 ]; do
  case "$1" in
    --examples) examples="$2"; shift 2 ;;
    --hostile-rounds) rounds="$2"; shift 2 ;;
    --min-requests) min_requests="$2"; shift 2 ;;
    *) die "unknown argument $1 (see the header of $0)" ;;
  esac
done

PY_TOOLS="$("$KVCM_ROOT/infra/install-python-tools.sh")"
API_BIN="$KVCM_ROOT/target/debug/kvcm-api"
[ -x "$API_BIN" ] || die "$API_BIN is missing: run cargo build --bins first"
OUT="$KVCM_HOME/fuzz"
mkdir -p "$OUT"

own_cluster=""
if [ -z "${KVCM_TEST_VALKEY_URL:-}" ]; then
  KVCM_TEST_VALKEY_URL="$("$KVCM_ROOT/infra/valkey-cluster.sh" start --base-port 7351 --dir "$KVCM_HOME/fuzz-valkey")"
  own_cluster=1
fi

ns="fuzz-$$-$RANDOM"
# An admin name the fuzzer cannot guess: it adds admins and deletes accounts by the names it
# generates (the last admin is protected, but not one among several).
admin_user="fuzz-root-$RANDOM$RANDOM"
admin_pw="fuzz-admin-$RANDOM$RANDOM"
log_file="$OUT/$ns-kvcm-api.log"
api_pid=""
cleanup() {
  [ -n "$api_pid" ] && kill "$api_pid" 2>/dev/null && wait "$api_pid" 2>/dev/null
  [ -n "$own_cluster" ] && "$KVCM_ROOT/infra/valkey-cluster.sh" stop --base-port 7351 --dir "$KVCM_HOME/fuzz-valkey" >/dev/null 2>&1
  true
}
trap cleanup EXIT

# meta_auth on and a bootstrap admin. Login back-off is pushed out of reach: Schemathesis'
# ignored_auth check sends many wrong credentials from one address and expects 401 every time
# (the back-off itself is tested in tests/tests/security.rs).
coproc API {
  KVCM_VALKEY_URL="$KVCM_TEST_VALKEY_URL" KVCM_NAMESPACE="$ns" KVCM_META_PORT=0 KVCM_ADMIN_PORT=0 \
    KVCM_GRPC_META_PORT=0 KVCM_GRPC_ADMIN_PORT=0 \
    KVCM_META_AUTH=true KVCM_AUTH_BACKOFF_AFTER=1000000000 KVCM_BOOTSTRAP_ADMIN_USER="$admin_user" KVCM_BOOTSTRAP_ADMIN_PASSWORD="$admin_pw" \
    KVCM_LOG_LEVEL=warn exec "$API_BIN" 2>"$log_file"
}
api_pid=$API_PID
read -r -t 30 line <&"${API[0]}" || die "kvcm-api did not start: $(tail -5 "$log_file")"
meta="$(sed -n 's/.*meta=\([^ ]*\).*/\1/p' <<<"$line")"
admin="$(sed -n 's/.*admin=\([^ ]*\).*/\1/p' <<<"$line")"
admin_auth="Basic $(printf '%s:%s' "$admin_user" "$admin_pw" | base64 -w0)"

# What the fuzzers find in place: a storage, the group "fz", its instance "fz-inst" and an engine
# API key scoped to "fz" (the meta plane is fuzzed with it, so scope refusals are exercised too).
rpc() { curl -sf -H "Authorization: $admin_auth" "$admin/api/$1" -d "$2"; }
rpc addStorage "{\"storage\": {\"global_unique_name\": \"fz-store\", \"nfs\": {\"root_path\": \"$OUT/data/\"}}}" >/dev/null
rpc createInstanceGroup '{"instance_group": {"name": "fz", "storage_candidates": ["fz-store"]}}' >/dev/null
rpc registerInstance '{"instance_group": "fz", "instance_id": "fz-inst", "block_size": 4,
  "location_spec_infos": [{"name": "tp0", "size": 64}, {"name": "tp1", "size": 64}],
  "model_deployment": {"model_name": "m", "dtype": "bf16"}}' >/dev/null
token="$(rpc createApiKey '{"name": "fuzz", "role": "ROLE_USER", "instance_groups": ["fz"]}' \
  | python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])')"

export KVCM_FUZZ_META="$meta" KVCM_FUZZ_ADMIN="$admin" KVCM_FUZZ_NAMESPACE="$ns"
export KVCM_FUZZ_VALKEY="${KVCM_TEST_VALKEY_URL%%,*}" KVCM_FUZZ_COUNT="$OUT/$ns.count"
export KVCM_FUZZ_META_AUTH="Bearer $token" KVCM_FUZZ_ADMIN_AUTH="$admin_auth"
export PYTHONPATH="$KVCM_ROOT/tests/fuzz:$PY_TOOLS" SCHEMATHESIS_HOOKS=schemathesis_hooks
: >"$KVCM_FUZZ_COUNT"

status=0
# Tair's status convention answers domain errors with HTTP 200, so Schemathesis' checks that
# expect a 4xx for schema-violating data (and a 2xx for valid data) do not apply.
checks="kvcm_invariants,not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance,unsupported_method,ignored_auth"
# Deleting accounts and revoking keys is fuzzed last: Schemathesis reuses values from replies
# (listAccount names our admin), and once it has added an admin of its own it may rightly delete
# ours — after which nothing else could run as admin.
schemathesis() {
  python3 -c 'import sys; from schemathesis.cli import schemathesis; sys.argv[0] = "schemathesis"; sys.exit(schemathesis())' "$@"
}
run_plane() { # plane base auth report [filters…]
  local plane="$1" base="$2" auth="$3" report="$4"
  shift 4
  log "fuzzing the $plane plane ($examples cases per operation${*:+; $*})"
  schemathesis run "$base/openapi.json" --url "$base" -H "Authorization: $auth" "$@" \
    --checks "$checks" --max-examples "$examples" --workers 1 --phases examples,coverage,fuzzing \
    --generation-database none --suppress-health-check all --request-timeout 30 --no-color \
    --report junit --report-junit-path "$OUT/$ns-$report.junit.xml" >"$OUT/$ns-$report.txt" 2>&1 || status=1
  tail -n 25 "$OUT/$ns-$report.txt" >&2
}
last=(--include-path /api/deleteAccount --include-path /api/revokeApiKey)
run_plane meta "$meta" "$KVCM_FUZZ_META_AUTH" meta
run_plane admin "$admin" "$admin_auth" admin --exclude-path /api/deleteAccount --exclude-path /api/revokeApiKey
python3 "$KVCM_ROOT/tests/fuzz/hostile.py" --rounds "$rounds" >&2 || status=1
run_plane admin "$admin" "$admin_auth" admin-last "${last[@]}"

total=$(awk '{ s += $1 } END { print s + 0 }' "$KVCM_FUZZ_COUNT")
if grep -qE "panicked|a request handler panicked" "$log_file"; then
  log "kvcm-api logged a panic: see $log_file"
  status=1
fi
if [ "$total" -lt "$min_requests" ]; then
  log "only $total requests were checked; at least $min_requests were asked for"
  status=1
fi
echo "fuzz: $total requests checked against $meta and $admin, $([ $status = 0 ] && echo 'no failures' || echo 'FAILURES') (reports in $OUT)"
exit $status
